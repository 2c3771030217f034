/**
 * BlockReleaser: gives this node's empty AddressBlocks back to the pool, after a grace period.
 *
 * Coil releases a block the moment its last address is freed; on a busy node that means create,
 * delete and re-advertise over and over
 * (docs/compatibility.md#blocks-released-the-moment-they-empty; Calico keeps empty blocks for a
 * while for the same reason). Here a block is released only once it has been empty for `graceMs`
 * and none of its addresses is still cooling — a cooling address must not become another node's pod
 * address while stale routes or conntrack entries still point here. Releasing = remove the
 * `coil.cybozu.com` finalizer, then delete (as Coil does:
 * docs/compatibility.md#freeing-addresses-and-releasing-blocks); the controller's finalizer-free
 * block is then gone for good.
 */
import type Logger from 'bunyan';
import { kindRule } from '../../runtime/rbac.js';
import { FIN_COIL } from '../../api/v2/keys.js';
import type { Client } from '../../runtime/client.js';
import { isConflict, isNotFound, isPatchTestFailed } from '../../runtime/errors.js';
import type { RbacRule } from '../../runtime/registry.js';
import { systemClock, type Clock } from '../../runtime/clock.js';
import type { Runnable } from '../../runtime/runnable.js';
import { Kinds } from '../../api/v2/kinds.js';
import type { NodeBlock, NodeIpam } from './node-ipam.js';

/** Constructor options of {@link BlockReleaser}. */
export interface BlockReleaserOptions {
  readonly ipam: NodeIpam;
  readonly client: Client;
  readonly logger: Logger;
  /** How long a block stays empty before release (`--block-release-grace`). Default 60 000 ms. */
  readonly graceMs?: number;
  /** Told after blocks were released (route export re-syncs from the cache anyway). */
  readonly onReleased?: (names: string[]) => void;
  /** Clock, ms since the epoch. Default Date.now. */
  readonly now?: () => number;
  /** Timers of {@link BlockReleaser.schedule} (only setTimeout/clearTimeout are used). Default the process clock. */
  readonly timers?: Clock;
}

/**
 * Releases empty blocks when their time comes: {@link schedule} arms one timer for the earliest
 * candidate. Releases run one pass at a time. A Manager runnable ({@link run}): its stop disarms
 * the timer and waits for the pass in flight.
 */
export class BlockReleaser implements Runnable {
  /** What it calls: a live read of the block, the finalizer's removal (a JSON patch), the delete. */
  static readonly rbac: readonly RbacRule[] = [kindRule(Kinds.AddressBlock, ['get', 'patch', 'delete'])];

  readonly graceMs: number;
  private timer: unknown;
  private running: Promise<string[]> | undefined;
  private readonly timers: Clock;
  private stopped = false;
  private readonly now: () => number;
  /** Consecutive passes with a failed release; the retry waits 500 ms × 2^(n−1), at most 30 s. */
  private failedPasses = 0;
  /** No retry before this (ms since the epoch): an apiserver outage must not be hammered. */
  private retryNotBeforeMs = 0;
  /**
   * Blocks whose release sent a write and then failed without the apiserver showing the block
   * untouched: the delete may have been applied with its answer lost (an apiserver restart mid
   * request, an etcd timeout after the commit). They stay out of service — an ADD must never take
   * an address of a block that may be gone, or its pod would hold an address the controller can
   * hand to another node — and every pass retries their release until it succeeds or a read shows
   * them gone.
   */
  private readonly unsettled = new Set<string>();

  constructor(private readonly o: BlockReleaserOptions) {
    this.graceMs = o.graceMs ?? 60_000;
    this.now = o.now ?? Date.now;
    this.timers = o.timers ?? systemClock;
  }

  /** (Re)arms the timer for the next block that becomes releasable. Cheap; call on every change. */
  schedule(): void {
    if (this.stopped) return;
    const next = this.unsettled.size > 0 ? this.now() : this.o.ipam.nextReleaseAtMs(this.graceMs);
    this.timers.clearTimeout(this.timer);
    this.timer = undefined;
    if (next === undefined) return;
    const at = Math.max(next, this.retryNotBeforeMs);
    this.timer = this.timers.setTimeout(() => {
      this.timer = undefined;
      this.release().catch((err: unknown) => this.o.logger.error({ err }, 'block release failed'));
    }, Math.max(0, at - this.now()) + 10);
  }

  /** Disarms the timer for good; a pass in flight finishes (see {@link run}). */
  stop(): void {
    this.stopped = true;
    this.timers.clearTimeout(this.timer);
    this.timer = undefined;
  }

