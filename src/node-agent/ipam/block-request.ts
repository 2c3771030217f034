/**
 * BlockRequester: asks the IPAM controller for one more AddressBlock of a pool for this node and
 * learns the answer level-triggered, so a reply can never be lost.
 *
 * Coil notifies its waiter by a non-blocking send on an unbuffered channel: an answer that comes
 * before the waiter blocks is dropped, the ADD times out, kubelet retries, coild deletes and
 * re-creates `req-<pool>-<node>`, and the controller carves a second block that leaks (Coil #271,
 * docs/compatibility.md#a-lossy-blockrequest-handshake). Here nothing is a one-shot signal: every
 * AddressBlock event of this node, and a slow poll, re-reads the outstanding request's state. A
 * request outlives the waits on it: when an ADD gives up, the next ADD of the pool joins the same
 * request instead of issuing another.
 *
 * Where the answer comes from: the node's AddressBlock cache, and the request itself read by name.
 * coild does not watch BlockRequests. The apiserver's watch cache has no index for labels of
 * custom resources, so a watch by label `coil.cybozu.com/node` is sent every BlockRequest event
 * of the cluster to be filtered: with N nodes asking at once (a cluster start) that was 3 events
 * per request (create, status, delete) to every node, N² deliveries, watchers closed for falling
 * behind and the apiserver CPU-bound (docs/performance.md#scale). The controller labels the block
 * it creates with the request's UID (`coil.cybozu.com/request`, as Coil's does since 2.0.14), so
 * the block's arrival in the node's AddressBlock cache is the answer. What a block cannot tell —
 * a `Failed` answer, or the answer of a controller that does not label its blocks — is read with
 * a GET of the request by name, first one to two polls after its creation, then 2, 4, … polls
 * apart, at most {@link READ_MAX_POLLS}: a request answered through its block within a poll costs
 * no read at all. An `allocated` answer read that way before its block reaches the cache is not
 * lost because the watch is slow (at scale the apiserver's watch dispatch lags its writes by more
 * than 10 s): the block is read by name from the server 10 s on, then on a backoff, and the
 * request is lost only when the server does not hold it as this node's and this request's.
 *
 * Naming: each request gets a unique name from `generateName: req-<pool>-<node>-`. Coil's fixed
 * `req-<pool>-<node>` must be deleted before it is re-created, and between the delete and the
 * create an answer to the old one can arrive and be mistaken for the new one (the same name,
 * another UID) or land on a block nobody waits for; with unique names every request is identified
 * by its UID. The node and pool are also labels, so coild can list its own requests.
 *
 * Clean-up: coild deletes each request it consumed, as Coil's coild does — Coil's controller
 * never deletes an answered request (docs/compatibility.md "BlockRequests"), so under it (a cluster moving node
 * by node) requests left to our controller's TTL would pile up until their Node goes. A request
 * is deleted once answered and no longer waited on: settled (its block in the cache, or failed,
 * or lost), or answered and not outstanding — left by an earlier coild run (one LIST of this
 * node's requests when the requester starts finds them) or made for someone else ({@link follow}:
 * the claims of orphans.ts); those are read by name on the same backoff until answered. Every
 * delete names the request's UID as a precondition, so it can only ever remove the very request
 * that was answered. The controller's TTL stays as a safety net for requests of a coild that is gone.
 */
import type Logger from 'bunyan';
import { kindRule } from '../../runtime/rbac.js';
import type { AddressBlock } from '../../api/v2/addressblock.js';
import { blockRequestResult, type BlockRequest, type BlockRequestResult } from '../../api/v2/blockrequest.js';
import { INDEX_BLOCK_BY_REQUEST, LABEL_NODE, LABEL_POOL, LABEL_REQUEST } from '../../api/v2/keys.js';
import type { Cache } from '../../runtime/cache.js';
import type { Client } from '../../runtime/client.js';
import { isConflict } from '../../runtime/errors.js';
import type { RbacRule } from '../../runtime/registry.js';
import { systemClock, type Clock } from '../../runtime/clock.js';
import { every } from '../../runtime/periodic.js';
import type { Runnable } from '../../runtime/runnable.js';
import { Kinds, timeMs } from '../../api/v2/kinds.js';

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

