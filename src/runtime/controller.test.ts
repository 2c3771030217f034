import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { KubeConfig } from '@kubernetes/client-node';
import { ApiTransport } from './api-transport.js';
import { Cache } from './cache.js';
import { sleep } from './clock.js';
import { Controller } from './controller.js';
import { PermanentError, TransientError, type Result } from './errors.js';
import { EventRecorder } from './event-recorder.js';
import { defineKind } from './kind.js';
import { silentLogger } from './logging.js';
import { Metrics } from './metrics.js';
import type { Reconcile, ReconcileContext, Request } from './registry.js';

const Widget = defineKind({ group: 'test.coil.example', version: 'v1', kind: 'Widget', plural: 'widgets', namespaced: true });

/** A controller over a cache that is never started: keys are fed to its queue directly. */
function setup(reconcile: (req: Request, ctx: ReconcileContext) => Promise<Result>, backoff = { baseDelayMs: 5, maxDelayMs: 40 }) {
  const kc = new KubeConfig();
  kc.loadFromOptions({ clusters: [{ name: 'c', server: 'https://127.0.0.1:1' }], users: [{ name: 'u' }], contexts: [{ name: 'x', cluster: 'c', user: 'u' }], currentContext: 'x' });
  const log = silentLogger();
  const transport = new ApiTransport(kc);
  const cache = new Cache(transport, log);
  cache.ensure(Widget);
  const metrics = new Metrics({ defaultMetrics: false });
  const recorder = new EventRecorder(transport, 'test', 'test-0', log);
  const reconciler: Reconcile = { reconcile };
  const c = new Controller({ name: 'widget', for: Widget, target: class {} as never, backoff }, reconciler, cache, metrics, recorder, log);
  c.start();
  return { c, metrics };
}

async function until(cond: () => boolean, timeoutMs = 5000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 2));
  }
}

async function metric(m: Metrics, name: string, labels: Record<string, string>): Promise<number | undefined> {
  const json = await m.registry.getSingleMetric(name)?.get();
  return json?.values.find((v) => Object.entries(labels).every(([k, val]) => v.labels[k] === val))?.value;
}

describe('Controller retry contract', () => {
  it('retries a thrown error with doubling delays and shows the attempt to the reconciler', async () => {
    const attempts: number[] = [];
    const times: number[] = [];
    const { c, metrics } = setup(async (_req, ctx) => {
      attempts.push(ctx.attempt);
      times.push(performance.now());
      if (attempts.length < 5) throw new Error('not yet');
      return {};
    });
    c.queue.add('ns/a');
    await until(() => attempts.length === 5);
    await c.stop();
    assert.deepEqual(attempts, [0, 1, 2, 3, 4]);
    const gaps = times.slice(1).map((t, i) => t - times[i]!);
    // Backoff 5, 10, 20, 40 ms: each wait at least its nominal delay (timers never fire early).
    [5, 10, 20, 40].forEach((d, i) => assert.ok(gaps[i]! >= d - 1, `gap ${i} = ${gaps[i]} < ${d}`));
    assert.equal(c.queue.numRequeues('ns/a'), 0, 'success forgets the failures');
    assert.equal(await metric(metrics, 'controller_runtime_reconcile_errors_total', { controller: 'widget' }), 4);
    assert.equal(await metric(metrics, 'controller_runtime_reconcile_total', { controller: 'widget', result: 'success' }), 1);
    assert.equal(await metric(metrics, 'workqueue_retries_total', { name: 'widget' }), 4);
  });

  it('never retries a PermanentError and counts it as terminal', async () => {
    let calls = 0;
    const { c, metrics } = setup(async () => {
      calls++;
      throw new PermanentError('spec can never fit');
    });
    c.queue.add('ns/p');
    await until(() => calls === 1);
    await new Promise((r) => setTimeout(r, 50));
    await c.stop();
    assert.equal(calls, 1);
    assert.equal(c.queue.isWaiting('ns/p'), false);
    assert.equal(await metric(metrics, 'controller_runtime_terminal_reconcile_errors_total', { controller: 'widget' }), 1);
  });

  it('waits the delay a TransientError asks for instead of the backoff', async () => {
    let calls = 0;
    const { c } = setup(async () => {
      calls++;
      throw new TransientError('pool busy', 60_000);
    });
    c.queue.add('ns/t');
    await until(() => calls === 1);
    await until(() => c.queue.isWaiting('ns/t'));
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(calls, 1, 'not retried within the 5 ms backoff');
    assert.equal(c.queue.numRequeues('ns/t'), 1);
    await c.stop();
  });

  it('requeues after requeueAfterMs and counts requeue_after', async () => {
    let calls = 0;
    const { c, metrics } = setup(async () => (++calls === 1 ? { requeueAfterMs: 20 } : {}));
    c.queue.add('ns/r');
    await until(() => calls === 2);
    await c.stop();
    assert.equal(await metric(metrics, 'controller_runtime_reconcile_total', { controller: 'widget', result: 'requeue_after' }), 1);
  });

  it('drains an in-flight reconcile on stop', async () => {
    let finished = false;
    const { c } = setup(async () => {
      await new Promise((r) => setTimeout(r, 50));
      finished = true;
      return {};
    });
    c.queue.add('ns/d');
    await until(() => c.queue.inFlight() === 1);
    assert.equal(await c.stop(), true);
    assert.equal(finished, true);
  });

  it('aborts the signal of a reconcile still running at the drain deadline and waits for it to return', async () => {
    let abortedAfterMs: number | undefined;
    let returned = false;
    const { c } = setup(async (_req, ctx) => {
      const start = performance.now();
      await sleep(5_000, ctx.signal);
      if (ctx.signal.aborted) abortedAfterMs = performance.now() - start;
      returned = true;
      return {};
    });
    c.queue.add('ns/s');
    await until(() => c.queue.inFlight() === 1);
    assert.equal(await c.stop(100, 1_000), true, 'stopped: the reconcile returned once aborted');
    assert.equal(returned, true);
    assert.ok(abortedAfterMs !== undefined && abortedAfterMs >= 99, `aborted after the drain deadline, not before (${abortedAfterMs} ms)`);
  });

  it('reports a reconcile that ignores its aborted signal as still running', async () => {
    let returned = false;
    const { c } = setup(async () => {
      await sleep(400);
      returned = true;
      return {};
    });
    c.queue.add('ns/i');
    await until(() => c.queue.inFlight() === 1);
    assert.equal(await c.stop(20, 50), false);
    assert.equal(returned, false);
    await until(() => returned);
  });
});
