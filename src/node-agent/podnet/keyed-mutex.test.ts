import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { KeyedMutex } from './keyed-mutex.js';

const tick = (ms = 5) => new Promise((r) => setTimeout(r, ms));

describe('KeyedMutex', () => {
  it('runs calls for one key one after another, in arrival order', async () => {
    const m = new KeyedMutex();
    const log: string[] = [];
    const call = (name: string) => m.run('k', async () => { log.push(`${name} in`); await tick(); log.push(`${name} out`); });
    await Promise.all([call('a'), call('b'), call('c')]);
    assert.deepEqual(log, ['a in', 'a out', 'b in', 'b out', 'c in', 'c out']);
  });

  it('runs different keys in parallel (Coil #368)', async () => {
    const m = new KeyedMutex();
    let inside = 0;
    let most = 0;
    await Promise.all(['a', 'b', 'c'].map((k) => m.run(k, async () => { most = Math.max(most, ++inside); await tick(); inside--; })));
    assert.equal(most, 3);
  });

  it('a throwing holder releases the key and forgets idle keys', async () => {
    const m = new KeyedMutex();
    await assert.rejects(m.run('k', async () => { throw new Error('boom'); }), /boom/);
    assert.equal(await m.run('k', async () => 42), 42);
    assert.equal(m.size, 0);
    assert.equal(m.isBusy('k'), false);
  });
});
