import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { test } from 'node:test';
import { silentLogger } from './logging.js';
import { stopOnSignals } from './program.js';

function harness(stop: () => Promise<void>, timeoutMs?: number) {
  const proc = new EventEmitter() as unknown as NodeJS.Process;
  const codes: number[] = [];
  let exited!: () => void;
  const firstExit = new Promise<void>((r) => (exited = r));
  const off = stopOnSignals({ stop }, { log: silentLogger(), proc, timeoutMs, exit: (c) => { codes.push(c); exited(); } });
  return { proc, codes, firstExit, off };
}

test('SIGTERM stops the target and exits 0; a failed stop exits 1', async () => {
  const ok = harness(async () => undefined);
  ok.proc.emit('SIGTERM', 'SIGTERM');
  await ok.firstExit;
  assert.deepEqual(ok.codes, [0]);
  const bad = harness(async () => { throw new Error('boom'); });
  bad.proc.emit('SIGINT', 'SIGINT');
  await bad.firstExit;
  assert.deepEqual(bad.codes, [1]);
});

test('a second signal, or a stop past its timeout, exits 1 at once', async () => {
  const second = harness(() => new Promise(() => undefined));
  second.proc.emit('SIGTERM', 'SIGTERM');
  second.proc.emit('SIGTERM', 'SIGTERM');
  assert.deepEqual(second.codes, [1]);
  const slow = harness(() => new Promise(() => undefined), 20);
  slow.proc.emit('SIGTERM', 'SIGTERM');
  await slow.firstExit;
  assert.deepEqual(slow.codes, [1]);
});

test('the returned function removes the handlers', () => {
  const h = harness(async () => undefined);
  h.off();
  assert.equal((h.proc as unknown as EventEmitter).listenerCount('SIGTERM'), 0);
  assert.equal((h.proc as unknown as EventEmitter).listenerCount('SIGINT'), 0);
});
