/**
 * BlockRequester: asks the IPAM controller for one more AddressBlock of a pool for this node and
 * learns the answer level-triggered from the informer cache, so a reply can never be lost.
 *
 * Coil notifies its waiter by a non-blocking send on an unbuffered channel: an answer that comes
 * before the waiter blocks is dropped, the ADD times out, kubelet retries, coild deletes and
 * re-creates `req-<pool>-<node>`, and the controller carves a second block that leaks (Coil #271,
 * docs/compatibility.md#a-lossy-blockrequest-handshake). Here nothing is a one-shot signal: every
 * BlockRequest or AddressBlock event of this node, and a slow poll, re-reads the outstanding
 * request's state from the cache. A request outlives the waits on it: when an ADD gives up, the
 * next ADD of the pool joins the same request instead of issuing another.
 *
 * Naming: each request gets a unique name from `generateName: req-<pool>-<node>-`. Coil's fixed
 * `req-<pool>-<node>` must be deleted before it is re-created, and between the delete and the
 * create an answer to the old one can arrive and be mistaken for the new one (the same name,
 * another UID) or land on a block nobody waits for; with unique names every request is identified
 * by its UID. The node and pool are also labels, so coild's informer selects only its own requests.
 *
 * Clean-up: coild deletes each request it consumed, as Coil's coild does — Coil's controller
 * never deletes an answered request (docs/compatibility.md "BlockRequests"), so under it (a cluster moving node
 * by node) requests left to our controller's TTL would pile up until their Node goes. A request
 * is deleted once answered and no longer waited on: settled (its block in the cache, or failed,
 * or lost), or answered and not outstanding (left by an earlier coild run). Every delete names the
 * request's UID as a precondition, so it can only ever remove the very request that was answered.
 * The controller's TTL stays as a safety net for requests of a coild that is gone.
 */
import type Logger from 'bunyan';
import { kindRule } from '../../runtime/rbac.js';
import type { AddressBlock } from '../../api/v2/addressblock.js';
import { blockRequestResult, type BlockRequest } from '../../api/v2/blockrequest.js';
import { INDEX_BLOCK_BY_REQUEST, LABEL_NODE, LABEL_POOL, LABEL_REQUEST } from '../../api/v2/keys.js';
import type { Cache } from '../../runtime/cache.js';
import type { Client } from '../../runtime/client.js';
import { isConflict } from '../../runtime/errors.js';
import type { RbacRule } from '../../runtime/registry.js';
import { systemClock, type Clock } from '../../runtime/clock.js';
import { every } from '../../runtime/periodic.js';
import type { Runnable } from '../../runtime/runnable.js';
import { Kinds } from '../../api/v2/kinds.js';
import type { KindDescriptor } from '../../runtime/kind.js';

/** How one wait for a block ended. */
export type BlockRequestOutcome =
  /** The block is in the cache (so the caller can allocate from it at once). */
  | { readonly kind: 'allocated'; readonly blockName: string }
  /** The controller answered `Failed` (Coil's reason `out of blocks`). */
  | { readonly kind: 'failed'; readonly reason: string; readonly message: string }
  /** No answer within the wait; the request stays outstanding for later waiters. */
  | { readonly kind: 'timeout' }
  /** The request vanished unanswered (deleted by someone); the caller may ask again. */
  | { readonly kind: 'lost' };

/** Constructor options of {@link BlockRequester}. */
export interface BlockRequesterOptions {
  /** Started cache holding this node's BlockRequests and AddressBlocks (label `coil.cybozu.com/node`) and its Node. */
  readonly cache: Cache;
  readonly client: Client;
  readonly nodeName: string;
  readonly logger: Logger;
  /** Safety-net re-check of outstanding requests, besides informer events. Default 1 000 ms. */
  readonly pollMs?: number;
  /** Time source of the poll. Default the process clock. */
  readonly clock?: Clock;
  /** Told when a request is answered: pool, outcome kind and the time since creation (ms). */
  readonly onAnswered?: (pool: string, result: 'allocated' | 'failed', waitMs: number) => void;
  /** Clock, ms since the epoch. Default Date.now. */
  readonly now?: () => number;
}

interface Waiter {
  resolve(o: BlockRequestOutcome): void;
  reject(err: unknown): void;
  timer: NodeJS.Timeout;
}

/**
 * Longest wait between two hurried lists of one informer while an ADD waits (see
 * BlockRequester.hurryCache): well below the informers' own 30 s cap, so an ADD waiting through an
 * outage still sees its block within seconds of the server's return.
 */
