/** hack/bench/cold-start-census.ts: the scale benchmark's count of lost and duplicate blocks after a cold start, per cold start. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { coldStartCensus } from '../hack/bench/cold-start-census.js';

const held = (m: Record<string, number>) => (n: string) => m[n] ?? 0;

test('a node without a block is lost unless it released one since this cold start began', () => {
  // The second cold start (began at 100): every node released the first one's block at 50.
  const releases = [{ node: 'a', at: 50 }, { node: 'b', at: 50 }, { node: 'c', at: 50 }, { node: 'c', at: 130 }];
  assert.deepEqual(coldStartCensus(['a', 'b', 'c'], () => true, held({ a: 1 }), releases, 100), { duplicates: 0, lost: 1, unserved: 0, releasedOwn: 1 });
});

test('a node not served within the wait and without a block is late, not lost', () => {
  assert.deepEqual(coldStartCensus(['a', 'b'], (n) => n === 'a', held({}), [], 0), { duplicates: 0, lost: 1, unserved: 1, releasedOwn: 0 });
});

test('nodes with more than one block are duplicates; a release does not excuse them', () => {
  assert.deepEqual(coldStartCensus(['a', 'b'], () => true, held({ a: 2, b: 3 }), [{ node: 'a', at: 10 }], 0), { duplicates: 2, lost: 0, unserved: 0, releasedOwn: 0 });
});
