/**
 * Time in tests on fakes, made independent of how busy the machine is: a test that waited a fixed
 * few milliseconds for its fakes' asynchronous steps, or bounded a computation by wall time,
 * failed on a loaded machine (unit tests at nice 19 beside a benchmark), where those steps run
 * later and the process spends most of its wall time off the CPU.
 */

/**
 * Polls `condition` every 2 ms until it holds; rejects naming `what` after `timeoutMs` (default
 * 5 s), a bound that only ends a test whose condition never comes.
 */
export async function until(condition: () => boolean, what: string, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`not within ${timeoutMs} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 2));
  }
}

/**
 * CPU time (user + system, ms) this process spends in `fn`: for bounds that catch a work-per-call
 * regression (a scan of a whole space instead of the next free index), which wall time would
 * confuse with the time a busy machine keeps the test off the CPU.
 */
export function cpuMs(fn: () => void): number {
  const before = process.cpuUsage();
  fn();
  const used = process.cpuUsage(before);
  return (used.user + used.system) / 1000;
}
