/**
 * Keeps this egress pod's tunnels equal to its client pods: every change of the client set
 * ({@link ClientPodSource}) schedules one level-based sync of {@link FouServer}, which adds
 * tunnels and routes for new client addresses and removes those of clients that went away. The
 * desired set is the union of the addresses of all live client pods, so an address shared by a
 * finished and a live pod keeps its tunnel (Coil #227: refcounting by construction).
 *
 * Readiness (`pod-sync`) turns true only after the first complete list has been synced into the
 * kernel (Coil #286, #363): a new egress pod receives Service traffic only when it can route
 * replies back.
 *
 * Concurrency: syncs never overlap; changes during a sync cause exactly one more sync, and a failed
 * sync is retried with a doubling delay (runtime/coalescing-sync.ts).
 * @see docs/compatibility.md#the-nat-pod
 */
import type Logger from 'bunyan';
import { CoalescingSync } from '../runtime/coalescing-sync.js';
import type { Runnable } from '../runtime/runnable.js';
import type { ClientPodSource } from './client-pod-source.js';
import type { EgressMetrics } from './egress-metrics.js';
import type { FouServer } from './fou-server.js';

/** Constructor options of {@link ClientWatcher}. */
export interface ClientWatcherOptions {
  source: ClientPodSource;
  server: FouServer;
  metrics: EgressMetrics;
  log: Logger;
  /** Delay before retrying a failed sync, doubled up to 30 s. Default 500 ms. */
  retryDelayMs?: number;
}

/** The sync loop; run it under a RunnableSupervisor. */
export class ClientWatcher implements Runnable {
  private syncedOnce = false;
  private lastError: string | undefined;
  private readonly loop: CoalescingSync;

  constructor(private readonly o: ClientWatcherOptions) {
    this.loop = new CoalescingSync({
      sync: () => this.syncOnce(),
      onError: (err, retryInMs) => {
        this.lastError = err instanceof Error ? err.message : String(err);
        this.o.log.error({ err, retryInMs }, 'tunnel sync failed');
      },
      retryDelayMs: o.retryDelayMs ?? 500,
      retryMaxMs: 30_000,
    });
  }

  /** Marks the client set changed (called by the source); syncs once the source has listed. */
  notify(): void {
    if (this.o.source.hasSynced()) this.loop.trigger();
  }

  /** Why the pod is not ready yet, or undefined once the initial client set is in the kernel. */
  notReadyReason(): string | undefined {
    if (this.syncedOnce) return undefined;
    if (!this.o.source.hasSynced()) return 'client pods not listed yet';
    return `initial tunnel sync pending${this.lastError ? `: ${this.lastError}` : ''}`;
  }

  async run(signal: AbortSignal): Promise<void> {
    const sourceDone = this.o.source.run(signal);
    this.notify(); // a source that listed before (a restarted run) gets its sync now
    if (!signal.aborted) await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
    await this.loop.stop();
    await sourceDone;
  }

  /** One sync of the current client set into the kernel, plus the client metrics. @throws NetlinkError */
  async syncOnce(): Promise<void> {
    const pods = this.o.source.list();
    const clients = new Set(pods.flatMap((p) => p.ips));
    const { links, skipped } = await this.o.server.sync(clients);
    if (skipped.length > 0) this.o.log.warn({ skipped }, 'client addresses of a family this egress pod lacks are not served');
    this.o.metrics.setClients(pods.length, pods.flatMap((p) => p.ips.filter((ip) => links.has(ip)).map((ip) => ({ namespace: p.namespace, pod: p.name, podIp: ip, interface: links.get(ip)! }))));
    if (!this.syncedOnce) this.o.log.info({ clients: clients.size, pods: pods.length }, 'initial client sync done; ready');
    this.syncedOnce = true;
    this.lastError = undefined;
  }
}
