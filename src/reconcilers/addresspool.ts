/**
 * AddressPool reconciler: keeps the pool's allocation state (shared with the BlockRequest
 * reconciler through {@link PoolManager}) in step with the cached AddressBlocks, publishes
 * `status.allocatedBlocks`/`status.maxBlocks` and the gauges, and holds the `coil.cybozu.com`
 * finalizer until no AddressBlock of the pool remains.
 *
 * The status is ours (Coil's AddressPool has none), so writing it must never get in a client's way:
 * - it is written only once the spec has settled (`poolStatusSettleMs` after the reconciler first
 *   saw the current generation), so a client updating the object its create returned — Coil's own
 *   tests do — never meets a 409 caused by us;
 * - it is written only when the apiserver serves `addresspools/status` (API discovery, asked again
 *   every `crdProbeIntervalMs`): on Coil's CRD, left in place by `helm install` over Coil, a
 *   status write is a 404, which would otherwise be retried forever. Gauges work either way;
 * - it is written at most once per `poolStatusIntervalMs` per pool: every coild watches every
 *   AddressPool, so each write is an event sent to every node.
 *
 * @see docs/compatibility.md "AddressPool status"
 */
import type Logger from 'bunyan';
import { kindRule } from '../runtime/rbac.js';
import { inject } from 'inversify';
import type { AddressPool } from '../api/v2/addresspool.js';
import { FIN_COIL, INDEX_BLOCK_BY_POOL } from '../api/v2/keys.js';
import { PoolLayoutError } from '../ipam/pool.js';
import { Cache } from '../runtime/cache.js';
import { Client } from '../runtime/client.js';
import { OperatorFacade } from '../runtime/operator-facade.js';
import { Reconciler } from '../runtime/decorators.js';
import { PermanentError, type Result } from '../runtime/errors.js';
import type { Reconcile, Request } from '../runtime/registry.js';
import { TOKENS } from '../runtime/tokens.js';
import { Kinds } from '../api/v2/kinds.js';
import { blockPoolIndex } from './block-indexes.js';
import { IPAM_OPTIONS, type IpamOptions } from './options.js';
import { PoolManager } from './pool-manager.js';

/** While a block of a deleting pool is still being created (not yet cached), look again this soon. */
const PENDING_RECHECK_MS = 1_000;

/**
 * Reconciles one AddressPool. Triggered by the pool and by its AddressBlocks (pool label), so a
 * block created or released re-syncs the counts at once.
 *
 * Leader-only: the allocation state must have one writer.
 */
@Reconciler({
  name: 'addresspool',
  for: Kinds.AddressPool,
  // By the pool label rather than `owns` (the ownerReference): blocks migrated from Coil v1 carry
  // no ownerReference, and the cache may drop ownerReferences to save memory (cachedAddressBlock).
  watches: [{ kind: Kinds.AddressBlock, map: (b) => blockPoolIndex(b).map((name) => ({ name })) }],
  indexes: [{ kind: Kinds.AddressBlock, name: INDEX_BLOCK_BY_POOL, fn: blockPoolIndex }],
  leaderOnly: true,
  rbac: [
    kindRule(Kinds.AddressPool, ['get', 'list', 'watch', 'update', 'patch']),
    kindRule(Kinds.AddressPool, ['get', 'update', 'patch'], { subresource: 'status' }),
    kindRule(Kinds.AddressBlock, ['get', 'list', 'watch']),
  ],
})
export class AddressPoolReconciler implements Reconcile {
  /** When each pool's status was last written (ms since the epoch); one worker, so no lock. */
  private readonly statusWrittenAt = new Map<string, number>();
  /** Per pool: the generation last seen and since when (ms since the epoch). */
  private readonly generationSeen = new Map<string, { generation: number; sinceMs: number }>();
  /** Last discovery answer about `addresspools/status`. */
  private statusProbe: { served: boolean; atMs: number } | undefined;
  private readonly log: Logger;

  constructor(
    @inject(Cache) private readonly cache: Cache,
    @inject(Client) private readonly client: Client,
    @inject(PoolManager) private readonly pools: PoolManager,
    @inject(IPAM_OPTIONS) private readonly options: IpamOptions,
    @inject(OperatorFacade) private readonly operator: OperatorFacade,
    @inject(TOKENS.Logger) logger: Logger,
  ) {
    this.log = logger.child({ reconciler: 'addresspool' });
  }

