/**
 * BlockRequest reconciler: answers a node's request for one more block of a pool by creating the
 * AddressBlock at the lowest free index and writing the request's status — exactly once.
 *
 * @see docs/compatibility.md#block-allocation-in-the-controller,
 *   docs/compatibility.md#blockrequest-reconciler; Coil #152, #198, #271
 */
import { inject } from 'inversify';
import { kindRule } from '../runtime/rbac.js';
import type { AddressBlock } from '../api/v2/addressblock.js';
import type { AddressPool } from '../api/v2/addresspool.js';
import type { BlockRequest, BlockRequestStatus } from '../api/v2/blockrequest.js';
import { claimIndexOf, COND_COMPLETE, COND_FAILED, isAnswered, REASON_CLAIM_REFUSED, REASON_OUT_OF_BLOCKS } from '../api/v2/blockrequest.js';
import { findCondition, setCondition } from '../api/v2/conditions.js';
import { ANN_CLAIM_INDEX, API_VERSION, FIN_COIL, INDEX_BLOCK_BY_NODE, INDEX_BLOCK_BY_POOL, INDEX_POD_BY_IP, LABEL_NODE, LABEL_POOL, LABEL_REQUEST } from '../api/v2/keys.js';
import { PoolLayoutError, type BlockCidrs } from '../ipam/pool.js';
import { addressBlockName, nodeOf } from '../api/v2/addressblock.js';
import { describeHolders, podIpIndex, podsHoldingBlock } from './pod-addresses.js';
import { Cache } from '../runtime/cache.js';
import { Client } from '../runtime/client.js';
import { Reconciler } from '../runtime/decorators.js';
import { isAlreadyExists, isNotFound, PermanentError, TransientError, type Result } from '../runtime/errors.js';
import { EventRecorder } from '../runtime/event-recorder.js';
import { fromBinding, type Reconcile, type ReconcileContext, type Request } from '../runtime/registry.js';
import { Kinds, timeMs } from '../api/v2/kinds.js';
import { IPAM_OPTIONS, type IpamOptions } from './options.js';
import { blockNodeIndex, blockPoolIndex } from './block-indexes.js';
import { PoolManager, type BlockChoice } from './pool-manager.js';

/** Name collisions tolerated in one reconcile before backing off (each one marks a taken index). */
const MAX_COLLISIONS = 8;
/** Retry delay while the requested pool is not (yet) in the cache. */
const POOL_MISSING_RETRY_MS = 5_000;

/**
 * Reconciles one BlockRequest:
 * - answered (any condition) → never answered again; deleted `blockRequestTtlMs` after its answer;
 * - a block labelled with this request's UID exists (cached, or created by this process and not
 *   cached yet) → answer with it: the controller crashed or failed between create and status (#198, #271);
 * - pool being deleted or exhausted → `Complete=True` + `Failed=True` (reason `out of blocks`) and a
 *   Warning Event `OutOfBlocks`;
 * - a claim back (annotation `coil.cybozu.com/claim-index`) → that block for the node when the
 *   index is free and the node's live Pods prove it, else `Failed` (reason `claim refused`);
 * - else create `<pool>-<index>` at the lowest free index whose addresses no live Pod of another
 *   node holds (docs/ipam-recovery.md); an AlreadyExists (the cache lagged,
 *   #152) marks that index taken and tries the next one instead of failing;
 * - a request deleted before its answer is written (its node found the block first and consumed
 *   it) is done: the 404 of the status write is not an error.
 * Errors are thrown, never swallowed (Coil returns nil after a failed List).
 *
 * Leader-only; runs `blockRequestConcurrency` keys at once (IpamOptions, `--blockrequest-max-concurrent-reconciles`,
 * default 16; each waits on two API round trips) — safe because {@link PoolManager.allocate} is synchronous.
 */
