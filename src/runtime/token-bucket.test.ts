import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { FakeClock } from '../../test/fakes/clock.fake.js';
import { TokenBucket } from './token-bucket.js';

describe('TokenBucket', () => {
  it('lets the burst through at once, then refills at its rate up to the burst', () => {
    const clock = new FakeClock();
    const b = new TokenBucket({ burst: 3, perSecond: 2 }, clock);
    assert.deepEqual([b.tryTake(), b.tryTake(), b.tryTake(), b.tryTake()], [true, true, true, false]);
    clock.advance(499);
    assert.equal(b.tryTake(), false, 'not a whole token after 499 ms at 2/s');
    clock.advance(1);
    assert.equal(b.tryTake(), true);
    clock.advance(60_000);
    assert.deepEqual([b.tryTake(), b.tryTake(), b.tryTake(), b.tryTake()], [true, true, true, false], 'a quiet minute refills only the burst');
  });

  it('take() waits on its clock for the next token', async () => {
    const clock = new FakeClock();
    const b = new TokenBucket({ burst: 1, perSecond: 1 }, clock);
    await b.take();
    let taken = false;
    const p = b.take().then(() => void (taken = true));
    await new Promise((r) => setImmediate(r));
    assert.equal(taken, false);
    assert.deepEqual(clock.pending(), [1000]);
    clock.advance(1000);
    await p;
    assert.equal(taken, true);
  });

  it('refuses a bucket that never lets anything through', () => {
    assert.throws(() => new TokenBucket({ burst: 0, perSecond: 1 }), /burst ≥ 1/);
    assert.throws(() => new TokenBucket({ burst: 1, perSecond: 0 }), /perSecond > 0/);
  });
});
