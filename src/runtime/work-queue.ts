import { systemClock, type Clock } from './clock.js';

/**
 * Receives the queue's measurements; {@link Metrics.queueObserver} maps them onto client-go's
 * `workqueue_*` series. Durations are milliseconds.
 */
export interface QueueObserver {
  depth(n: number): void;
  added(): void;
  queueLatencyMs(ms: number): void;
  workDurationMs(ms: number): void;
  retried(): void;
}

/** Options of a {@link WorkQueue}. */
export interface WorkQueueOptions {
  /** First retry delay after an error, doubled on each further failure. Default 5 ms (client-go). */
  readonly baseDelayMs?: number;
  /**
   * Cap of the per-key backoff. Default 300 000 ms (5 min): client-go's 1000 s makes a fixed
   * problem look permanent for a quarter of an hour (docs/design.md#retry-backoff).
   */
  readonly maxDelayMs?: number;
  readonly clock?: Clock;
  readonly observer?: QueueObserver;
}

/**
 * A de-duplicating, rate-limited work queue of string keys with client-go's semantics:
 * - a key waiting in the queue is stored once however often it is added;
 * - a key being processed is never handed out again until {@link done}; adding it meanwhile
 *   marks it dirty and it is queued again by `done` (per-key serialisation);
 * - different keys are handed to as many concurrent {@link get} callers as there are
 *   (parallelism across keys);
 * - {@link addRateLimited} delays a key by `baseDelayMs · 2^(failures-1)`, capped at
 *   `maxDelayMs`, until {@link forget} resets its failure count.
 *
 * Concurrency: single-threaded JS; every method runs to completion, so no lock is needed. The
 * invariants are `queue ⊆ dirty` and `queue ∩ processing = ∅`.
 *
 * @see client-go `util/workqueue/queue.go`, `delaying_queue.go`, `default_rate_limiters.go`
 */
export class WorkQueue {
  private readonly queue: string[] = [];
  private readonly dirty = new Set<string>();
  private readonly processing = new Set<string>();
  private readonly addedAt = new Map<string, number>();
  private readonly startedAt = new Map<string, number>();
  private readonly failures = new Map<string, number>();
  private readonly delayed = new Map<string, { readyAt: number; handle: unknown }>();
  private readonly getters: ((key: string | undefined) => void)[] = [];
  private readonly idleWaiters: (() => void)[] = [];
  private shuttingDown = false;
  private readonly baseDelayMs: number;
  private readonly maxDelayMs: number;
  private readonly clock: Clock;
  private readonly observer: QueueObserver | undefined;

  constructor(options: WorkQueueOptions = {}) {
    this.baseDelayMs = options.baseDelayMs ?? 5;
    this.maxDelayMs = options.maxDelayMs ?? 300_000;
    this.clock = options.clock ?? systemClock;
    this.observer = options.observer;
  }

  /** Queues `key` now (no-op if already queued or after {@link shutdown}). */
  add(key: string): void {
    if (this.shuttingDown || this.dirty.has(key)) return;
    this.observer?.added();
    this.dirty.add(key);
    this.addedAt.set(key, this.clock.now());
    if (this.processing.has(key)) return;
    this.queue.push(key);
    this.dispatch();
  }

  /**
   * Queues `key` after `delayMs`. An earlier pending delay for the same key wins, so a resync
   * never postpones a retry that is already due sooner.
   */
  addAfter(key: string, delayMs: number): void {
    if (this.shuttingDown) return;
    if (delayMs <= 0) return this.add(key);
    this.observer?.retried();
    const readyAt = this.clock.now() + delayMs;
    const pending = this.delayed.get(key);
    if (pending && pending.readyAt <= readyAt) return;
    if (pending) this.clock.clearTimeout(pending.handle);
    const handle = this.clock.setTimeout(() => {
      this.delayed.delete(key);
      this.add(key);
    }, delayMs);
    this.delayed.set(key, { readyAt, handle });
  }

