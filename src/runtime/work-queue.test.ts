import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { FakeClock } from '../../test/fakes/clock.fake.js';
import { WorkQueue } from './work-queue.js';

/** Runs `workers` loops that hold each key for a few macrotasks, recording overlap per key. */
async function drive(q: WorkQueue, workers: number, onKey: (key: string) => Promise<void>): Promise<void> {
  await Promise.all(
    Array.from({ length: workers }, async () => {
      for (;;) {
        const key = await q.get();
        if (key === undefined) return;
        try {
          await onKey(key);
        } finally {
          q.done(key);
        }
      }
    }),
  );
}

const tick = (): Promise<void> => new Promise((r) => setImmediate(r));

describe('WorkQueue', () => {
  it('stores a key once however often it is added while waiting', async () => {
    const q = new WorkQueue();
    for (let i = 0; i < 5; i++) q.add('a');
    q.add('b');
    assert.equal(q.len(), 2);
    assert.equal(await q.get(), 'a');
    assert.equal(await q.get(), 'b');
  });

  it('never hands out a key being processed; a re-add during processing runs once after done', async () => {
    const q = new WorkQueue();
    q.add('a');
    const first = await q.get();
    q.add('a');
    q.add('a');
    assert.equal(q.len(), 0, 'dirty key must not be ready while processing');
    let second: string | undefined;
    void q.get().then((k) => (second = k));
    await tick();
    assert.equal(second, undefined);
    q.done(first!);
    await tick();
    assert.equal(second, 'a');
    q.done('a');
    assert.equal(q.len(), 0, 'two adds during processing collapse into one rerun');
  });

  it('runs distinct keys in parallel and one key never twice at once under a burst', async () => {
    const q = new WorkQueue();
    const active = new Map<string, number>();
    let maxPerKey = 0;
    let maxParallel = 0;
    let running = 0;
    let runs = 0;
    const work = drive(q, 8, async (key) => {
      const n = (active.get(key) ?? 0) + 1;
      active.set(key, n);
      maxPerKey = Math.max(maxPerKey, n);
      running++;
      maxParallel = Math.max(maxParallel, running);
      runs++;
      await tick();
      await tick();
      running--;
      active.set(key, n - 1);
    });
    for (let i = 0; i < 1000; i++) {
      q.add(`k${i % 50}`);
      if (i % 10 === 0) await tick();
    }
    while (q.len() > 0 || q.inFlight() > 0) await tick();
    q.shutdown();
    await work;
    assert.equal(maxPerKey, 1);
    assert.ok(maxParallel > 1, `expected parallelism across keys, saw ${maxParallel}`);
    assert.ok(runs >= 50 && runs <= 1000, `runs=${runs}`);
  });

  it('backs off exponentially from 5 ms per key, capped, and forget resets it', () => {
    const clock = new FakeClock();
    const q = new WorkQueue({ clock, maxDelayMs: 1000 });
    const delays = Array.from({ length: 10 }, () => q.addRateLimited('a'));
    assert.deepEqual(delays, [5, 10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
    assert.equal(q.numRequeues('a'), 10);
    assert.equal(q.addRateLimited('b'), 5, 'backoff is per key');
    q.forget('a');
    assert.equal(q.numRequeues('a'), 0);
    assert.equal(q.addRateLimited('a'), 5);
  });

  it('default backoff cap is minutes, not 1000 s', () => {
    const q = new WorkQueue({ clock: new FakeClock() });
    assert.equal(q.backoffMs(10_000), 300_000);
  });

  it('adds a delayed key only when its delay has passed, keeping the earliest of two delays', async () => {
    const clock = new FakeClock();
    const q = new WorkQueue({ clock });
    q.addAfter('a', 100);
    q.addAfter('a', 500);
    assert.deepEqual(clock.pending(), [100]);
    clock.advance(99);
    assert.equal(q.len(), 0);
    clock.advance(1);
    assert.equal(q.len(), 1);
    q.addAfter('b', 50);
    q.addAfter('b', 10);
    assert.deepEqual(clock.pending(), [10]);
  });

  it('treats a zero or negative delay as an immediate add', () => {
    const q = new WorkQueue({ clock: new FakeClock() });
    q.addAfter('a', 0);
    assert.equal(q.len(), 1);
  });

  it('shutdown releases blocked getters and drops delayed keys', async () => {
    const clock = new FakeClock();
    const q = new WorkQueue({ clock });
    const pending = q.get();
    q.addAfter('a', 10);
    q.shutdown();
    assert.equal(await pending, undefined);
    clock.advance(100);
    assert.equal(q.len(), 0);
    q.add('b');
    assert.equal(await q.get(), undefined);
  });

  it('idle resolves when the last in-flight key is done', async () => {
    const q = new WorkQueue();
    q.add('a');
    const k = await q.get();
    let idle = false;
    void q.idle().then(() => (idle = true));
    await tick();
    assert.equal(idle, false);
    q.done(k!);
    await tick();
    assert.equal(idle, true);
  });

  it('reports depth, adds, latency, work duration and retries to its observer', async () => {
    const clock = new FakeClock();
    const seen = { depth: [] as number[], added: 0, latency: [] as number[], work: [] as number[], retried: 0 };
    const q = new WorkQueue({
      clock,
      observer: {
        depth: (n) => seen.depth.push(n),
        added: () => seen.added++,
        queueLatencyMs: (ms) => seen.latency.push(ms),
        workDurationMs: (ms) => seen.work.push(ms),
        retried: () => seen.retried++,
      },
    });
    q.add('a');
    clock.advance(7);
    const k = await q.get();
    clock.advance(3);
    q.done(k!);
    q.addRateLimited('a');
    assert.equal(seen.added, 1);
    assert.deepEqual(seen.latency, [7]);
    assert.deepEqual(seen.work, [3]);
    assert.equal(seen.retried, 1);
    assert.equal(seen.depth.at(-1), 0);
  });
});
