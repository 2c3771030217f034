/**
 * The controller's view of Pods: their addresses and node, nothing else. The BlockRequest
 * reconciler must never hand out a block that holds a live Pod's address on another node, and
 * must see which Pods prove a node's claim to a block (docs/ipam-recovery.md); clusters hold up to
 * 150,000 Pods, so the cache keeps per Pod only what that needs — name and namespace (the cache
 * key), resourceVersion (the informer's), `spec.nodeName` and the addresses of `status.podIPs`
 * (none for host-network Pods, whose addresses are the node's) — and finished Pods
 * (Succeeded/Failed) are not cached at all (field selector). An index maps each address to its Pods.
 */
import type { KubernetesObject, V1Pod } from '@kubernetes/client-node';
import { INDEX_POD_BY_IP } from '../api/v2/keys.js';
import { Kinds } from '../api/v2/kinds.js';
import { addressAt, cidrContainsAddress, cidrSize, formatAddress, parseBlockField, tryParseAddress, type Cidr } from '../ipam/cidr.js';
import { podAddresses } from '../ipam/pod-ips.js';

export { podAddresses };
import type { Cache } from '../runtime/cache.js';

/** Server-side filter of the Pod informer: Pods that may still run something. */
export const LIVE_POD_FIELD_SELECTOR = 'status.phase!=Succeeded,status.phase!=Failed';

/** Index function of {@link INDEX_POD_BY_IP}. */
export function podIpIndex(p: Readonly<V1Pod>): string[] {
  return podAddresses(p);
}

/**
 * A cache transform for Pods keeping what {@link podAddresses} and the reconcilers read: name,
 * namespace, resourceVersion, `spec.nodeName` (one string per node, shared) and `status.podIPs`
 * (canonical; none for host-network Pods).
 */
export function cachedPod(): (obj: KubernetesObject) => KubernetesObject {
  // Node and namespace names, one string each (bounded by the nodes and namespaces of the cluster).
  const strings = new Map<string, string>();
  const share = (s: string): string => {
    const known = strings.get(s);
    if (known !== undefined) return known;
    strings.set(s, s);
    return s;
  };
  return (obj) => {
    const p = obj as V1Pod;
    const ips = podAddresses(p);
    const slim: V1Pod = {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: p.metadata?.name, namespace: p.metadata?.namespace === undefined ? undefined : share(p.metadata.namespace), resourceVersion: p.metadata?.resourceVersion },
      // No containers (the field is required by the type, not by any reader), no phase (finished
      // Pods are not cached at all: LIVE_POD_FIELD_SELECTOR).
      spec: { ...(p.spec?.nodeName && { nodeName: share(p.spec.nodeName) }) } as V1Pod['spec'],
      status: { ...(ips.length > 0 && { podIPs: ips.map((ip) => ({ ip })) }) },
    };
    return slim as KubernetesObject;
  };
}

/** A Pod holding addresses of a block. */
export interface BlockHolder {
  readonly namespace: string;
  readonly name: string;
  readonly node: string | undefined;
  /** Its addresses inside the block. */
  readonly addresses: string[];
}

/** Above this many addresses a block is checked by scanning the cached Pods instead of probing each address. */
const PROBE_LIMIT = 4096;

/**
 * The cached live Pods holding an address of the block `ipv4`/`ipv6` (AddressBlock fields, read
 * as coild reads them). O(block size) index probes for blocks up to 4,096 addresses, else one
 * scan of the cached Pods. Unparsable fields hold nothing.
 * @param cache holds Pods transformed by {@link cachedPod} and indexed by {@link INDEX_POD_BY_IP}
 */
export function podsHoldingBlock(cache: Cache, block: { readonly ipv4?: string; readonly ipv6?: string }): BlockHolder[] {
  const cidrs: Cidr[] = [];
  for (const [family, text] of [[4, block.ipv4], [6, block.ipv6]] as const) {
    if (!text) continue;
    try {
      cidrs.push(parseBlockField(family, text));
    } catch {
      // an unreadable field holds nothing we could compare
    }
  }
  const found = new Map<string, { pod: Readonly<V1Pod>; addresses: string[] }>();
  const add = (pod: Readonly<V1Pod>, ip: string): void => {
    const key = `${pod.metadata?.namespace}/${pod.metadata?.name}`;
    const e = found.get(key) ?? { pod, addresses: [] };
    if (!e.addresses.includes(ip)) e.addresses.push(ip);
    found.set(key, e);
  };
  for (const c of cidrs) {
    const size = cidrSize(c);
    if (size <= BigInt(PROBE_LIMIT)) {
      for (let off = 0n; off < size; off++) {
        const ip = formatAddress(c.family, addressAt(c, off)!);
        for (const pod of cache.byIndex(Kinds.Pod, INDEX_POD_BY_IP, ip)) add(pod, ip);
      }
    } else {
      for (const pod of cache.list(Kinds.Pod)) {
        for (const ip of podAddresses(pod)) {
          const a = tryParseAddress(ip);
          if (a && cidrContainsAddress(c, a)) add(pod, ip);
        }
      }
    }
  }
  return [...found.values()]
    .map(({ pod, addresses }) => ({ namespace: pod.metadata?.namespace ?? '', name: pod.metadata?.name ?? '', node: pod.spec?.nodeName, addresses }))
    .sort((a, b) => `${a.namespace}/${a.name}`.localeCompare(`${b.namespace}/${b.name}`));
}

/** `ns/name (ip, ip) on node`, for Events and conditions; at most `max` Pods, then `… and N more`. */
export function describeHolders(holders: readonly BlockHolder[], max = 5): string {
  const shown = holders.slice(0, max).map((h) => `${h.namespace}/${h.name} (${h.addresses.join(', ')})${h.node ? ` on ${h.node}` : ''}`);
  return holders.length > max ? `${shown.join(', ')} and ${holders.length - max} more` : shown.join(', ');
}
