import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { CoalescingSync } from './coalescing-sync.js';

/** A sync that blocks until released, counting its runs. */
function gated() {
  let runs = 0;
  let release: (() => void) | undefined;
  const sync = async (): Promise<void> => {
    runs++;
    await new Promise<void>((resolve) => (release = resolve));
  };
  return { sync, runs: () => runs, release: () => release?.() };
}

describe('CoalescingSync', () => {
  test('triggers during a sync collapse into one more sync, never overlapping', async () => {
    let active = 0;
    let most = 0;
    const g = gated();
    const loop = new CoalescingSync({
      sync: async () => {
        most = Math.max(most, ++active);
        await g.sync();
        active--;
      },
      onError: () => assert.fail('no error expected'),
    });
    loop.trigger();
    for (let i = 0; i < 5; i++) loop.trigger();
    assert.equal(g.runs(), 1);
    g.release();
    await sleep(0);
    assert.equal(g.runs(), 2, 'five triggers during the first sync cost one more');
    g.release();
    await loop.idle();
    assert.equal(g.runs(), 2);
    assert.equal(most, 1);
  });

  test('sync() waits for the running sync, then runs its own, and throws to its caller', async () => {
    const g = gated();
    let fail = false;
    const loop = new CoalescingSync({ sync: async () => { await g.sync(); if (fail) throw new Error('kernel says no'); }, onError: () => undefined });
    loop.trigger();
    const direct = loop.sync();
    await sleep(0);
    assert.equal(g.runs(), 1);
    fail = true;
    g.release();
    await sleep(0);
    assert.equal(g.runs(), 2);
    g.release();
    await assert.rejects(direct, /kernel says no/);
  });

  test('after stop(), triggers are ignored and a running loop ends after its current sync', async () => {
    const g = gated();
    const loop = new CoalescingSync({ sync: g.sync, onError: () => undefined });
    loop.trigger();
    loop.trigger(); // would run once more
    const stopped = loop.stop();
    g.release();
    await stopped;
    assert.equal(g.runs(), 1);
    assert.ok(loop.isStopped);
    loop.trigger();
    await loop.idle();
    assert.equal(g.runs(), 1);
  });

  test('a failed triggered sync is reported and retried with a doubling delay; stop() drops the retry', async () => {
    let runs = 0;
    const delays: (number | undefined)[] = [];
    const loop = new CoalescingSync({
      sync: async () => {
        runs++;
        throw new Error('no fou');
      },
      onError: (_err, retryInMs) => delays.push(retryInMs),
      retryDelayMs: 5,
      retryMaxMs: 10,
    });
    loop.trigger();
    while (delays.length < 3) await sleep(2);
    await loop.stop();
    const at = runs;
    assert.deepEqual(delays.slice(0, 3), [5, 10, 10]);
    await sleep(30);
    assert.equal(runs, at, 'no retry after stop()');
  });

  test('without retryDelayMs a failure waits for the next trigger', async () => {
    const errors: (number | undefined)[] = [];
    let runs = 0;
    const loop = new CoalescingSync({ sync: async () => { runs++; throw new Error('x'); }, onError: (_e, r) => errors.push(r) });
    loop.trigger();
    await sleep(20);
    assert.equal(runs, 1);
    assert.deepEqual(errors, [undefined]);
  });
});