/** The answer of a {@link BlockRequester.follow}ed request, or `lost` when it was deleted unanswered. */
export type FollowedAnswer = Exclude<BlockRequestResult, { kind: 'pending' }> | { readonly kind: 'lost' };

/** Constructor options of {@link BlockRequester}. */
export interface BlockRequesterOptions {
  /** Started cache holding this node's AddressBlocks (label `coil.cybozu.com/node`, index {@link INDEX_BLOCK_BY_REQUEST}) and its Node. */
  readonly cache: Cache;
  readonly client: Client;
  readonly nodeName: string;
  readonly logger: Logger;
  /**
   * Safety-net re-check of outstanding requests, besides informer events; also the unit of the
   * backoff of reads by name (the first one poll after a request's creation). Default 1 000 ms.
   */
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

/**
 * How long an `allocated` answer read by name may precede its block in this node's cache before
 * the block is read from the server ({@link BlockRequester.awaitAnsweredBlock}); also the first
 * interval between such reads. The watch usually delivers the block within a second of the
 * answer, so at scale almost no node reads it: at N=5,000 with 64 controller workers 1,316 nodes
 * waited longer (docs/performance.md#where-this-machine-stops), with 16 none did.
 */
const ANSWERED_BLOCK_WAIT_MS = 10_000;

/**
 * Longest interval between two reads of an answered block the cache still lacks: a block deleted
 * meanwhile (which the cache may then never show) is noticed within it, and N nodes whose watch
 * lags read at most N/60 blocks a second once their reads have backed off (10, 20, 40, 60 s).
 */
const ANSWERED_BLOCK_READ_MAX_MS = 60_000;

/**
 * How long after the answer a block the server holds may be missing from this node's cache
 * before coild warns (once per request) that its AddressBlock watch lags or is broken.
 */
const ANSWERED_BLOCK_LAG_WARN_MS = 60_000;

/**
 * Most polls between two reads of one unanswered request by name (16 s at the default poll): a
 * `Failed` answer is seen at most that late, and N nodes waiting through a controller outage read
 * at most N/16 requests a second.
 */
const READ_MAX_POLLS = 16;

/**
 * When to read a request (or list the node's requests) next: at the second poll after it starts
 * (one to two polls later: the first tick may come at once), then 2, 4, … polls apart, at most
 * {@link READ_MAX_POLLS}; never two reads of one thing in flight.
 */
class ReadBackoff {
  private intervalPolls = 1;
  private left = 2;
  private inFlight = false;

  /** Holds the next reads back until `read` (which handles its own failure) has settled. */
  track(read: Promise<void>): void {
    this.inFlight = true;
    const settled = (): void => {
      this.inFlight = false;
    };
    void read.then(settled, settled);
  }

  /** Counts one poll. @returns true when a read is due now (the next is scheduled) */
  due(): boolean {
    if (this.inFlight || --this.left > 0) return false;
    this.intervalPolls = Math.min(READ_MAX_POLLS, this.intervalPolls * 2);
    this.left = this.intervalPolls;
    return true;
  }
}

/** One BlockRequest in flight for a pool. */
interface Outstanding {
  readonly pool: string;
  readonly createdAtMs: number;
  name?: string;
  uid?: string;
  /** The request's `creationTimestamp` (ms): a block answering it was created no earlier. */
  serverCreatedMs?: number;
  /** What the last read by name found: the request's state, or `gone` (404 or another UID). */
  read?: BlockRequestResult | { readonly kind: 'gone' };
  readonly reads: ReadBackoff;
  /** A read failed and was logged (once per request: an outage is logged by the informers too). */
  readFailed?: boolean;
  /** The `allocated` answer's block while it is not in our cache yet ({@link BlockRequester.awaitAnsweredBlock}). */
  answered?: AnsweredBlock;
  readonly waiters: Set<Waiter>;
}

/**
 * An `allocated` answer whose block this node's cache does not show yet: read from the server
 * {@link ANSWERED_BLOCK_WAIT_MS} after the answer was seen, then on a doubling interval up to
 * {@link ANSWERED_BLOCK_READ_MAX_MS}.
 */
interface AnsweredBlock {
  /** When the answer was first seen without its block (ms, the requester's `now`). */
  readonly sinceMs: number;
  /** When the next read of the block is due (ms). */
  dueAtMs: number;
  /** The interval after the next read (ms). */
  intervalMs: number;
  inFlight: boolean;
  /** What the last read found: the block may answer the request, or why it cannot (then the request is lost). */
  found?: { readonly answers: true } | { readonly answers: false; readonly why: string };
  /** A read failed and was logged (once per request). */
  readFailed?: boolean;
  /** The cache's lag was warned about (once per request). */
  lagWarned?: boolean;
}

/** A request of this node nobody waits on, read by name until answered, then deleted. */
interface Followed {
  readonly name: string;
  readonly uid: string;
  readonly reads: ReadBackoff;
  onAnswer?: (answer: FollowedAnswer) => void;
}

/**
 * One outstanding BlockRequest per pool, shared by every waiting ADD of that pool. Waiting never
 * holds a lock: ADDs served from other blocks or pools proceed (Coil #368).
 *
 * Concurrency: single-threaded state; every method may be called at any time after it runs
 * (a Manager runnable, {@link run}; or by hand, {@link start}).
 */
export class BlockRequester implements Runnable {
  /**
   * What it calls: creates its node's BlockRequests, reads one by name while it waits on it, lists
   * its node's once when it starts (requests an earlier run left), deletes the ones consumed; reads
   * an answered AddressBlock by name while the cache lags behind the answer. No watch.
   */
  static readonly rbac: readonly RbacRule[] = [kindRule(Kinds.BlockRequest, ['create', 'get', 'list', 'delete']), kindRule(Kinds.AddressBlock, ['get'])];

