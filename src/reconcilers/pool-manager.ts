/**
 * The controller's in-memory block allocation state, shared by the AddressPool reconciler (which
 * re-syncs it from the informer cache) and the BlockRequest reconciler (which allocates from it).
 *
 * @see docs/compatibility.md#block-allocation-in-the-controller (Coil's `PoolManager`)
 */
import { inject, injectable } from 'inversify';
import { Gauge } from 'prom-client';
import { addressBlockName } from '../api/v2/addressblock.js';
import type { AddressPool } from '../api/v2/addresspool.js';
import { INDEX_BLOCK_BY_POOL } from '../api/v2/keys.js';
import { PoolLayout, PoolState, type BlockCidrs } from '../ipam/pool.js';
import { Cache } from '../runtime/cache.js';
import { Metrics } from '../runtime/metrics.js';
import { Kinds } from '../api/v2/kinds.js';

/**
 * How long an index handed out but not yet seen in the cache is kept reserved. The informer
 * delivers a created block in milliseconds; past this the entry is presumed stale (its block was
 * deleted before we saw it), and should it not be, the name `<pool>-<index>` still cannot be
 * created twice (the create answers AlreadyExists).
 */
const PENDING_TTL_MS = 120_000;

/** One allocation: the block to create, named `<pool>-<index>`. */
export interface BlockChoice {
  readonly kind: 'allocated';
  readonly name: string;
  readonly block: BlockCidrs;
}

/** Counts of one pool after a sync; `maxBlocks` is a bigint (IPv6 pools exceed 2^53). */
export interface PoolCounts {
  readonly allocatedBlocks: number;
  readonly maxBlocks: bigint;
}

interface Pending {
  /** UID of the BlockRequest the index went to; `''` when the name turned out taken by another. */
  uid: string;
  readonly sinceMs: number;
}

interface PoolEntry {
  state: PoolState;
  /** `blockSizeBits` and subnets the layout was built from, to rebuild after an append. */
  specKey: string;
  /** Indices handed out whose AddressBlock the cache has not shown yet. */
  readonly pending: Map<bigint, Pending>;
}

/**
 * Per pool: the taken block indices (cached AddressBlocks ∪ indices handed out and not yet seen),
 * and the gauges `coil_controller_max_blocks{pool}` / `coil_controller_allocated_blocks{pool}`.
 *
 * Concurrency: no lock is needed because {@link allocate} is synchronous — choosing the lowest
 * free index and marking it happen in one turn of the event loop, so two BlockRequest reconciles
 * (or a re-sync racing them) can never pick the same index. Callers must not await between
 * `allocate` and using its answer. Handed-out indices survive {@link sync} until the cache shows
 * their block, so a re-sync between a create and its watch event cannot free them (Coil #152).
 */
@injectable()
export class PoolManager {
  private readonly pools = new Map<string, PoolEntry>();
  private readonly maxBlocks: Gauge<'pool'>;
  private readonly allocatedBlocks: Gauge<'pool'>;

  constructor(
    @inject(Cache) private readonly cache: Cache,
    @inject(Metrics) metrics: Metrics,
  ) {
    const registers = [metrics.registry];
    this.maxBlocks = new Gauge({ name: 'coil_controller_max_blocks', help: 'the maximum number of blocks', labelNames: ['pool'], registers });
    this.allocatedBlocks = new Gauge({ name: 'coil_controller_allocated_blocks', help: 'the number of allocated blocks', labelNames: ['pool'], registers });
  }

  /**
   * Rebuilds the pool's state from the cached AddressBlocks labelled with it (plus pending
   * indices) and updates the gauges.
   * @throws PoolLayoutError when the spec cannot be laid out (the webhook should have refused it)
   */
  sync(pool: Readonly<AddressPool>, nowMs: number): PoolCounts {
    const name = pool.metadata!.name!;
    const layout = PoolLayout.fromSpec(pool.spec);
    const state = new PoolState(layout);
    const cached = this.cache.byIndex(Kinds.AddressBlock, INDEX_BLOCK_BY_POOL, name);
    for (const b of cached) if (Number.isInteger(b.index) && b.index >= 0) state.add(BigInt(b.index));
    const entry = this.pools.get(name);
    const pending = entry?.pending ?? new Map<bigint, Pending>();
    for (const [index, p] of pending) {
      if (state.has(index) || nowMs - p.sinceMs > PENDING_TTL_MS) pending.delete(index);
      else state.add(index);
    }
    this.pools.set(name, { state, specKey: specKey(pool), pending });
    return this.publish(name, state);
  }