@Reconciler({
  name: 'blockrequest',
  for: Kinds.BlockRequest,
  reads: [Kinds.AddressPool, Kinds.Pod],
  indexes: [
    { kind: Kinds.Pod, name: INDEX_POD_BY_IP, fn: podIpIndex },
    { kind: Kinds.AddressBlock, name: INDEX_BLOCK_BY_NODE, fn: blockNodeIndex },
    // PoolManager reads blocks by pool; declared here too so this reconciler works on its own.
    { kind: Kinds.AddressBlock, name: INDEX_BLOCK_BY_POOL, fn: blockPoolIndex },
  ],
  leaderOnly: true,
  maxConcurrentReconciles: fromBinding(IPAM_OPTIONS, (o: IpamOptions) => o.blockRequestConcurrency),
  rbac: [
    kindRule(Kinds.BlockRequest, ['get', 'list', 'watch', 'delete']),
    kindRule(Kinds.BlockRequest, ['get', 'update', 'patch'], { subresource: 'status' }),
    kindRule(Kinds.AddressBlock, ['get', 'list', 'watch', 'create']),
    kindRule(Kinds.AddressPool, ['get', 'list', 'watch']),
    kindRule(Kinds.AddressPool, ['update'], { subresource: 'finalizers' }),
    kindRule(Kinds.Pod, ['get', 'list', 'watch']),
    kindRule(Kinds.Event, ['create', 'patch']),
  ],
})
export class BlockRequestReconciler implements Reconcile {
  constructor(
    @inject(Cache) private readonly cache: Cache,
    @inject(Client) private readonly client: Client,
    @inject(EventRecorder) private readonly events: EventRecorder,
    @inject(PoolManager) private readonly pools: PoolManager,
    @inject(IPAM_OPTIONS) private readonly options: IpamOptions,
  ) {}

  /**
   * @throws TransientError while the pool is not cached, or after {@link MAX_COLLISIONS} name collisions
   * @throws PermanentError when the pool's spec cannot be laid out
   * @throws ApiError on a failed write (retried; a stale status write fails its resourceVersion)
   */
  async reconcile(req: Request, ctx: ReconcileContext): Promise<Result> {
    const br = this.cache.get(Kinds.BlockRequest, req);
    if (!br) return {};
    if (isAnswered(br.status)) return this.expire(br);
    const uid = br.metadata!.uid!;
    const poolName = br.spec.poolName;
    const existing = this.blockOf(br) ?? this.pools.pendingBlockOf(poolName, uid);
    if (existing !== undefined) return this.answerAllocated(br, existing);
    const pool = this.cache.get(Kinds.AddressPool, { name: poolName });
    if (!pool) throw new TransientError(`AddressPool ${poolName} not found`, POOL_MISSING_RETRY_MS);
    if (pool.metadata?.deletionTimestamp) return this.answerFailed(br, `pool ${poolName} is being deleted`);
    const claim = claimIndexOf(br);
    if (claim !== undefined) return this.claim(br, pool, claim);
    for (let collisions = 0; collisions < MAX_COLLISIONS; collisions++) {
      // Stop when told to (shutdown past its deadline, Lease lost): a created block is found by
      // the next leader through its request label and answered then.
      ctx.signal.throwIfAborted();
      const choice = this.allocate(pool, uid, br.spec.nodeName, ctx.log);
      if (choice === undefined) return this.answerFailed(br, `pool ${poolName} does not have free blocks`);
      const name = await this.createBlock(pool, br, choice);
      ctx.signal.throwIfAborted();
      if (name !== undefined) return this.answerAllocated(br, name);
    }
    throw new TransientError(`AddressPool ${poolName}: ${MAX_COLLISIONS} block names already taken; the cache is behind`);
  }

  /** The cached block already answering this request: one of its node's, labelled with its UID. */
  private blockOf(br: Readonly<BlockRequest>): string | undefined {
    const uid = br.metadata!.uid!;
    return this.cache.byIndex(Kinds.AddressBlock, INDEX_BLOCK_BY_NODE, br.spec.nodeName).find((b) => b.metadata?.labels?.[LABEL_REQUEST] === uid)?.metadata?.name;
  }