  /**
   * The Manager runnable: releases on schedule until `signal` aborts, then {@link stop}s and
   * returns once the pass in flight, if any, has finished. Scheduling works from construction (the
   * start-up recovery releases before the Manager runs its runnables).
   */
  async run(signal: AbortSignal): Promise<void> {
    if (!signal.aborted) await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
    this.stop();
    while (this.running) await this.running.catch(() => undefined);
  }

  /**
   * Releases every block that is releasable now.
   * @param opts.ignoreGrace release empty, non-cooling blocks without waiting (start-up, after
   *   recovery: Coil frees unused blocks at start, the workaround users rely on in Coil #202)
   * @returns the names of the released blocks
   */
  async release(opts: { ignoreGrace?: boolean } = {}): Promise<string[]> {
    while (this.running) await this.running.catch(() => undefined);
    this.running = this.releaseNow(opts.ignoreGrace ? 0 : this.graceMs);
    try {
      return await this.running;
    } finally {
      this.running = undefined;
      this.schedule();
    }
  }

  private async releaseNow(graceMs: number): Promise<string[]> {
    const fresh = this.o.ipam.releasable(graceMs);
    // Taken out of service synchronously, before any await: no ADD can pick them any more.
    for (const b of fresh) this.o.ipam.setReleasing(b.name, true);
    const blocks = this.o.ipam.nodeBlocks();
    for (const name of this.unsettled) if (!blocks.some((b) => b.name === name)) this.unsettled.delete(name); // gone from the cache: released
    const candidates = [...fresh, ...blocks.filter((b) => this.unsettled.has(b.name))];
    const released: string[] = [];
    let failed = false;
    await Promise.all(
      candidates.map(async (b) => {
        const progress = { wrote: this.unsettled.has(b.name) };
        try {
          await this.releaseOne(b, progress);
          this.unsettled.delete(b.name);
          released.push(b.name);
        } catch (err) {
          failed = true;
          const state = progress.wrote ? await this.stateOf(b) : 'intact';
          if (state === 'gone') {
            this.unsettled.delete(b.name);
            released.push(b.name);
          } else if (state === 'intact') {
            this.unsettled.delete(b.name);
            this.o.ipam.setReleasing(b.name, false);
            this.o.logger.warn({ err, block: b.name }, 'cannot release AddressBlock; will retry');
          } else {
            this.unsettled.add(b.name);
            this.o.logger.warn({ err, block: b.name, state }, 'release of AddressBlock may have been applied; it stays out of service until it is settled');
          }
        }
      }),
    );
    this.failedPasses = failed ? this.failedPasses + 1 : 0;
    this.retryNotBeforeMs = failed ? this.now() + Math.min(30_000, 500 * 2 ** (this.failedPasses - 1)) : 0;
    if (released.length > 0) {
      this.o.logger.info({ blocks: released }, 'released empty address blocks');
      this.o.onReleased?.(released);
    }
    return released;
  }

  /**
   * What the apiserver shows of `b` after a failed release that sent a write: `gone` (deleted, or
   * its name taken by a newer block), `intact` (ours, not being deleted, our finalizer on it: the
   * writes were not applied), `touched` (finalizer removed or deletion started), `unknown` (the
   * read failed too).
   */
  private async stateOf(b: NodeBlock): Promise<'gone' | 'intact' | 'touched' | 'unknown'> {
    try {
      const now = await this.o.client.get(Kinds.AddressBlock, { name: b.name });
      if (!now || (b.uid !== undefined && now.metadata?.uid !== b.uid)) return 'gone';
      return !now.metadata?.deletionTimestamp && (now.metadata?.finalizers ?? []).includes(FIN_COIL) ? 'intact' : 'touched';
    } catch {
      return 'unknown';
    }
  }

  /**
   * Removes the finalizer (re-reading on a stale version) and deletes the block by UID.
   * `progress.wrote` is set before the first write is sent.
   */
  private async releaseOne(b: NodeBlock, progress: { wrote: boolean }): Promise<void> {
    for (let attempt = 0; ; attempt++) {
      const fresh = await this.o.client.get(Kinds.AddressBlock, { name: b.name });
      // Gone, or its name already reused by a newer block (released earlier by a try whose answer
      // was lost): never touch the successor, which may be serving pods.
      if (!fresh || (b.uid !== undefined && fresh.metadata?.uid !== b.uid)) return;
      try {
        progress.wrote = true;
        await this.o.client.removeFinalizer(Kinds.AddressBlock, fresh, FIN_COIL);
        await this.o.client.delete(Kinds.AddressBlock, { name: b.name }, { uid: fresh.metadata!.uid! });
        return;
      } catch (err) {
        if (isNotFound(err)) return;
        if (attempt >= 4 || !(isConflict(err) || isPatchTestFailed(err))) throw err;
      }
    }
  }
}