  /**
   * @throws PermanentError when the spec cannot be laid out (only a pool created without the webhook)
   * @throws ApiError on a failed write (retried; 409/422 mean the cache was stale)
   */
  async reconcile(req: Request): Promise<Result> {
    const pool = this.cache.get(Kinds.AddressPool, req);
    if (!pool) {
      this.pools.drop(req.name);
      this.statusWrittenAt.delete(req.name);
      this.generationSeen.delete(req.name);
      return {};
    }
    // The finalizer goes only when no AddressBlock carries the pool's label (docs/compatibility.md#addresspool-reconciler).
    if (pool.metadata?.deletionTimestamp && pool.metadata.finalizers?.includes(FIN_COIL)) {
      const wait = this.blocksLeft(pool);
      if (wait) return wait;
    }
    // dot-i's finalizer flow (operator-facade.ts): a live pool without the finalizer gets it (the
    // mutating webhook adds it on create; pools created while it was absent get it here); a
    // deleting one is forgotten and loses it. Either way the write re-enqueues the pool.
    if (await this.operator.handleFinalizer(Kinds.AddressPool, pool, FIN_COIL, async (p) => this.forget(p))) return {};
    return this.apply(pool);
  }

  private async apply(pool: Readonly<AddressPool>): Promise<Result> {
    const counts = this.syncState(pool);
    const status = { allocatedBlocks: counts.allocatedBlocks, maxBlocks: counts.maxBlocks.toString() };
    const name = pool.metadata!.name!;
    const now = Date.now();
    const settledAt = this.settledAt(name, pool.metadata?.generation ?? 0, now);
    if (pool.status?.allocatedBlocks === status.allocatedBlocks && pool.status?.maxBlocks === status.maxBlocks) return {};
    const wait = Math.max(settledAt, (this.statusWrittenAt.get(name) ?? 0) + this.options.poolStatusIntervalMs) - now;
    if (wait > 0) return { requeueAfterMs: wait };
    if (!(await this.statusServed(now))) return { requeueAfterMs: this.options.crdProbeIntervalMs };
    this.statusWrittenAt.set(name, now);
    await this.client.patchStatus(Kinds.AddressPool, { name }, status, { resourceVersion: pool.metadata!.resourceVersion! });
    return {};
  }

  /** When the pool's current generation will have been unchanged for `poolStatusSettleMs`. */
  private settledAt(name: string, generation: number, nowMs: number): number {
    let seen = this.generationSeen.get(name);
    if (seen?.generation !== generation) this.generationSeen.set(name, (seen = { generation, sinceMs: nowMs }));
    return seen.sinceMs + this.options.poolStatusSettleMs;
  }

  /** Discovery, cached for `crdProbeIntervalMs`; a missing subresource is logged once per change. */
  private async statusServed(nowMs: number): Promise<boolean> {
    const last = this.statusProbe;
    if (last && nowMs - last.atMs < this.options.crdProbeIntervalMs) return last.served;
    const served = await this.client.servesSubresource(Kinds.AddressPool, 'status');
    this.statusProbe = { served, atMs: nowMs };
    if (!served && last?.served !== false) {
      this.log.warn('the AddressPool CRD has no status subresource (Coil\'s CRD, which `helm install` does not upgrade): pool status is not written until the CRDs are upgraded (docs/compatibility.md); allocation and metrics are unaffected');
    } else if (served && last?.served === false) {
      this.log.info('the AddressPool CRD now serves the status subresource: writing pool status');
    }
    return served;
  }

  /**
   * What to return while a deleting pool still has blocks (or a block being created): the
   * finalizer stays (docs/compatibility.md#addresspool-reconciler). Undefined once none is left.
   */
  private blocksLeft(pool: Readonly<AddressPool>): Result | undefined {
    const name = pool.metadata!.name!;
    try {
      this.pools.sync(pool, Date.now());
    } catch (e) {
      // Counts only feed the gauges here; an unusable spec must not pin the pool forever.
      if (!(e instanceof PoolLayoutError)) throw e;
    }
    // Each remaining block's deletion re-enqueues the pool (watch), so no polling is needed for them.
    if (this.cache.byIndex(Kinds.AddressBlock, INDEX_BLOCK_BY_POOL, name).length > 0) return {};
    if (this.pools.hasPending(name)) return { requeueAfterMs: PENDING_RECHECK_MS };
    return undefined;
  }

  /** The cleanup of a deleting pool, just before its finalizer goes: its state and gauges. */
  private forget(pool: Readonly<AddressPool>): void {
    const name = pool.metadata!.name!;
    this.pools.drop(name);
    this.statusWrittenAt.delete(name);
    this.generationSeen.delete(name);
  }

  private syncState(pool: Readonly<AddressPool>): ReturnType<PoolManager['sync']> {
    try {
      return this.pools.sync(pool, Date.now());
    } catch (e) {
      if (e instanceof PoolLayoutError) throw new PermanentError(`AddressPool ${pool.metadata?.name}: ${e.message}`, { cause: e });
      throw e;
    }
  }
}
