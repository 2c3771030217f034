import type Logger from 'bunyan';
import { sleep, systemClock, type Clock } from './clock.js';

/**
 * A long-lived loop the Manager runs besides reconcilers: a periodic GC, a route syncer, a
 * certificate rotator. `run` works until `signal` aborts, then returns.
 *
 * @see controller-runtime `manager.Runnable` / `LeaderElectionRunnable`
 */
export interface Runnable {
  run(signal: AbortSignal): Promise<void>;
}

/** Options of a runnable (from `@RunnableLoop` or `Manager.add`). */
export interface RunnableOptions {
  /** Unique name for logs. */
  readonly name: string;
  /** Run only on the elected leader. Default true, as controller-runtime's `NeedLeaderElection`. */
  readonly leaderOnly?: boolean;
}

/** Backoff of a failing runnable: 1 s doubling to this (ms). */
const MAX_RESTART_DELAY_MS = 60_000;

/**
 * A run that lasted this long (ms) before failing counts as healthy: the backoff starts again at
 * 1 s rather than where the failures before it had left it (client-go's backoff manager resets
 * the same way after a quiet period).
 */
export const HEALTHY_RUN_MS = 2 * MAX_RESTART_DELAY_MS;

/**
 * Runs one {@link Runnable} under supervision: if `run` throws or returns before the stop signal,
 * the error is logged and `run` starts again after an exponential backoff (1 s doubling to 60 s,
 * reset by a run of {@link HEALTHY_RUN_MS}). One failing loop therefore never stops the process —
 * Coil's garbage collector returned its first error to the manager and took the whole controller
 * down with it.
 */
export class RunnableSupervisor {
  private readonly abort = new AbortController();
  private loop: Promise<void> | undefined;

  constructor(
    readonly options: RunnableOptions,
    private readonly runnable: Runnable,
    private readonly log: Logger,
    private readonly clock: Clock = systemClock,
  ) {}

  /** Starts supervising; idempotent. */
  start(): void {
    this.loop ??= this.supervise();
  }

  /** Aborts the signal and waits for `run` to return, at most `timeoutMs`. @returns false on timeout */
  async stop(timeoutMs = 30_000): Promise<boolean> {
    this.abort.abort();
    if (!this.loop) return true;
    let timer: NodeJS.Timeout | undefined;
    const ok = await Promise.race([this.loop.then(() => true), new Promise<boolean>((r) => (timer = setTimeout(() => r(false), timeoutMs)))]);
    clearTimeout(timer);
    if (!ok) this.log.warn({ runnable: this.options.name, timeoutMs }, 'runnable still running at shutdown deadline');
    return ok;
  }

  private async supervise(): Promise<void> {
    const signal = this.abort.signal;
    let failures = 0;
    while (!signal.aborted) {
      const startedAt = this.clock.now();
      try {
        await this.runnable.run(signal);
        if (signal.aborted) return;
        throw new Error('run() returned before the stop signal');
      } catch (err) {
        if (signal.aborted) return;
        failures = this.clock.now() - startedAt >= HEALTHY_RUN_MS ? 1 : failures + 1;
        const delayMs = Math.min(MAX_RESTART_DELAY_MS, 1_000 * 2 ** (failures - 1));
        this.log.error({ err, runnable: this.options.name, failures, retryInMs: delayMs }, 'runnable failed; restarting');
        await sleep(delayMs, signal, this.clock);
      }
    }
  }
}
