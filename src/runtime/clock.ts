/**
 * Time source of the work queue and the loops built on timers, so unit tests can step time
 * instead of sleeping. All values are milliseconds.
 */
export interface Clock {
  /** Monotonic milliseconds (only differences are meaningful). */
  now(): number;
  /** Runs `fn` once after `ms`; the returned handle cancels it. */
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

/** The process clock: `performance.now()` and Node timers (unref'd: a pending retry never keeps a process alive). */
export const systemClock: Clock = Object.freeze({
  now: () => performance.now(),
  setTimeout: (fn: () => void, ms: number) => setTimeout(fn, ms).unref(),
  clearTimeout: (h: unknown) => clearTimeout(h as NodeJS.Timeout),
});

/** Resolves after `ms` on `clock`, or at once when `signal` aborts. */
export function sleep(ms: number, signal?: AbortSignal, clock: Clock = systemClock): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const onAbort = (): void => {
      clock.clearTimeout(handle);
      resolve();
    };
    const handle = clock.setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