  private readonly outstanding = new Map<string, Outstanding>();
  /** Pools asked for since start (the pending-age gauge reads 0 for those with nothing in flight). */
  private readonly askedPools = new Set<string>();
  /** Requests nobody waits on, by UID, to delete once answered ({@link follow}). */
  private readonly followed = new Map<string, Followed>();
  /** UIDs of consumed requests whose delete is in flight. */
  private readonly deleting = new Set<string>();
  private readonly unsubscribe: (() => void)[] = [];
  /** The informer hurry's own backoff ({@link hurryCache}). */
  private readonly hurry = { intervalMs: 0, notBeforeMs: 0 };
  /** The start-up list of this node's requests: undefined once it worked. */
  private leftoverList: ReadBackoff | undefined;
  /** The stop signal of a {@link start} by hand. */
  private byHand: AbortController | undefined;
  private readonly now: () => number;

  constructor(private readonly o: BlockRequesterOptions) {
    this.now = o.now ?? Date.now;
  }

  /**
   * The Manager runnable: lists the requests an earlier run left, follows the AddressBlock cache
   * and polls every `pollMs` until `signal` aborts, then {@link stop}s. What a re-check throws
   * ends the run (the supervisor starts it again).
   */
  async run(signal: AbortSignal): Promise<void> {
    const recheck = (): void => this.checkAll();
    this.unsubscribe.push(this.o.cache.onEvent(Kinds.AddressBlock, recheck));
    this.leftoverList = new ReadBackoff();
    this.listLeftovers();
    try {
      await every(signal, this.o.pollMs ?? 1_000, () => {
        this.checkAll();
        this.readDue();
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

  /** Stops listening; pending waits end as `timeout`; requests in flight are left to the next run's list. */
  stop(): void {
    this.byHand?.abort();
    for (const u of this.unsubscribe.splice(0)) u();
    for (const o of this.outstanding.values()) this.settle(o, { kind: 'timeout' }, false);
    this.outstanding.clear();
    this.followed.clear();
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
   * @returns `allocated` once the block is in this node's cache; `lost` when the request was
   *   deleted unanswered, or answered with a block the API server does not hold as this node's
   *   and this request's (read when the cache lags, {@link awaitAnsweredBlock}); the caller may
   *   ask again
   */
  request(pool: string, timeoutMs: number): Promise<BlockRequestOutcome> {
    let o = this.outstanding.get(pool);
    const isNew = o === undefined;
    if (o === undefined) {
      o = { pool, createdAtMs: this.now(), reads: new ReadBackoff(), waiters: new Set() };
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

  /**
   * Takes over a request of this node that no {@link request} waits on (a claim back made by
   * orphans.ts): reads it by name on the requester's backoff until it is answered, tells
   * `onAnswer` once (`lost` when it was deleted unanswered), then deletes it by UID. Following a
   * UID already followed only sets `onAnswer`.
   */
  follow(name: string, uid: string, onAnswer?: (answer: FollowedAnswer) => void): void {
    const known = this.followed.get(uid);
    if (known) {
      if (onAnswer) known.onAnswer = onAnswer;
      return;
    }
    this.followed.set(uid, { name, uid, reads: new ReadBackoff(), ...(onAnswer && { onAnswer }) });
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
    const created = timeMs(br.metadata?.creationTimestamp);
    if (created !== undefined) o.serverCreatedMs = created;
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
   * While an ADD has waited a whole poll for its block, the AddressBlock informer must not sit out
   * a backoff: after an API server or etcd outage its retry delay has doubled to seconds, and the
   * controller often answers (the block exists) long before it lists again — the ADD would time
   * out on a block the server already holds. So a poll with such a waiter cuts the informer's
   * backoff short, and only on nodes that are waiting for a block.
   *
   * The hurry backs off too: while the server stays down each hurried list fails and the informer
   * backs off anew, and a hurry every poll would have every waiting node of the cluster list
   * every second for the whole outage, defeating the informer's backoff (hack/bench/scale.ts
   * measured 2 LISTs/s per waiting node, 90 % of the nodes' lists, when it also hurried a
   * BlockRequest informer). After a hurry that found the informer backing off, the next one waits
   * twice as long (±50 % jitter, so the nodes spread out), up to {@link HURRY_MAX_MS}; a poll that
   * finds the informer healthy again (its list worked) starts over at one poll.
   */
  private hurryCache(): void {
    const pollMs = this.o.pollMs ?? 1_000;
    const now = this.now();
    const waiting = [...this.outstanding.values()].filter((o) => o.waiters.size > 0 && now - o.createdAtMs >= pollMs);
    if (waiting.length === 0) return;
    const h = this.hurry;
    if (!this.o.cache.informer(Kinds.AddressBlock).backingOff) {
      h.intervalMs = pollMs;
      h.notBeforeMs = 0;
      return;
    }
    h.intervalMs ||= pollMs;
    if (now < h.notBeforeMs || !this.o.cache.retryNow(Kinds.AddressBlock)) return;
    h.intervalMs = Math.min(HURRY_MAX_MS, h.intervalMs * 2);
    h.notBeforeMs = now + h.intervalMs * (0.5 + Math.random());
    this.o.logger.info({ pools: waiting.map((o) => o.pool), informers: [Kinds.AddressBlock.kind] }, 'an ADD waits for a block while the cache backs off: listing again now');
  }

  private checkAll(): void {
    for (const o of [...this.outstanding.values()]) this.check(o);
  }

  /** One poll's reads by name: of outstanding requests, of followed ones, and the start-up list until it worked. */
  private readDue(): void {
    for (const o of [...this.outstanding.values()]) {
      // Once `allocated` is read, the request has nothing more to tell: the block is awaited
      // (awaitAnsweredBlock), and a later read could only find the request deleted by the
      // controller's TTL, which would not make the answer any less good.
      if (o.uid !== undefined && o.read?.kind !== 'allocated' && o.reads.due()) this.read(o);
    }
    // A request being created may already be in a list of this node's requests: wait until its
    // UID is known, so it is never followed (and deleted) as someone else's.
    if ([...this.outstanding.values()].some((o) => o.uid === undefined)) return;
    const waited = new Set([...this.outstanding.values()].map((o) => o.uid));
    for (const f of [...this.followed.values()]) {
      if (waited.has(f.uid)) this.followed.delete(f.uid);
      else if (f.reads.due()) this.readFollowed(f);
    }
    if (this.leftoverList?.due()) this.listLeftovers();
  }

  /** Reads an outstanding request by name, then re-checks it. */
  private read(o: Outstanding): void {
    o.reads.track(this.readByName(o.name!, o.uid).then((result) => {
      if (this.outstanding.get(o.pool) !== o) return;
      o.read = result;
      this.check(o);
    }, (err: unknown) => {
      // Read again on the backoff; an outage is also told by the informers.
      if (!o.readFailed) this.o.logger.warn({ err, pool: o.pool, request: o.name }, 'cannot read the BlockRequest; reading it again later');
      o.readFailed = true;
    }));
  }

  /** Reads a followed request by name: answered or gone, it is told and (answered) deleted. */
  private readFollowed(f: Followed): void {
    f.reads.track(this.readByName(f.name, f.uid).then((result) => {
      if (this.followed.get(f.uid) !== f || result.kind === 'pending') return;
      this.followed.delete(f.uid);
      f.onAnswer?.(result.kind === 'gone' ? { kind: 'lost' } : result);
      if (result.kind !== 'gone') this.consume(f.name, f.uid);
    }, (err: unknown) => {
      this.o.logger.debug({ err, request: f.name }, 'cannot read a BlockRequest to clean up; reading it again later');
    }));
  }

  /** Request `name` read from the server: its answer, or `gone` when it is not there or is another request (another UID). */
  private async readByName(name: string, uid: string | undefined): Promise<BlockRequestResult | { readonly kind: 'gone' }> {
    const br = await this.o.client.get<BlockRequest>(Kinds.BlockRequest, { name });
    return br === undefined || br.metadata?.uid !== uid ? { kind: 'gone' } : blockRequestResult(br.status);
  }

  /**
   * Lists this node's requests once (requests an earlier run of coild left: answered ones, and
   * pending ones the controller will still answer) and follows those nobody here waits on, to
   * delete them once answered. Retried on the read backoff until it works.
   */
  private listLeftovers(): void {
    const list = this.leftoverList;
    if (list === undefined) return;
    list.track(this.o.client.list<BlockRequest>(Kinds.BlockRequest, { labelSelector: `${LABEL_NODE}=${this.o.nodeName}` }).then((items) => {
      if (this.leftoverList !== list) return;
      this.leftoverList = undefined;
      const waited = new Set([...this.outstanding.values()].map((o) => o.uid));
      for (const br of items) {
        const { name, uid } = br.metadata ?? {};
        if (name !== undefined && uid !== undefined && br.spec?.nodeName === this.o.nodeName && !waited.has(uid)) this.follow(name, uid);
      }
      if (this.followed.size > 0) this.o.logger.info({ requests: this.followed.size }, 'BlockRequests an earlier run left: deleting each once answered');
    }, (err: unknown) => {
      this.o.logger.warn({ err }, 'cannot list this node\'s BlockRequests; listing again later');
    }));
  }

  /**
   * Deletes one answered request, only if it still has `uid`; once, however often it is asked. A
   * delete that fails is followed again: read and deleted on the backoff.
   */
  private consume(name: string, uid: string): void {
    if (this.deleting.has(uid)) return;
    this.deleting.add(uid);
    this.o.client.delete(Kinds.BlockRequest, { name }, { uid }).then(
      (deleted) => {
        if (deleted) this.o.logger.debug({ request: name }, 'deleted a consumed BlockRequest');
      },
      (err: unknown) => {
        // 409: the name now holds another request (the UID precondition held); nothing to do.
        if (isConflict(err)) return;
        this.o.logger.warn({ err, request: name }, 'cannot delete a consumed BlockRequest; trying again later');
        this.follow(name, uid);
      },
    ).finally(() => this.deleting.delete(uid));
  }

  /**
   * Level-triggered: the block answering the request in the cache (by the request label), else
   * what the last read by name found.
   */
  private check(o: Outstanding): void {
    if (o.uid === undefined || o.name === undefined) return;
    const block = this.o.cache.byIndex<AddressBlock>(Kinds.AddressBlock, INDEX_BLOCK_BY_REQUEST, o.uid)[0];
    if (block?.metadata?.name) return this.settle(o, { kind: 'allocated', blockName: block.metadata.name });
    const read = o.read;
    if (read === undefined || read.kind === 'pending') return;
    if (read.kind === 'gone') return this.settle(o, { kind: 'lost' });
    if (read.kind === 'failed') return this.settle(o, { kind: 'failed', reason: read.reason, message: read.message });
    // `allocated`, and the block did not reach the cache through the request label (it lags, or
    // the controller does not label its blocks): the named block, once it is in this node's cache
    // as one made for it.
    const named = this.o.cache.get<AddressBlock>(Kinds.AddressBlock, { name: read.addressBlockName });
    if (named !== undefined && this.whyNotAnswer(named, o) === undefined) return this.settle(o, { kind: 'allocated', blockName: read.addressBlockName });
    this.awaitAnsweredBlock(o, read.addressBlockName);
  }

  /**
   * The answer names a block this node's cache does not show (as one made for the request). The
   * caller allocates from the cache (NodeIpam re-reads its blocks from it on `allocated`, and an
   * `allocated` without the block would send it to ask for another), so the request settles only
   * when the block's event arrives — but the answer is not lost because the watch is slow: at
   * scale the apiserver's dispatch of watch events lags behind its writes by more than 10 s
   * (docs/performance.md#where-this-machine-stops). Whether the block exists is asked of the
   * server: a GET by name {@link ANSWERED_BLOCK_WAIT_MS} after the answer was seen (a cache that
   * catches up sooner costs no read), then again on a doubling interval up to
   * {@link ANSWERED_BLOCK_READ_MAX_MS}, so a block deleted meanwhile is noticed. The request is
   * `lost` only when a read finds the block missing, or another node's or request's, or being
   * deleted: a block that never shows up as this node's would otherwise pin the pool to a
   * request nobody can complete. A read that fails says nothing: read again on the same interval.
   */
  private awaitAnsweredBlock(o: Outstanding, blockName: string): void {
    const now = this.now();
    const a = (o.answered ??= { sinceMs: now, dueAtMs: now + ANSWERED_BLOCK_WAIT_MS, intervalMs: ANSWERED_BLOCK_WAIT_MS, inFlight: false });
    if (a.found?.answers === false) {
      this.o.logger.warn({ pool: o.pool, request: o.name, block: blockName, why: a.found.why }, 'the API server holds no block answering this request as this node\'s: the request is lost');
      return this.settle(o, { kind: 'lost' });
    }
    if (a.found?.answers && !a.lagWarned && now - a.sinceMs >= ANSWERED_BLOCK_LAG_WARN_MS) {
      a.lagWarned = true;
      this.o.logger.warn({ pool: o.pool, request: o.name, block: blockName, waitedMs: now - a.sinceMs },
        'the API server holds the answered block, but this node\'s AddressBlock cache still lacks it: its watch lags or is broken');
    }
    if (a.inFlight || now < a.dueAtMs) return;
    a.inFlight = true;
    const next = (): void => {
      a.inFlight = false;
      a.dueAtMs = this.now() + a.intervalMs;
      a.intervalMs = Math.min(ANSWERED_BLOCK_READ_MAX_MS, a.intervalMs * 2);
    };
    this.o.client.get<AddressBlock>(Kinds.AddressBlock, { name: blockName }).then((block) => {
      next();
      if (this.outstanding.get(o.pool) !== o) return;
      const why = block === undefined ? 'not found' : this.whyNotAnswer(block, o);
      if (why === undefined && a.found === undefined) {
        this.o.logger.info({ pool: o.pool, request: o.name, block: blockName, waitedMs: this.now() - a.sinceMs }, 'the answered block exists; waiting for this node\'s cache to show it');
      }
      a.found = why === undefined ? { answers: true } : { answers: false, why };
      this.check(o);
    }, (err: unknown) => {
      next();
      if (!a.readFailed) this.o.logger.warn({ err, pool: o.pool, request: o.name, block: blockName }, 'cannot read the answered AddressBlock; reading it again later');
      a.readFailed = true;
    });
  }

  /**
   * Why a block named by the request's answer cannot be that answer, or undefined when it can:
   * another node's, being deleted, answering another request, or created before the request
   * (seconds; an older block of the same name the cache still shows).
   */
  private whyNotAnswer(block: Readonly<AddressBlock>, o: Outstanding): string | undefined {
    const node = block.metadata?.labels?.[LABEL_NODE];
    if (node !== this.o.nodeName) return `node ${node ?? '(none)'}'s`;
    if (block.metadata?.deletionTimestamp) return 'being deleted';
    const req = block.metadata?.labels?.[LABEL_REQUEST];
    if (req !== undefined && req !== o.uid) return `request ${req}'s`;
    const created = timeMs(block.metadata?.creationTimestamp);
    if (created !== undefined && o.serverCreatedMs !== undefined && created < o.serverCreatedMs) return 'created before the request';
    return undefined;
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
