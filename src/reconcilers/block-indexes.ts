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
 * resourceVersion, labels, finalizers, deletionTimestamp, index and CIDRs — with what repeats
 * across blocks (apiVersion, kind, pool and node names, the finalizer list itself) shared rather
 * than copied per block. Dropped: managedFields, ownerReferences, generation, creationTimestamp,
 * annotations — about two thirds of a stored block.
 *
 * Readers (keep this list in sync when a reader needs another field): the BlockRequest reconciler
 * (labels pool/node/request, name), PoolManager (index, pool label), the AddressPool reconciler
 * (pool label), the GC (node label, finalizers, deletionTimestamp, uid, resourceVersion — its
 * finalizer patch is guarded by it — and the Event it records: apiVersion, kind, name, uid),
 * the informer itself (resourceVersion), and the indexes above. Webhooks do not read blocks.
 *
 * Each call returns a transform with its own string and list tables (bounded by the number of
 * pools, nodes and distinct finalizer lists). Shared lists are frozen, as the cache freezes
 * everything it stores.
 */
export function cachedAddressBlock(): (obj: KubernetesObject) => KubernetesObject {
  const strings = new Map<string, string>();
  const lists = new Map<string, readonly string[]>();
  const share = (s: string): string => {
    const known = strings.get(s);
    if (known !== undefined) return known;
    strings.set(s, s);
    return s;
  };
  // One array for every block finalized by `coil.cybozu.com` instead of 100,000 equal ones
  // (an array and its backing store: about 56 bytes a block).
  const shareList = (list: readonly string[]): string[] => {
    const id = list.join('\n');
    let known = lists.get(id);
    if (known === undefined) lists.set(id, (known = Object.freeze(list.map(share))));
    return known as string[];
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
        ...(m.finalizers && { finalizers: shareList(m.finalizers) }),
        ...(m.deletionTimestamp && { deletionTimestamp: m.deletionTimestamp }),
      },
      index: b.index,
      ...(b.ipv4 !== undefined && { ipv4: b.ipv4 }),
      ...(b.ipv6 !== undefined && { ipv6: b.ipv6 }),
    };
    return slim as KubernetesObject;
  };
}
