/**
 * Index functions over cached AddressBlocks, shared by the IPAM reconcilers (each declares the
 * indexes it reads; declaring one twice is harmless). There is deliberately no index by request
 * UID: it would hold one set per block (100,000 blocks → 100,000 sets), while the blocks of a
 * request are among the few of its node.
 */
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