const HURRY_MAX_MS = 8_000;

/** How long an `allocated` answer may precede its block in the cache before the request counts as lost. */
const ANSWERED_BLOCK_WAIT_MS = 10_000;

/** One BlockRequest in flight for a pool. */
interface Outstanding {
  readonly pool: string;
  readonly createdAtMs: number;
  name?: string;
  uid?: string;
  /** The cache has shown the request at least once (so its absence later means deleted). */
  seen: boolean;
  /** When the status first said `allocated` while the block was not in our cache yet. */
  answeredAtMs?: number;
  readonly waiters: Set<Waiter>;
}

/**
 * One outstanding BlockRequest per pool, shared by every waiting ADD of that pool. Waiting never
 * holds a lock: ADDs served from other blocks or pools proceed (Coil #368).
 *
 * Concurrency: single-threaded state; every method may be called at any time after it runs
 * (a Manager runnable, {@link run}; or by hand, {@link start}).
 */
export class BlockRequester implements Runnable {
  /** What it calls beyond the cache: creates its node's BlockRequests and deletes the ones consumed. */
  static readonly rbac: readonly RbacRule[] = [kindRule(Kinds.BlockRequest, ['create', 'delete'])];

  private readonly outstanding = new Map<string, Outstanding>();
  /** Pools asked for since start (the pending-age gauge reads 0 for those with nothing in flight). */
  private readonly askedPools = new Set<string>();
  /** UIDs of consumed requests whose delete is in flight. */
  private readonly deleting = new Set<string>();
  /** UIDs of requests deleted (or found gone) that the cache may still show until the watch catches up. */
  private readonly deleted = new Set<string>();
  private readonly unsubscribe: (() => void)[] = [];
  /** Per informer kind: the hurry's own backoff ({@link hurryCache}). */
  private readonly hurry = new Map<string, { intervalMs: number; notBeforeMs: number }>();
  /** The stop signal of a {@link start} by hand. */
  private byHand: AbortController | undefined;
  private readonly now: () => number;

  constructor(private readonly o: BlockRequesterOptions) {
    this.now = o.now ?? Date.now;
  }

  /**
   * The Manager runnable: follows the cache and polls every `pollMs` until `signal` aborts, then
   * {@link stop}s. What a re-check throws ends the run (the supervisor starts it again).
   */
  async run(signal: AbortSignal): Promise<void> {
    const recheck = (): void => this.checkAll();
    this.unsubscribe.push(this.o.cache.onEvent(Kinds.BlockRequest, recheck), this.o.cache.onEvent(Kinds.AddressBlock, recheck));
    try {
      await every(signal, this.o.pollMs ?? 1_000, () => {
        this.checkAll();
        this.hurryCache();
      }, this.o.clock ?? systemClock);
    } finally {
      this.stop();
    }
  }

  /** {@link run} without a Manager (unit tests), until {@link stop}. */
  start(): void {
    this.byHand = new AbortController();
    void this.run(this.byHand.signal).catch((err: unknown) => this.o.logger.error({ err }, 'block request poll failed'));
  }

  /** Stops listening; pending waits end as `timeout`. */
  stop(): void {
    this.byHand?.abort();
    for (const u of this.unsubscribe.splice(0)) u();
    for (const o of this.outstanding.values()) this.settle(o, { kind: 'timeout' }, false);
    this.outstanding.clear();
  }

  /** Whether a request for `pool` is in flight (warm prefetch does not add a second one). */
  isPending(pool: string): boolean {
    return this.outstanding.has(pool);
  }

  /** Pools with a request in flight. */
  pendingPools(): string[] {
    return [...this.outstanding.keys()];
  }

  /**
   * Every pool this node has asked for a block since start, with the creation time of its request
   * in flight (ms since the epoch), or undefined when none is.
   */
  pendingSince(): Array<{ pool: string; sinceMs: number | undefined }> {
    return [...this.askedPools].map((pool) => ({ pool, sinceMs: this.outstanding.get(pool)?.createdAtMs }));
  }