  /**
   * Takes the lowest free block of `pool` for BlockRequest `requestUid` and marks it at once.
   * Builds the state from the cache on first use or after the spec grew.
   * @returns undefined when the pool has no free block ("out of blocks")
   * @throws PoolLayoutError as {@link sync}
   */
  allocate(pool: Readonly<AddressPool>, requestUid: string, nowMs: number, skip?: (block: BlockCidrs) => boolean): BlockChoice | undefined {
    const name = pool.metadata!.name!;
    const entry = this.entryOf(pool, nowMs);
    const block = entry.state.allocate(skip);
    if (block === undefined) return undefined;
    entry.pending.set(block.index, { uid: requestUid, sinceMs: nowMs });
    this.publish(name, entry.state);
    return { kind: 'allocated', name: addressBlockName(name, block.index), block };
  }

  /**
   * Takes block `index` of `pool` for BlockRequest `requestUid` if it is free (a claim back,
   * docs/ipam-recovery.md#claim-back), marking it at once as {@link allocate} does.
   * @returns the choice, `taken`, or `out-of-range`
   * @throws PoolLayoutError as {@link sync}
   */
  take(pool: Readonly<AddressPool>, requestUid: string, index: bigint, nowMs: number): BlockChoice | 'taken' | 'out-of-range' {
    const name = pool.metadata!.name!;
    const entry = this.entryOf(pool, nowMs);
    const block = entry.state.take(index);
    if (typeof block === 'string') return block;
    entry.pending.set(block.index, { uid: requestUid, sinceMs: nowMs });
    this.publish(name, entry.state);
    return { kind: 'allocated', name: addressBlockName(name, block.index), block };
  }

  /** The CIDRs of block `index` of `pool`, allocated or not. @throws PoolLayoutError as {@link sync} */
  blockAt(pool: Readonly<AddressPool>, index: bigint, nowMs: number): BlockCidrs | undefined {
    return index < 0n ? undefined : this.entryOf(pool, nowMs).state.layout.blockAt(index);
  }

  /** The pool's state, built from the cache on first use or after the spec changed. */
  private entryOf(pool: Readonly<AddressPool>, nowMs: number): PoolEntry {
    const name = pool.metadata!.name!;
    const entry = this.pools.get(name);
    if (entry !== undefined && entry.specKey === specKey(pool)) return entry;
    this.sync(pool, nowMs);
    return this.pools.get(name)!;
  }

  /** Name of a block handed out to `requestUid` that the cache may not show yet (idempotency, Coil #198). */
  pendingBlockOf(poolName: string, requestUid: string): string | undefined {
    for (const [index, p] of this.pools.get(poolName)?.pending ?? []) if (p.uid === requestUid) return addressBlockName(poolName, index);
    return undefined;
  }

  /** True while an index of `poolName` is handed out but its block is not in the cache yet. */
  hasPending(poolName: string): boolean {
    return (this.pools.get(poolName)?.pending.size ?? 0) > 0;
  }

  /**
   * The index's name was already taken by another request's block (the cache lagged, Coil #152):
   * it stays marked, no longer attributed to the request, until the cache shows that block.
   */
  markForeign(poolName: string, index: bigint): void {
    const p = this.pools.get(poolName)?.pending.get(index);
    if (p) p.uid = '';
  }

  /** Returns an index whose AddressBlock could not be created. */
  release(poolName: string, index: bigint): void {
    const entry = this.pools.get(poolName);
    if (!entry) return;
    entry.pending.delete(index);
    entry.state.remove(index);
    this.publish(poolName, entry.state);
  }

  /** Forgets a deleted pool and drops its gauge series. */
  drop(poolName: string): void {
    this.pools.delete(poolName);
    this.maxBlocks.remove({ pool: poolName });
    this.allocatedBlocks.remove({ pool: poolName });
  }

  private publish(name: string, state: PoolState): PoolCounts {
    const counts = { allocatedBlocks: state.allocatedCount, maxBlocks: state.maxBlocks };
    this.maxBlocks.set({ pool: name }, Number(counts.maxBlocks));
    this.allocatedBlocks.set({ pool: name }, counts.allocatedBlocks);
    return counts;
  }
}

function specKey(pool: Readonly<AddressPool>): string {
  return JSON.stringify([pool.spec.blockSizeBits, pool.spec.subnets]);
}