  /**
   * Counts a failure of `key` and queues it after `overrideDelayMs`, or after the exponential
   * backoff when absent.
   * @returns the delay used, in ms
   */
  addRateLimited(key: string, overrideDelayMs?: number): number {
    const n = (this.failures.get(key) ?? 0) + 1;
    this.failures.set(key, n);
    const delay = overrideDelayMs ?? this.backoffMs(n);
    this.addAfter(key, delay);
    return delay;
  }

  /** Backoff after the `n`-th consecutive failure (n ≥ 1), in ms. */
  backoffMs(n: number): number {
    // 2^n overflows to Infinity past n≈1024; Math.min keeps the cap exact.
    return Math.min(this.maxDelayMs, this.baseDelayMs * 2 ** Math.max(0, n - 1));
  }

  /** Resets the failure count of `key` (call after a success or a PermanentError). */
  forget(key: string): void {
    this.failures.delete(key);
  }

  /** Consecutive failures of `key` since the last {@link forget}. */
  numRequeues(key: string): number {
    return this.failures.get(key) ?? 0;
  }

  /**
   * Waits for the next key and marks it as processing; the caller must call {@link done}.
   * @returns the key, or `undefined` once the queue is shut down and empty of ready keys
   */
  get(): Promise<string | undefined> {
    const key = this.take();
    if (key !== undefined || this.shuttingDown) return Promise.resolve(key);
    return new Promise((resolve) => this.getters.push(resolve));
  }

  /** Ends processing of `key`; if it was added meanwhile it is queued again. */
  done(key: string): void {
    this.processing.delete(key);
    const started = this.startedAt.get(key);
    this.startedAt.delete(key);
    if (started !== undefined) this.observer?.workDurationMs(this.clock.now() - started);
    if (this.dirty.has(key) && !this.shuttingDown) {
      this.queue.push(key);
      this.dispatch();
    }
    if (this.processing.size === 0) for (const w of this.idleWaiters.splice(0)) w();
  }

  /** Keys ready to be handed out. */
  len(): number {
    return this.queue.length;
  }

  /** Keys currently handed out and not yet done. */
  inFlight(): number {
    return this.processing.size;
  }

  /**
   * Work in progress, for client-go's stuck-worker gauges: the summed and the longest age of the
   * keys currently processing, in ms.
   */
  unfinishedWork(): { totalMs: number; longestMs: number } {
    const now = this.clock.now();
    let totalMs = 0;
    let longestMs = 0;
    for (const started of this.startedAt.values()) {
      totalMs += now - started;
      longestMs = Math.max(longestMs, now - started);
    }
    return { totalMs, longestMs };
  }

  /** Whether a key waits for a delayed add (a retry or requeueAfter). */
  isWaiting(key: string): boolean {
    return this.delayed.has(key);
  }

  /**
   * Stops accepting keys, cancels delayed adds and releases blocked {@link get} callers with
   * `undefined`. Keys already handed out may still call {@link done}.
   */
  shutdown(): void {
    this.shuttingDown = true;
    for (const { handle } of this.delayed.values()) this.clock.clearTimeout(handle);
    this.delayed.clear();
    this.queue.length = 0;
    this.dirty.clear();
    this.observer?.depth(0);
    for (const g of this.getters.splice(0)) g(undefined);
  }

  /** Resolves when no key is being processed (used to drain on shutdown). */
  idle(): Promise<void> {
    if (this.processing.size === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  private take(): string | undefined {
    const key = this.queue.shift();
    if (key === undefined) return undefined;
    this.dirty.delete(key);
    this.processing.add(key);
    const now = this.clock.now();
    this.startedAt.set(key, now);
    const added = this.addedAt.get(key);
    this.addedAt.delete(key);
    if (added !== undefined) this.observer?.queueLatencyMs(now - added);
    this.observer?.depth(this.queue.length);
    return key;
  }

  private dispatch(): void {
    while (this.getters.length > 0 && this.queue.length > 0) {
      const key = this.take();
      this.getters.shift()!(key);
    }
    this.observer?.depth(this.queue.length);
  }
}
