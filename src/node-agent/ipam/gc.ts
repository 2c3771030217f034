/**
 * NodeGc: coild's periodic garbage collection (`--addressblock-gc-interval`, default 5 min, as
 * Coil's; docs/compatibility.md#freeing-addresses-and-releasing-blocks). Each pass:
 * 1. frees allocations whose host veth is gone (a pod torn down without a DEL reaching coild);
 * 2. adopts coil veths that hold no allocation (an `ip` batch of a SIGKILLed coild that finished
 *    after the restart's recovery read the host, or an address whose block was claimed back), so
 *    their addresses are not handed out twice, and deletes those without a pod route (half-wired
 *    by an interrupted ADD; isHalfWired); one whose address no block of this node holds is kept
 *    wired and handed to OrphanAddresses (docs/ipam-recovery.md);
 * 3. releases blocks that have been empty past the grace period;
 * 4. re-syncs the export table (119) with this node's blocks.
 * Both directions together make coild's state converge on the host's, level-triggered.
 * A failed pass is logged and the next one retries; it never stops coild (unlike Coil's
 * controller GC: docs/compatibility.md#orphaned-block-gc-in-the-controller).
 *
 * Whose truth: the host's links are the record of which pod holds which address (recovery.ts),
 * and a key's ADD, DEL and CHECK change or read them under that key's lock. The pass's listing is
 * only a list of candidates: by the time the pass looks at an entry, a DEL may have retired the
 * veth, freed the address and let go of the lock (adopting it then would hold an address for a
 * veth the reaper is about to delete), or an ADD may have wired a key the listing lacks (freeing
 * it would hand a live pod's address out again). So each decision is taken under the key's lock,
 * on a fresh read of that one link ({@link PodNetwork.inspect}), never on the listing and never
 * on clocks.
 */
import type Logger from 'bunyan';
import { systemClock, type Clock } from '../../runtime/clock.js';
import { every } from '../../runtime/periodic.js';
import type { Runnable } from '../../runtime/runnable.js';
import type { BlockExport } from './block-export.js';
import type { BlockReleaser } from './block-release.js';
import type { KeyedMutex } from '../podnet/keyed-mutex.js';
import { allocationKey, type NodeIpam } from './node-ipam.js';
import { isHalfWired, type PodNetwork } from '../podnet/pod-network.js';
import type { OrphanAddresses } from './orphans.js';

/** Constructor options of {@link NodeGc}. */
export interface NodeGcOptions {
  readonly ipam: NodeIpam;
  readonly podNetwork: PodNetwork;
  readonly releaser: BlockReleaser;
  readonly exporter: BlockExport;
  /** The per-key lock shared with the CNI service. */
  readonly locks: KeyedMutex;
  readonly logger: Logger;
  /** Pass interval. Default 300 000 ms. */
  readonly intervalMs?: number;
  /** Time source of the interval. Default the process clock. */
  readonly clock?: Clock;
  /** Addresses no block of this node holds: kept wired, reported, claimed back (docs/ipam-recovery.md). */
  readonly orphans?: OrphanAddresses;
}

/** What one pass did. */
export interface GcReport {
  /** Keys freed because their veth is gone. */
  readonly freed: string[];
  /** Keys of veths found without an allocation and registered. */
  readonly adopted: string[];
  /** Keys of half-wired veths (no allocation, no pod route) deleted. */
  readonly removed: string[];
  readonly released: string[];
}

/**
 * The periodic pass, run by the Manager through {@link runnable}; {@link run} may also be called
 * directly (tests, `SIGHUP`).
 */
export class NodeGc {
  private running: Promise<GcReport> | undefined;

  constructor(private readonly o: NodeGcOptions) {}

  /**
   * The periodic GC as a Manager runnable: a pass every `intervalMs`, the first one interval
   * after it starts. A failed pass is logged and the next one retries. It returns on the stop
   * signal once no pass runs any more — the one it started or one a `SIGHUP` did — so nothing of
   * GC touches the host or the API after the Manager stopped its runnables.
   */
  runnable(): Runnable {
    return {
      run: async (signal) => {
        await every(signal, this.o.intervalMs ?? 300_000, () => this.run().then(
          () => undefined,
          (err: unknown) => this.o.logger.error({ err }, 'node GC pass failed'),
        ), this.o.clock ?? systemClock);
        while (this.running) await this.running.catch(() => undefined);
      },
    };
  }

  /** One pass (joins a pass already running). @throws PodNetworkError, NetlinkError, ApiError */
  run(): Promise<GcReport> {
    this.running ??= this.pass().finally(() => (this.running = undefined));
    return this.running;
  }

  private async pass(): Promise<GcReport> {
    const entries = await this.o.podNetwork.list();
    const listed = new Set(entries.map((e) => allocationKey(e.containerId, e.ifname)));
    const freed: string[] = [];
    for (const a of this.o.ipam.allocations()) {
      const key = allocationKey(a.containerId, a.ifname);
      // A key with an ADD, DEL or CHECK in flight is that call's business; the next pass sees it settled.
      if (listed.has(key) || this.o.locks.isBusy(key)) continue;
      await this.o.locks.run(key, async () => {
        if (!this.o.ipam.lookup(a.containerId, a.ifname)) return;
        if (await this.o.podNetwork.inspect(a.containerId, a.ifname)) return; // wired after the listing
        this.o.ipam.free(a.containerId, a.ifname);
        freed.push(key);
      });
    }
    if (freed.length > 0) this.o.logger.info({ freed }, 'freed addresses of pods whose veth is gone');
    const adopted: string[] = [];
    const removed: string[] = [];
    for (const e of entries) {
      const key = allocationKey(e.containerId, e.ifname);
      if (this.o.locks.isBusy(key) || this.o.ipam.lookup(e.containerId, e.ifname)) continue;
      await this.o.locks.run(key, async () => {
        if (this.o.ipam.lookup(e.containerId, e.ifname)) return;
        // Retired by a DEL, rolled back by a failed ADD or deleted since the listing: no pod's.
        const now = await this.o.podNetwork.inspect(e.containerId, e.ifname, e.hostIfname);
        if (now === undefined) return;
        if (isHalfWired(now)) {
          await this.o.podNetwork.destroy(e.containerId, e.ifname);
          removed.push(key);
          return;
        }
        const r = this.o.ipam.register(now);
        if (r.ok) {
          adopted.push(key);
          if (r.withoutBlock) this.o.orphans?.note({ ...r.withoutBlock, registeredIn: r.blockName });
          else this.o.orphans?.forget(key);
        } else if (r.noBlock && this.o.orphans) this.o.orphans.note(now);
        else this.o.logger.warn({ key, reason: r.reason }, 'coil veth without an allocation cannot be adopted');
      });
    }
    // An orphan whose veth the listing no longer shows is no pod's address to claim any more.
    for (const key of this.o.orphans?.keys() ?? []) if (!listed.has(key)) this.o.orphans?.forget(key);
    if (adopted.length > 0) this.o.logger.warn({ adopted }, 'adopted coil veths that held no allocation');
    if (removed.length > 0) this.o.logger.warn({ removed }, 'deleted half-wired coil veths (no allocation, no pod route)');
    const released = await this.o.releaser.release();
    await this.o.exporter.sync();
    return { freed, adopted, removed, released };
  }
}
