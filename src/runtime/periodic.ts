/**
 * The body of a periodic {@link Runnable}: coild's GC, the BlockRequest poll. Ticks at a fixed
 * rate like Go's `time.Ticker` (which Coil's loops use): the first tick one interval after the
 * start, a tick that overran drops the ticks it covered, and ticks never overlap.
 */
import { sleep, systemClock, type Clock } from './clock.js';
import type { Runnable } from './runnable.js';

/**
 * Calls `tick` every `intervalMs` until `signal` aborts, awaiting each call; returns once the
 * signal has aborted and the call in flight (if any) has finished, so a Manager's stop waits for
 * it. What `tick` throws is thrown (a supervised runnable is then restarted with backoff).
 * @param intervalMs milliseconds, > 0
 */
export async function every(signal: AbortSignal, intervalMs: number, tick: () => Promise<void> | void, clock: Clock = systemClock): Promise<void> {
  let next = clock.now() + intervalMs;
  while (!signal.aborted) {
    await sleep(Math.max(0, next - clock.now()), signal, clock);
    if (signal.aborted) return;
    await tick();
    const now = clock.now();
    do next += intervalMs;
    while (next <= now);
  }
}

/** A {@link Runnable} that runs {@link every}. */
export function periodic(intervalMs: number, tick: () => Promise<void> | void, clock: Clock = systemClock): Runnable {
  return { run: (signal) => every(signal, intervalMs, tick, clock) };
}
