import type Logger from 'bunyan';
import { Kinds } from '../api/v2/kinds.js';
import type { Client } from './client.js';
import { sleep } from './clock.js';
import { isAlreadyExists, isConflict } from './errors.js';
import type { Metrics } from './metrics.js';

/** Options of {@link LeaderElector}; defaults are controller-runtime's. */
export interface LeaderElectionOptions {
  /** Lease name, e.g. `coil-leader`. */
  readonly name: string;
  readonly namespace: string;
  /** Unique per replica (hostname + random suffix). */
  readonly identity: string;
  /** How long a non-renewed lease stays valid for the others. Default 15 000 ms. */
  readonly leaseDurationMs?: number;
  /** The leader gives up if it could not renew for this long. Default 10 000 ms; must be < leaseDurationMs. */
  readonly renewDeadlineMs?: number;
  /** Interval between acquire/renew attempts. Default 2 000 ms. */
  readonly retryPeriodMs?: number;
}

/**
 * Lease-based leader election, client-go's algorithm:
 * - acquire: every retryPeriod, read the Lease; take it if it is absent, released (empty holder)
 *   or not renewed for leaseDuration *as observed locally* (no clock comparison across nodes);
 *   writes use the read resourceVersion, so two candidates can never both win;
 * - renew: every retryPeriod; if no renewal succeeded within renewDeadline, leadership is lost
 *   (`onStoppedLeading`) — the caller must stop acting at once (the Manager exits);
 * - release on clean shutdown: holder cleared, so a standby takes over on its next attempt
 *   instead of waiting out the lease.
 *
 * @see client-go `tools/leaderelection/leaderelection.go`; controller-runtime 15 s / 10 s / 2 s
 */
export class LeaderElector {
  private readonly leaseDurationMs: number;
  private readonly renewDeadlineMs: number;
  private readonly retryPeriodMs: number;
  private observed: { holder: string; renewTime: string; atMs: number } | undefined;
  private leading = false;
  private readonly stopping = new AbortController();
  private loop: Promise<void> | undefined;

  constructor(
    readonly options: LeaderElectionOptions,
    private readonly client: Client,
    private readonly metrics: Metrics,
    private readonly log: Logger,
  ) {
    this.leaseDurationMs = options.leaseDurationMs ?? 15_000;
    this.renewDeadlineMs = options.renewDeadlineMs ?? 10_000;
    this.retryPeriodMs = options.retryPeriodMs ?? 2_000;
    if (this.renewDeadlineMs >= this.leaseDurationMs) throw new Error('renewDeadlineMs must be shorter than leaseDurationMs');
    metrics.leaderStatus.set({ name: options.name }, 0);
  }

  /** Whether this replica currently holds the lease. */
  isLeader(): boolean {
    return this.leading;
  }

  /**
   * Runs the election in the background: `onStartedLeading` once acquired, `onStoppedLeading`
   * if renewal fails for renewDeadline (not called on {@link stop}).
   */
  run(onStartedLeading: () => void, onStoppedLeading: () => void): void {
    this.loop = (async () => {
      const stop = this.stopping.signal;
      while (!stop.aborted && !(await this.tryAcquireOrRenew())) await sleep(this.retryPeriodMs * (1 + Math.random() * 0.2), stop);
      if (stop.aborted) return;
      this.setLeading(true);
      this.log.info({ lease: this.options.name, identity: this.options.identity }, 'acquired lease');
      onStartedLeading();
      let lastRenewMs = performance.now();
      while (!stop.aborted) {
        await sleep(this.retryPeriodMs, stop);
        if (stop.aborted) return;
        if (await this.tryAcquireOrRenew()) lastRenewMs = performance.now();
        else if (performance.now() - lastRenewMs > this.renewDeadlineMs) {
          this.setLeading(false);
          this.log.error({ lease: this.options.name }, 'failed to renew lease within the renew deadline; leadership lost');
          onStoppedLeading();
          return;
        }
      }
    })();
  }

  /**
   * Stops the loop; with `release` (default true) and while leading, clears the holder so a
   * standby takes over at once. Call only after leader-only work has stopped.
   */
  async stop(opts: { release?: boolean } = {}): Promise<void> {
    this.stopping.abort();
    await this.loop;
    if (this.leading && (opts.release ?? true)) await this.release();
    this.setLeading(false);
  }

  private async tryAcquireOrRenew(): Promise<boolean> {
    const { name, namespace, identity } = this.options;
    const now = microTime();
    try {
      const lease = await this.client.get(Kinds.Lease, { namespace, name });
      if (!lease) {
        await this.client.create(Kinds.Lease, {
          metadata: { name, namespace },
          spec: { holderIdentity: identity, leaseDurationSeconds: Math.ceil(this.leaseDurationMs / 1000), acquireTime: now, renewTime: now, leaseTransitions: 0 },
        });
        return true;
      }
      const spec = lease.spec ?? {};
      const holder = spec.holderIdentity ?? '';
      const renewTime = spec.renewTime ?? '';
      if (!this.observed || this.observed.holder !== holder || this.observed.renewTime !== renewTime) {
        this.observed = { holder, renewTime, atMs: performance.now() };
      }
      const heldByOther = holder !== '' && holder !== identity;
      if (heldByOther && performance.now() - this.observed.atMs < this.leaseDurationMs) return false;
      const acquiring = holder !== identity;
      await this.client.update(Kinds.Lease, {
        ...lease,
        spec: {
          ...spec,
          holderIdentity: identity,
          leaseDurationSeconds: Math.ceil(this.leaseDurationMs / 1000),
          acquireTime: acquiring ? now : (spec.acquireTime ?? now),
          renewTime: now,
          leaseTransitions: (spec.leaseTransitions ?? 0) + (acquiring && holder !== '' ? 1 : 0),
        },
      });
      return true;
    } catch (err) {
      // A conflict means another candidate wrote first: an expected loss, not an error.
      if (!isConflict(err) && !isAlreadyExists(err)) this.log.warn({ err, lease: name }, 'lease acquire/renew failed');
      return false;
    }
  }

  private async release(): Promise<void> {
    const { name, namespace, identity } = this.options;
    try {
      const lease = await this.client.get(Kinds.Lease, { namespace, name });
      if (!lease || lease.spec?.holderIdentity !== identity) return;
      const now = microTime();
      // client-go's release: empty holder, 1 s duration, so standbys need not wait out the lease.
      await this.client.update(Kinds.Lease, { ...lease, spec: { ...lease.spec, holderIdentity: '', leaseDurationSeconds: 1, renewTime: now, acquireTime: now } });
      this.log.info({ lease: name }, 'released lease');
    } catch (err) {
      this.log.warn({ err, lease: name }, 'lease release failed; standbys take over after the lease duration');
    }
  }

  private setLeading(v: boolean): void {
    this.leading = v;
    this.metrics.leaderStatus.set({ name: this.options.name }, v ? 1 : 0);
  }
}

/** RFC 3339 with microseconds, the `metav1.MicroTime` wire format. */
export function microTime(d = new Date()): string {
  return d.toISOString().replace(/\.(\d{3})Z$/, '.$1000Z');
}