  /**
   * The lowest free block that holds no live Pod's address on a node other than `node`
   * (docs/ipam-recovery.md#what-the-controller-never-hands-out): after its AddressBlock was lost
   * (deleted with its finalizer, an uninstall, an etcd restore), such a block belongs to those Pods.
   */
  private allocate(pool: Readonly<AddressPool>, uid: string, node: string, log?: ReconcileContext['log']): BlockChoice | undefined {
    const skip = (block: BlockCidrs): boolean => {
      const others = podsHoldingBlock(this.cache, block).filter((h) => h.node !== node);
      if (others.length > 0) log?.info({ pool: pool.metadata?.name, index: String(block.index), pods: describeHolders(others) }, 'skipping a free block: live Pods of other nodes hold its addresses');
      return others.length > 0;
    };
    return this.layoutSafe(pool, () => this.pools.allocate(pool, uid, Date.now(), skip));
  }

  private layoutSafe<T>(pool: Readonly<AddressPool>, f: () => T): T {
    try {
      return f();
    } catch (e) {
      if (e instanceof PoolLayoutError) throw new PermanentError(`AddressPool ${pool.metadata?.name}: ${e.message}`, { cause: e });
      throw e;
    }
  }

  /**
   * A node claims back block `index` (annotation {@link ANN_CLAIM_INDEX}): its live Pods hold
   * addresses of it and no AddressBlock does (docs/ipam-recovery.md#claim-back). Granted — the
   * block `<pool>-<index>` created for the node — only when the index is free and the Pods prove
   * it: at least one live Pod of that node holds an address inside it and no live Pod of another
   * node does. A block of that name already held by the node answers the claim as it stands.
   * Anything else is refused (`Failed`, reason `claim refused`); coild asks again later.
   */
  private async claim(br: Readonly<BlockRequest>, pool: Readonly<AddressPool>, index: bigint): Promise<Result> {
    const node = br.spec.nodeName;
    const poolName = pool.metadata!.name!;
    const name = addressBlockName(poolName, index);
    const held = this.cache.get(Kinds.AddressBlock, { name });
    if (held) {
      if (nodeOf(held) === node && !held.metadata?.deletionTimestamp) return this.answerAllocated(br, name);
      return this.answerRefused(br, `block ${name} is ${held.metadata?.deletionTimestamp ? 'being deleted' : `held by node ${nodeOf(held) ?? '(none)'}`}`);
    }
    const cidrs = this.layoutSafe(pool, () => this.pools.blockAt(pool, index, Date.now()));
    if (cidrs === undefined) return this.answerRefused(br, `pool ${poolName} has no block index ${index}`);
    const holders = podsHoldingBlock(this.cache, cidrs);
    const others = holders.filter((h) => h.node !== node);
    if (others.length > 0) return this.answerRefused(br, `live Pods of other nodes hold addresses of block ${name}: ${describeHolders(others)}`);
    const mine = holders.filter((h) => h.node === node);
    if (mine.length === 0) return this.answerRefused(br, `no live Pod of node ${node} holds an address of block ${name} (status.podIPs)`);
    const choice = this.layoutSafe(pool, () => this.pools.take(pool, br.metadata!.uid!, index, Date.now()));
    if (choice === 'out-of-range') return this.answerRefused(br, `pool ${poolName} has no block index ${index}`);
    if (choice === 'taken') throw new TransientError(`block ${name} is being handed out to another request`, POOL_MISSING_RETRY_MS);
    const created = await this.createBlock(pool, br, choice);
    if (created === undefined) throw new TransientError(`block ${name} exists though the cache does not show it yet`, POOL_MISSING_RETRY_MS);
    this.events.event(br as BlockRequest, 'Normal', 'BlockClaimed', `re-created ${name} for node ${node}: its live Pods hold addresses of it: ${describeHolders(mine)}`);
    return this.answerAllocated(br, created);
  }

  private async answerRefused(br: Readonly<BlockRequest>, message: string): Promise<Result> {
    const now = new Date().toISOString();
    let conditions = setCondition(br.status?.conditions, { type: COND_COMPLETE, status: 'True', reason: 'completed with failure', message: 'completed with failure' }, now);
    conditions = setCondition(conditions, { type: COND_FAILED, status: 'True', reason: REASON_CLAIM_REFUSED, message }, now);
    await this.writeStatus(br, { conditions });
    this.events.event(br as BlockRequest, 'Warning', 'ClaimRefused', message);
    return {};
  }