  /**
   * Waits up to `timeoutMs` for one more block of `pool`, creating a BlockRequest unless one is
   * already in flight.
   * @throws ApiError when the BlockRequest cannot be created (every waiter of that attempt gets it)
   * @returns `lost` also when the request was deleted unanswered, or answered with a block that
   *   did not reach this node's cache within 10 s; the caller may ask again
   */
  request(pool: string, timeoutMs: number): Promise<BlockRequestOutcome> {
    let o = this.outstanding.get(pool);
    const isNew = o === undefined;
    if (o === undefined) {
      o = { pool, createdAtMs: this.now(), seen: false, waiters: new Set() };
      this.outstanding.set(pool, o);
      this.askedPools.add(pool);
    }
    const out = o;
    const wait = new Promise<BlockRequestOutcome>((resolve, reject) => {
      const waiter: Waiter = {
        resolve,
        reject,
        timer: setTimeout(() => {
          out.waiters.delete(waiter);
          resolve({ kind: 'timeout' });
        }, Math.max(0, timeoutMs)),
      };
      out.waiters.add(waiter);
      if (isNew) this.create(out).catch((err: unknown) => this.fail(out, err));
    });
    return wait;
  }

  private async create(o: Outstanding): Promise<void> {
    const node = this.o.cache.get(Kinds.Node, { name: this.o.nodeName });
    const ownerReferences = node?.metadata?.uid
      ? [{ apiVersion: 'v1', kind: 'Node', name: this.o.nodeName, uid: node.metadata.uid }]
      : undefined;
    const br = await this.o.client.create(Kinds.BlockRequest, {
      metadata: {
        generateName: `req-${o.pool}-${this.o.nodeName}-`,
        labels: { [LABEL_NODE]: this.o.nodeName, [LABEL_POOL]: o.pool },
        ...(ownerReferences && { ownerReferences }),
      },
      spec: { nodeName: this.o.nodeName, poolName: o.pool },
    });
    o.name = br.metadata?.name;
    o.uid = br.metadata?.uid;
    this.o.logger.info({ pool: o.pool, request: o.name }, 'requested a new address block');
    this.check(o);
  }

  /**
   * Creation failed: every waiter of this attempt gets the error (no retry loop against, say, a
   * missing RBAC rule), and the next ask starts afresh.
   */
  private fail(o: Outstanding, err: unknown): void {
    this.o.logger.error({ err, pool: o.pool }, 'cannot create BlockRequest');
    if (this.outstanding.get(o.pool) === o) this.outstanding.delete(o.pool);
    for (const w of o.waiters) {
      clearTimeout(w.timer);
      w.reject(err);
    }
    o.waiters.clear();
  }

  /**
   * While an ADD has waited a whole poll for its block, the informers it reads must not sit out a
   * backoff: after an API server or etcd outage their retry delay has doubled to seconds, and the
   * controller often answers (the block exists) long before they list again — the ADD would time
   * out on a block the server already holds. So a poll with such a waiter cuts the backoff of the
   * two informers short, and only on nodes that are waiting for a block.
   *
   * The hurry backs off too: while the server stays down each hurried list fails and the informer
   * backs off anew, and a hurry every poll would have every waiting node of the cluster list both
   * kinds every second for the whole outage, defeating the informers' backoff (hack/bench/scale.ts
   * measured 2 LISTs/s per waiting node, 90 % of the nodes' lists, against a dead apiserver). After
   * a hurry that found its informer backing off, the next one waits twice as long (±50 % jitter, so
   * the nodes spread out), up to {@link HURRY_MAX_MS}; a poll that finds the informer healthy again
   * (its list worked) starts over at one poll.
   */
  private hurryCache(): void {
    const pollMs = this.o.pollMs ?? 1_000;
    const now = this.now();
    const waiting = [...this.outstanding.values()].filter((o) => o.waiters.size > 0 && now - o.createdAtMs >= pollMs);
    if (waiting.length === 0) return;
    const hurried: string[] = [];
    for (const kind of [Kinds.BlockRequest, Kinds.AddressBlock] as KindDescriptor[]) {
      const h = this.hurry.get(kind.kind) ?? { intervalMs: pollMs, notBeforeMs: 0 };
      this.hurry.set(kind.kind, h);
      if (!this.o.cache.informer(kind).backingOff) {
        h.intervalMs = pollMs;
        h.notBeforeMs = 0;
        continue;
      }
      if (now < h.notBeforeMs || !this.o.cache.retryNow(kind)) continue;
      hurried.push(kind.kind);
      h.intervalMs = Math.min(HURRY_MAX_MS, h.intervalMs * 2);
      h.notBeforeMs = now + h.intervalMs * (0.5 + Math.random());
    }
    if (hurried.length > 0) {
      this.o.logger.info({ pools: waiting.map((o) => o.pool), informers: hurried }, 'an ADD waits for a block while the cache backs off: listing again now');
    }
  }

  private checkAll(): void {
    for (const o of [...this.outstanding.values()]) this.check(o);
    this.sweep();
  }

