import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
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

test('runMain keeps the process alive until main settles, even when main only waits on an unref\'d timer', () => {
  // The runtime's sleep is unref'd. Before, a one-shot command waiting on it alone (the chart's
  // post-delete hook waiting for the release's Pods to go) ended there with status 0, silently.
  const program = `
    const { runMain } = await import(${JSON.stringify(new URL('./program.js', import.meta.url).href)});
    const { sleep } = await import(${JSON.stringify(new URL('./clock.js', import.meta.url).href)});
    runMain('t', async () => { await sleep(200); process.stdout.write('done'); return 3; });
  `;
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', program], { encoding: 'utf8', timeout: 20_000 });
  assert.deepEqual({ stdout: r.stdout, status: r.status }, { stdout: 'done', status: 3 }, r.stderr);
});


test('drainOnSigterm: SIGTERM drains, then stops and exits 0; SIGINT stops at once; a second signal while draining exits 1', async () => {
  const order: string[] = [];
  const make = (drainMs: number) => {
    const proc = new EventEmitter() as unknown as NodeJS.Process;
    const codes: number[] = [];
    let exited!: () => void;
    const firstExit = new Promise<void>((r) => (exited = r));
    stopOnSignals({ stop: async () => { order.push('stop'); } }, { log: silentLogger(), proc, timeoutMs: 10,
      drainOnSigterm: async () => { order.push('drain'); await new Promise((r) => setTimeout(r, drainMs)); order.push('drained'); },
      exit: (c) => { codes.push(c); exited(); } });
    return { proc, codes, firstExit };
  };
  // The drain takes longer than the stop's timeout: that timeout counts from the stop only.
  const term = make(50);
  term.proc.emit('SIGTERM', 'SIGTERM');
  await term.firstExit;
  assert.deepEqual({ order, codes: term.codes }, { order: ['drain', 'drained', 'stop'], codes: [0] });
  order.length = 0;
  const int = make(50);
  int.proc.emit('SIGINT', 'SIGINT');
  await int.firstExit;
  assert.deepEqual({ order, codes: int.codes }, { order: ['stop'], codes: [0] });
  order.length = 0;
  const twice = make(1_000);
  twice.proc.emit('SIGTERM', 'SIGTERM');
  twice.proc.emit('SIGINT', 'SIGINT');
  assert.deepEqual(twice.codes, [1]);
});
