/**
 * NodeGc: coild's periodic garbage collection (`--addressblock-gc-interval`, default 5 min, as
 * Coil's; coil-behaviour.md §5.5). Each pass:
 * 1. frees allocations whose host veth is gone (a pod torn down without a DEL reaching coild);
 * 2. adopts coil veths that hold no allocation (an `ip` batch of a SIGKILLed coild that finished
 *    after the restart's recovery read the host), so their addresses are not handed out twice;
 * 3. releases blocks that have been empty past the grace period;
 * 4. re-syncs the export table (119) with this node's blocks.
 * Both directions together make coild's state converge on the host's, level-triggered.
 * A failed pass is logged and the next one retries; it never stops coild (unlike Coil's
 * controller GC, STYLE.md §3).
 */
import type Logger from 'bunyan';
import type { BlockExport } from './block-export.js';
import type { BlockReleaser } from './block-release.js';
import type { KeyedMutex } from './keyed-mutex.js';
import { allocationKey, type NodeIpam } from './node-ipam.js';
import type { PodNetwork } from './pod-network.js';

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
  /** Clock, ms since the epoch. Default Date.now. */
  readonly now?: () => number;
}

/** What one pass did. */
export interface GcReport {
  /** Keys freed because their veth is gone. */
  readonly freed: string[];
  /** Keys of veths found without an allocation and registered. */
  readonly adopted: string[];
  readonly released: string[];
}

/** The periodic pass; {@link run} may also be called directly (tests, `SIGHUP`-style triggers). */
export class NodeGc {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<GcReport> | undefined;
  private readonly now: () => number;

  constructor(private readonly o: NodeGcOptions) {
    this.now = o.now ?? Date.now;
  }

  start(): void {
    this.timer = setInterval(() => {
      this.run().catch((err: unknown) => this.o.logger.error({ err }, 'node GC pass failed'));
    }, this.o.intervalMs ?? 300_000);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.running?.catch(() => undefined);
  }

  /** One pass (joins a pass already running). @throws PodNetworkError, NetlinkError, ApiError */
  run(): Promise<GcReport> {
    this.running ??= this.pass().finally(() => (this.running = undefined));
    return this.running;
  }

  private async pass(): Promise<GcReport> {
    const listedAtMs = this.now();
    const entries = await this.o.podNetwork.list();
    const live = new Set(entries.map((e) => allocationKey(e.containerId, e.ifname)));
    const freed: string[] = [];
    for (const a of this.o.ipam.allocations()) {
      const key = allocationKey(a.containerId, a.ifname);
      // An allocation settled after the listing began may have its veth created after the
      // listing read the links; one with an ADD or DEL in flight is that call's business.
      if (live.has(key) || a.settledAtMs >= listedAtMs || this.o.locks.isBusy(key)) continue;
      await this.o.locks.run(key, async () => {
        const current = this.o.ipam.lookup(a.containerId, a.ifname);
        if (!current || current.settledAtMs >= listedAtMs) return;
        this.o.ipam.free(a.containerId, a.ifname);
        freed.push(key);
      });
    }
    if (freed.length > 0) this.o.logger.info({ freed }, 'freed addresses of pods whose veth is gone');
    const adopted: string[] = [];
    for (const e of entries) {
      const key = allocationKey(e.containerId, e.ifname);
      if (this.o.locks.isBusy(key) || this.o.ipam.lookup(e.containerId, e.ifname)) continue;
      const r = this.o.ipam.register(e);
      if (r.ok) adopted.push(key);
      else this.o.logger.warn({ key, reason: r.reason }, 'coil veth without an allocation cannot be adopted');
    }
    if (adopted.length > 0) this.o.logger.warn({ adopted }, 'adopted coil veths that held no allocation');
    const released = await this.o.releaser.release();
    await this.o.exporter.sync();
    return { freed, adopted, released };
  }
}
