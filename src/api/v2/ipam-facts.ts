/**
 * API objects → the facts {@link checkIpam} reads (src/ipam/ipam-check.ts). One conversion, used by
 * `kubectl coil` on what it lists and by coil-controller on what it caches (a cached AddressBlock
 * is slimmed, but keeps everything read here: src/reconcilers/block-indexes.ts). Pure.
 */
import type { V1Node, V1Pod } from '@kubernetes/client-node';
import type { AddressBlock } from './addressblock.js';
import type { AddressPool } from './addresspool.js';
import { isAnswered, type BlockRequest } from './blockrequest.js';
import { LABEL_NODE, LABEL_POOL } from './keys.js';
import type { AllocationFacts, BlockFacts, NodeBlockFacts, NodeViewFacts, OrphanAddressFacts, ObjectRef, PodFacts, PoolFacts, RequestFacts } from '../../ipam/ipam-check.js';
import { podAddresses } from '../../ipam/pod-ips.js';

interface Meta {
  readonly metadata?: { name?: string; namespace?: string; uid?: string; resourceVersion?: string; creationTimestamp?: Date | string; deletionTimestamp?: Date | string };
}

/** The reference of `obj` as kind `kind`. */
export function refOf(kind: ObjectRef['kind'], obj: Meta): ObjectRef {
  const m = obj.metadata ?? {};
  return { kind, name: m.name ?? '', ...(m.namespace && { namespace: m.namespace }), uid: m.uid ?? '', resourceVersion: m.resourceVersion ?? '' };
}

function ms(t: Date | string | undefined): number | undefined {
  if (t === undefined) return undefined;
  const v = t instanceof Date ? t.getTime() : Date.parse(t);
  return Number.isNaN(v) ? undefined : v;
}

export function poolFacts(p: AddressPool): PoolFacts {
  return { ref: refOf('AddressPool', p), blockSizeBits: p.spec?.blockSizeBits ?? 5, subnets: p.spec?.subnets ?? [] };
}

export function blockFacts(b: AddressBlock): BlockFacts {
  const deleting = ms(b.metadata?.deletionTimestamp);
  return {
    ref: refOf('AddressBlock', b), pool: b.metadata?.labels?.[LABEL_POOL] ?? '', node: b.metadata?.labels?.[LABEL_NODE] ?? '', index: b.index,
    ...(b.ipv4 !== undefined && { ipv4: b.ipv4 }), ...(b.ipv6 !== undefined && { ipv6: b.ipv6 }), ...(deleting !== undefined && { deletingSinceMs: deleting }),
  };
}

export function nodeRef(n: V1Node): ObjectRef {
  return refOf('Node', n);
}

/**
 * A Pod that may hold addresses of coil: scheduled, not host-network, not finished
 * (Succeeded/Failed pods keep podIPs in status after their sandbox is gone). Its `ips` are empty
 * until the kubelet writes them; such a Pod still counts as the owner of a coild allocation that
 * names it. @returns undefined for any other Pod
 */
export function podFacts(p: V1Pod): PodFacts | undefined {
  if (!p.spec?.nodeName || p.spec.hostNetwork) return undefined;
  const phase = p.status?.phase;
  if (phase === 'Succeeded' || phase === 'Failed') return undefined;
  return { ref: refOf('Pod', p), node: p.spec.nodeName, ips: podAddresses(p) };
}

export function requestFacts(r: BlockRequest): RequestFacts {
  return {
    ref: refOf('BlockRequest', r), pool: r.spec?.poolName ?? '', node: r.spec?.nodeName ?? '',
    createdMs: ms(r.metadata?.creationTimestamp) ?? 0, answered: isAnswered(r.status),
  };
}

/**
 * coild's `GET /ipam` body → a node view. Read loosely: fields coild may not have (the
 * `unreadableBlocks` list of newer coilds) are taken when present, ignored when absent.
 * @returns undefined when the body is not such a view
 */
export function nodeViewFacts(body: unknown): NodeViewFacts | undefined {
  if (typeof body !== 'object' || body === null) return undefined;
  const b = body as { node?: unknown; allocations?: unknown; unreadableBlocks?: unknown; blocks?: unknown; orphans?: unknown };
  if (typeof b.node !== 'string' || !Array.isArray(b.allocations)) return undefined;
  const str = (v: unknown): string | undefined => (typeof v === 'string' && v !== '' ? v : undefined);
  const allocations: AllocationFacts[] = [];
  for (const a of b.allocations as Record<string, unknown>[]) {
    const containerId = str(a?.containerId);
    const ifname = str(a?.ifname);
    if (!containerId || !ifname) continue;
    const [ipv4, ipv6, podNamespace, podName] = [str(a.ipv4), str(a.ipv6), str(a.podNamespace), str(a.podName)];
    allocations.push({ containerId, ifname, block: str(a.block) ?? '', ...(ipv4 && { ipv4 }), ...(ipv6 && { ipv6 }), ...(podNamespace && { podNamespace }), ...(podName && { podName }) });
  }
  const unreadable = Array.isArray(b.unreadableBlocks)
    ? (b.unreadableBlocks as Record<string, unknown>[]).map((u) => ({ name: str(u?.name) ?? str(u?.block) ?? '?', reason: str(u?.reason) ?? str(u?.error) ?? 'unreadable' }))
    : undefined;
  const num = (v: unknown): number => (typeof v === 'number' && Number.isFinite(v) ? v : 0);
  const blocks: NodeBlockFacts[] | undefined = Array.isArray(b.blocks)
    ? (b.blocks as Record<string, unknown>[]).filter((x) => str(x?.name)).map((x) => ({ name: str(x.name)!, used: num(x.used), free: num(x.free), cooling: num(x.cooling) }))
    : undefined;
  const orphans: OrphanAddressFacts[] | undefined = Array.isArray(b.orphans)
    ? (b.orphans as Record<string, unknown>[]).filter((o) => str(o?.containerId) && str(o?.ifname)).map((o) => {
      const [ipv4, ipv6, podNamespace, podName, block, message] = [str(o.ipv4), str(o.ipv6), str(o.podNamespace), str(o.podName), str(o.block), str(o.message)];
      return {
        containerId: str(o.containerId)!, ifname: str(o.ifname)!, state: str(o.state) ?? 'unknown', ...(ipv4 && { ipv4 }), ...(ipv6 && { ipv6 }),
        ...(podNamespace && { podNamespace }), ...(podName && { podName }), ...(block && { block }), ...(message && { message }),
      };
    })
    : undefined;
  return { node: b.node, allocations, ...(blocks && { blocks }), ...(unreadable && { unreadableBlocks: unreadable }), ...(orphans && { orphans }) };
}
