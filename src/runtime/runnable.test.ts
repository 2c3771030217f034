import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { FakeClock } from '../../test/fakes/clock.fake.js';
import { silentLogger } from './logging.js';
import { every } from './periodic.js';
import { HEALTHY_RUN_MS, RunnableSupervisor } from './runnable.js';

async function settle(): Promise<void> {
  for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r));
}

describe('RunnableSupervisor', () => {
  it('backs off 1 s doubling on failures, and starts again at 1 s after a healthy run', async () => {
    const clock = new FakeClock();
    let fail = (): void => undefined;
    let runs = 0;
    const quickFailures = 3;
    const supervisor = new RunnableSupervisor({ name: 'flaky', leaderOnly: false }, {
      run: async () => {
        runs++;
        if (runs <= quickFailures) throw new Error('fails at once');
        await new Promise<void>((_, reject) => (fail = () => reject(new Error('fails after a while'))));
      },
    }, silentLogger(), clock);
    supervisor.start();
    const delays: number[] = [];
    for (let i = 0; i < quickFailures; i++) {
      await settle();
      delays.push(...clock.pending());
      clock.advance(clock.pending()[0]!);
    }
    assert.deepEqual(delays, [1_000, 2_000, 4_000]);
    await settle();
    assert.equal(runs, quickFailures + 1);
    clock.advance(HEALTHY_RUN_MS);
    fail();
    await settle();
    assert.deepEqual(clock.pending(), [1_000], 'the backoff restarts after a healthy run instead of growing to 8 s');
    await supervisor.stop(1_000);
  });
});

describe('every (a periodic runnable body)', () => {
  it("ticks at a fixed rate like Go's time.Ticker: an overrunning tick drops the ticks it covered, ticks never overlap", async () => {
    const clock = new FakeClock();
    const ticks: number[] = [];
    let slow: (() => void) | undefined;
    const stop = new AbortController();
    const loop = every(stop.signal, 100, async () => {
      ticks.push(clock.now());
      if (ticks.length === 2) await new Promise<void>((r) => (slow = r));
    }, clock);
    for (let i = 0; i < 2; i++) {
      clock.advance(100);
      await settle();
    }
    assert.deepEqual(ticks, [100, 200]);
    clock.advance(250); // the second tick runs until 450: the ticks at 300 and 400 are dropped
    slow!();
    await settle();
    assert.deepEqual(clock.pending(), [50], 'next tick at 500');
    clock.advance(50);
    await settle();
    assert.deepEqual(ticks, [100, 200, 500]);
    stop.abort();
    await loop;
    assert.deepEqual(clock.pending(), []);
  });
});