  /** Creates the chosen block. @returns its name, or undefined when the name was another request's */
  private async createBlock(pool: Readonly<AddressPool>, br: Readonly<BlockRequest>, choice: BlockChoice): Promise<string | undefined> {
    const poolName = pool.metadata!.name!;
    const uid = br.metadata!.uid!;
    const block: AddressBlock = {
      metadata: {
        name: choice.name,
        labels: { [LABEL_POOL]: poolName, [LABEL_NODE]: br.spec.nodeName, [LABEL_REQUEST]: uid },
        finalizers: [FIN_COIL],
        ownerReferences: [{ apiVersion: API_VERSION, kind: 'AddressPool', name: poolName, uid: pool.metadata!.uid!, controller: true, blockOwnerDeletion: true }],
      },
      index: Number(choice.block.index),
      ...(choice.block.ipv4 !== undefined && { ipv4: choice.block.ipv4 }),
      ...(choice.block.ipv6 !== undefined && { ipv6: choice.block.ipv6 }),
    };
    try {
      await this.client.create(Kinds.AddressBlock, block);
      return choice.name;
    } catch (e) {
      if (!isAlreadyExists(e)) {
        this.pools.release(poolName, choice.block.index);
        throw e;
      }
    }
    // Coil #152: the name exists though our state said free. Ours from an earlier attempt? Then reuse it.
    const other = await this.client.get(Kinds.AddressBlock, { name: choice.name });
    if (other?.metadata?.labels?.[LABEL_REQUEST] === uid) return choice.name;
    this.pools.markForeign(poolName, choice.block.index);
    return undefined;
  }

  private async answerAllocated(br: Readonly<BlockRequest>, blockName: string): Promise<Result> {
    const now = new Date().toISOString();
    const status: BlockRequestStatus = {
      addressBlockName: blockName,
      conditions: setCondition(br.status?.conditions, { type: COND_COMPLETE, status: 'True', reason: 'allocated', message: `allocated a block ${blockName}` }, now),
    };
    await this.writeStatus(br, status);
    return {};
  }

  private async answerFailed(br: Readonly<BlockRequest>, message: string): Promise<Result> {
    const now = new Date().toISOString();
    let conditions = setCondition(br.status?.conditions, { type: COND_COMPLETE, status: 'True', reason: 'completed with failure', message: 'completed with failure' }, now);
    conditions = setCondition(conditions, { type: COND_FAILED, status: 'True', reason: REASON_OUT_OF_BLOCKS, message }, now);
    if (await this.writeStatus(br, { conditions })) this.events.event(br as BlockRequest, 'Warning', 'OutOfBlocks', message);
    return {};
  }

  /**
   * Guarded by the resourceVersion the decision was made on, so a request is answered only once.
   * A request deleted meanwhile (404) is done, not a failure: its node saw the block labelled with
   * its UID in its cache before this answer, consumed it and deleted the request — routine under
   * load, and at thousands of nodes a warning per request would bury the real ones.
   * @returns false when the request was gone
   */
  private async writeStatus(br: Readonly<BlockRequest>, status: BlockRequestStatus): Promise<boolean> {
    try {
      await this.client.patchStatus(Kinds.BlockRequest, { name: br.metadata!.name! }, status, { resourceVersion: br.metadata!.resourceVersion! });
      return true;
    } catch (e) {
      if (isNotFound(e)) return false;
      throw e;
    }
  }

  /**
   * Deletes an answered request once it is older than the TTL
   * (docs/compatibility.md#a-lossy-blockrequest-handshake).
   */
  private async expire(br: Readonly<BlockRequest>): Promise<Result> {
    const ttl = this.options.blockRequestTtlMs;
    if (ttl <= 0) return {};
    const answeredMs = timeMs(findCondition(br.status?.conditions, COND_COMPLETE)?.lastTransitionTime) ?? timeMs(br.metadata?.creationTimestamp) ?? 0;
    const left = answeredMs + ttl - Date.now();
    if (left > 0) return { requeueAfterMs: left };
    await this.client.delete(Kinds.BlockRequest, { name: br.metadata!.name! }, { uid: br.metadata!.uid! });
    return {};
  }
}