  /**
   * Deletes answered requests of this node nobody waits on. A pool whose request is still being
   * created (no UID known yet) is skipped: its answer may be in the cache before the create returns.
   */
  private sweep(): void {
    const waited = new Set<string>();
    const creating = new Set<string>();
    for (const o of this.outstanding.values()) {
      if (o.uid === undefined) creating.add(o.pool);
      else waited.add(o.uid);
    }
    const cached = this.o.cache.list<BlockRequest>(Kinds.BlockRequest);
    const present = new Set(cached.map((br) => br.metadata?.uid));
    for (const uid of this.deleted) if (!present.has(uid)) this.deleted.delete(uid);
    for (const br of cached) {
      const uid = br.metadata?.uid;
      if (uid === undefined || waited.has(uid) || creating.has(br.spec.poolName) || br.spec.nodeName !== this.o.nodeName) continue;
      if (blockRequestResult(br.status).kind !== 'pending') this.consume(br.metadata!.name!, uid);
    }
  }

  /** Deletes one answered request, only if it still has `uid`; once, however often the cache still shows it. */
  private consume(name: string, uid: string): void {
    if (this.deleting.has(uid) || this.deleted.has(uid)) return;
    this.deleting.add(uid);
    this.o.client.delete(Kinds.BlockRequest, { name }, { uid }).then(
      (deleted) => {
        this.deleted.add(uid);
        if (deleted) this.o.logger.debug({ request: name }, 'deleted a consumed BlockRequest');
      },
      (err: unknown) => {
        // 409: the name now holds another request (the UID precondition held); nothing to do.
        if (isConflict(err)) this.deleted.add(uid);
        else this.o.logger.warn({ err, request: name }, 'cannot delete a consumed BlockRequest; retrying on the next check');
      },
    ).finally(() => this.deleting.delete(uid));
  }

  /** Level-triggered: reads the request and its block from the cache, whatever event woke us. */
  private check(o: Outstanding): void {
    if (o.uid === undefined || o.name === undefined) return;
    const block = this.o.cache.byIndex<AddressBlock>(Kinds.AddressBlock, INDEX_BLOCK_BY_REQUEST, o.uid)[0];
    if (block?.metadata?.name) return this.settle(o, { kind: 'allocated', blockName: block.metadata.name });
    const br = this.o.cache.get<BlockRequest>(Kinds.BlockRequest, { name: o.name });
    if (br === undefined) {
      if (o.seen) this.settle(o, { kind: 'lost' });
      return;
    }
    o.seen = true;
    const result = blockRequestResult(br.status);
    if (result.kind === 'failed') return this.settle(o, { kind: 'failed', reason: result.reason, message: result.message });
    if (result.kind !== 'allocated') return;
    // `allocated` but the block not yet in our cache: wait for its event, so the caller's next
    // allocation attempt finds it — but not forever: a block that never shows up as this node's
    // would otherwise pin the pool to a request nobody can complete.
    o.answeredAtMs ??= this.now();
    if (this.now() - o.answeredAtMs > ANSWERED_BLOCK_WAIT_MS) {
      this.o.logger.warn({ pool: o.pool, request: o.name, block: result.addressBlockName }, 'answered block never appeared as this node\'s');
      this.settle(o, { kind: 'lost' });
    }
  }

  private settle(o: Outstanding, outcome: BlockRequestOutcome, report = true): void {
    if (this.outstanding.get(o.pool) === o) this.outstanding.delete(o.pool);
    // Consumed: answered (or lost), and nobody waits on it any more. A timed-out request is not
    // settled — it stays outstanding for the next ADD — and `stop` leaves requests to the next run.
    if (report && o.name !== undefined && o.uid !== undefined) this.consume(o.name, o.uid);
    if (report && (outcome.kind === 'allocated' || outcome.kind === 'failed')) {
      this.o.onAnswered?.(o.pool, outcome.kind, this.now() - o.createdAtMs);
      this.o.logger.info({ pool: o.pool, request: o.name, outcome }, 'block request answered');
    }
    for (const w of o.waiters) {
      clearTimeout(w.timer);
      w.resolve(outcome);
    }
    o.waiters.clear();
  }
}

/** Index function of `INDEX_BLOCK_BY_REQUEST` on the AddressBlock cache: the `coil.cybozu.com/request` label (a BlockRequest UID). */
export function blockRequestUidOf(block: Readonly<AddressBlock>): readonly string[] {
  const uid = block.metadata?.labels?.[LABEL_REQUEST];
  return uid ? [uid] : [];
}
