import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { KubeConfig } from '@kubernetes/client-node';
import bunyan from 'bunyan';
import { ApiTransport } from './api-transport.js';
import { Cache } from './cache.js';
import { sleep } from './clock.js';
import { Controller } from './controller.js';
import { ApiError, PermanentError, TransientError, type Result } from './errors.js';
import { EventRecorder } from './event-recorder.js';
import { defineKind } from './kind.js';
import { silentLogger } from './logging.js';
import { Metrics } from './metrics.js';
import type { Reconcile, ReconcileContext, Request } from './registry.js';

const Widget = defineKind({ group: 'test.coil.example', version: 'v1', kind: 'Widget', plural: 'widgets', namespaced: true });

/** A controller over a cache that is never started: keys are fed to its queue directly. */
function setup(reconcile: (req: Request, ctx: ReconcileContext) => Promise<Result>, backoff = { baseDelayMs: 5, maxDelayMs: 40 }, log = silentLogger()) {
  const kc = new KubeConfig();
  kc.loadFromOptions({ clusters: [{ name: 'c', server: 'https://127.0.0.1:1' }], users: [{ name: 'u' }], contexts: [{ name: 'x', cluster: 'c', user: 'u' }], currentContext: 'x' });
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

  it('requeues a write refused on a stale resourceVersion with the backoff, as no error (409 Conflict, 422 failed patch test)', async () => {
    // What the AddressPool reconciler met on its second reconcile of a pool created without the
    // webhook, when a block event came before the watch delivered its own finalizer write: the
    // finalizer patch, guarded by the cached resourceVersion, failed its test op (422).
    const stale = [
      new ApiError(422, 'Invalid', 'PATCH /apis/coil.cybozu.com/v2/addresspools/coils: the server rejected our request due to an error in our request', { code: 422, reason: 'Invalid' }),
      new ApiError(409, 'Conflict', 'PATCH …/status: the object has been modified', { code: 409, reason: 'Conflict' }),
    ];
    const ring = new bunyan.RingBuffer({ limit: 100 });
    const attempts: number[] = [];
    const { c, metrics } = setup(async (_req, ctx) => {
      attempts.push(ctx.attempt);
      const err = stale[attempts.length - 1];
      if (err) throw err;
      return {};
    }, undefined, bunyan.createLogger({ name: 'test', level: 'debug', streams: [{ type: 'raw', stream: ring }] }));
    c.queue.add('ns/s');
    await until(() => attempts.length === 3);
    await c.stop();
    assert.deepEqual(attempts, [0, 1, 2], 'retried through the per-key backoff');
    assert.equal(await metric(metrics, 'controller_runtime_reconcile_errors_total', { controller: 'widget' }), 0);
    assert.equal(await metric(metrics, 'controller_runtime_reconcile_total', { controller: 'widget', result: 'requeue' }), 2);
    assert.equal(await metric(metrics, 'controller_runtime_reconcile_total', { controller: 'widget', result: 'success' }), 1);
    const records = ring.records as Array<{ level: number; msg: string }>;
    assert.deepEqual(records.filter((r) => r.level >= bunyan.WARN), [], 'nothing logged as a failure');
    assert.equal(records.filter((r) => r.msg.includes('stale resourceVersion')).length, 2, 'each requeue is logged at debug');
  });

  it('still counts as errors what a newer cache cannot fix: AlreadyExists, NotFound, a 422 naming its fields', async () => {
    const failures = [
      new ApiError(409, 'AlreadyExists', 'POST …/deployments: "nat" already exists', { code: 409, reason: 'AlreadyExists' }),
      new ApiError(404, 'NotFound', 'PATCH …/addresspools/coils/status: the server could not find the requested resource', { code: 404, reason: 'NotFound' }),
      new ApiError(422, 'Invalid', 'PATCH …: spec.subnets: Invalid value', { code: 422, reason: 'Invalid', details: { causes: [{ field: 'spec.subnets', message: 'Invalid value' }] } }),
    ];
    let calls = 0;
    const { c, metrics } = setup(async () => {
      const err = failures[calls++];
      if (err) throw err;
      return {};
    });
    c.queue.add('ns/e');
    await until(() => calls === 4);
    await c.stop();
    assert.equal(await metric(metrics, 'controller_runtime_reconcile_errors_total', { controller: 'widget' }), 3);
    assert.equal(await metric(metrics, 'controller_runtime_reconcile_total', { controller: 'widget', result: 'requeue' }), 0);
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
