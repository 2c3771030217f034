/**
 * How the controller caches AddressBlocks: the index functions shared by the IPAM reconcilers
 * (each declares the indexes it reads; declaring one twice is harmless) and the slimming transform.
 * There is deliberately no index by request UID: it would hold one set per block (100,000 blocks →
 * 100,000 sets), while the blocks of a request are among the few of its node.
 */
import type { KubernetesObject } from '@kubernetes/client-node';
import type { AddressBlock } from '../api/v2/addressblock.js';
import { nodeOf, poolOf } from '../api/v2/addressblock.js';

/** Index function of `INDEX_BLOCK_BY_POOL`: the block's `coil.cybozu.com/pool` label. */
export function blockPoolIndex(b: Readonly<AddressBlock>): string[] {
  const pool = poolOf(b);
  return pool ? [pool] : [];
}

/** Index function of `INDEX_BLOCK_BY_NODE`: the block's `coil.cybozu.com/node` label. */
export function blockNodeIndex(b: Readonly<AddressBlock>): string[] {
  const node = nodeOf(b);
  return node ? [node] : [];
}

/**
 * A cache transform for AddressBlocks keeping only what the IPAM reconcilers read — name, uid,
 * resourceVersion, labels, finalizers, deletionTimestamp, index and CIDRs — with the strings that
 * repeat across blocks (apiVersion, kind, pool and node names, finalizer) shared. Cuts a cached
 * block to about half (managedFields and ownerReferences are most of the rest), which is what keeps
 * 100,000 blocks in the controller's memory budget. Each call returns a transform with its own
 * string table (bounded by the number of pools and nodes).
 */
export function cachedAddressBlock(): (obj: KubernetesObject) => KubernetesObject {
  const strings = new Map<string, string>();
  const share = (s: string): string => {
    const known = strings.get(s);
    if (known !== undefined) return known;
    strings.set(s, s);
    return s;
  };
  return (obj) => {
    const b = obj as AddressBlock;
    const m = b.metadata ?? {};
    const labels: Record<string, string> = {};
    for (const [k, v] of Object.entries(m.labels ?? {})) labels[k] = k === 'coil.cybozu.com/request' ? v : share(v);
    const slim: AddressBlock = {
      apiVersion: share(b.apiVersion ?? ''),
      kind: share(b.kind ?? ''),
      metadata: {
        name: m.name,
        uid: m.uid,
        resourceVersion: m.resourceVersion,
        labels,
        ...(m.finalizers && { finalizers: m.finalizers.map(share) }),
        ...(m.deletionTimestamp && { deletionTimestamp: m.deletionTimestamp }),
      },
      index: b.index,
      ...(b.ipv4 !== undefined && { ipv4: b.ipv4 }),
      ...(b.ipv6 !== undefined && { ipv6: b.ipv6 }),
    };
    return slim as KubernetesObject;
  };
}
