import 'reflect-metadata';
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { describe, it } from 'node:test';
import { KubeConfig } from '@kubernetes/client-node';
import { inject } from 'inversify';
import { RunnableLoop, ValidatingWebhook } from './decorators.js';
import { defineKind } from './kind.js';
import { silentLogger } from './logging.js';
import { Manager } from './manager.js';
import { Registry } from './registry.js';
import type { Runnable } from './runnable.js';

/**
 * Manager lifecycle without an API server: with no reconcilers, webhooks or leader election the
 * Manager makes no API call, so runnables, probes, metrics and signals are tested in-process.
 * Everything that talks to the API is in test/envtest/runtime-*.test.ts.
 */
const STATS = Symbol('stats');

function kubeConfig(): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromOptions({ clusters: [{ name: 'c', server: 'https://127.0.0.1:1' }], users: [{ name: 'u' }], contexts: [{ name: 'x', cluster: 'c', user: 'u' }], currentContext: 'x' });
  return kc;
}

async function until(cond: () => boolean, timeoutMs = 5000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe('Manager', () => {
  it('supervises runnables: restarts one that fails, aborts all on stop', async () => {
    const registry = new Registry();
    const stats = { steadyRuns: 0, steadyStopped: false, flakyRuns: 0 };
    @RunnableLoop({ name: 'steady', leaderOnly: false, registry })
    class Steady implements Runnable {
      constructor(@inject(STATS) private readonly s: typeof stats) {}
      async run(signal: AbortSignal): Promise<void> {
        this.s.steadyRuns++;
        await new Promise((r) => signal.addEventListener('abort', r, { once: true }));
        this.s.steadyStopped = true;
      }
    }
    @RunnableLoop({ name: 'flaky', registry })
    class Flaky implements Runnable {
      constructor(@inject(STATS) private readonly s: typeof stats) {}
      async run(signal: AbortSignal): Promise<void> {
        if (++this.s.flakyRuns === 1) throw new Error('first run fails');
        await new Promise((r) => signal.addEventListener('abort', r, { once: true }));
      }
    }
    const mgr = new Manager({ kubeConfig: kubeConfig(), registry, logger: silentLogger(), defaultMetrics: false });
    mgr.container.bind(STATS).toConstantValue(stats);
    await mgr.start();
    await until(() => stats.flakyRuns === 2);
    assert.equal(stats.steadyRuns, 1);
    await mgr.stop();
    assert.equal(stats.steadyStopped, true);
  });

  it('stops runnables one at a time, newest first, each awaited; one added while running starts at once', async () => {
    const mgr = new Manager({ kubeConfig: kubeConfig(), registry: new Registry(), logger: silentLogger(), defaultMetrics: false });
    const events: string[] = [];
    const gates = new Map<string, () => void>();
    const loop = (name: string): Runnable => ({
      run: async (signal) => {
        events.push(`run ${name}`);
        await new Promise((r) => signal.addEventListener('abort', r, { once: true }));
        events.push(`abort ${name}`);
        await new Promise<void>((r) => gates.set(name, r));
        events.push(`return ${name}`);
      },
    });
    mgr.add({ name: 'first', leaderOnly: false }, loop('first'));
    mgr.add({ name: 'second', leaderOnly: false }, loop('second'));
    await mgr.start();
    mgr.add({ name: 'late', leaderOnly: false }, loop('late'));
    assert.deepEqual(events, ['run first', 'run second', 'run late']);
    assert.deepEqual(mgr.runnableNames(), ['first', 'second', 'late']);
    const stopping = mgr.stop();
    for (const name of ['late', 'second', 'first']) {
      await until(() => gates.has(name));
      gates.get(name)!();
    }
    await stopping;
    assert.deepEqual(events.slice(3), ['abort late', 'return late', 'abort second', 'return second', 'abort first', 'return first']);
    assert.equal(await mgr.stopRunnables(), true, 'idempotent');
  });

  it('serves /metrics, /healthz and /readyz on one port', async () => {
    const mgr = new Manager({ kubeConfig: kubeConfig(), registry: new Registry(), logger: silentLogger(), defaultMetrics: false, metricsBindAddress: { host: '127.0.0.1', port: 0 }, healthProbeBindAddress: { host: '127.0.0.1', port: 0 } });
    await mgr.start();
    try {
      assert.equal(mgr.ports.health, mgr.ports.metrics);
      const base = `http://127.0.0.1:${mgr.ports.metrics}`;
      assert.equal(await (await fetch(`${base}/healthz`)).text(), 'ok');
      assert.equal(await (await fetch(`${base}/readyz`)).text(), 'ok');
      assert.match(await (await fetch(`${base}/metrics`)).text(), /# TYPE controller_runtime_reconcile_total counter/);
      assert.equal((await fetch(`${base}/other`)).status, 404);
    } finally {
      await mgr.stop();
    }
  });

  it('stops gracefully on SIGTERM and exits 0', async () => {
    const mgr = new Manager({ kubeConfig: kubeConfig(), registry: new Registry(), logger: silentLogger(), defaultMetrics: false });
    await mgr.start();
    const proc = new EventEmitter() as unknown as NodeJS.Process;
    const code = new Promise<number>((resolve) => mgr.handleSignals(resolve, proc));
    proc.emit('SIGTERM', 'SIGTERM');
    assert.equal(await code, 0);
    assert.throws(() => mgr.add({ name: 'late' }, { run: async () => undefined }), /before start/);
  });

  it('refuses to start twice', async () => {
    const mgr = new Manager({ kubeConfig: kubeConfig(), registry: new Registry(), logger: silentLogger(), defaultMetrics: false });
    await mgr.start();
    await assert.rejects(mgr.start(), /cannot start from state running/);
    await mgr.stop();
  });

  it('stops what it started when start fails', async () => {
    const registry = new Registry();
    @ValidatingWebhook({ for: defineKind({ group: 'test.coil.example', version: 'v1', kind: 'Thing', plural: 'things', namespaced: false }), registry })
    class V {}
    const mgr = new Manager({ kubeConfig: kubeConfig(), registry, logger: silentLogger(), defaultMetrics: false, metricsBindAddress: { host: '127.0.0.1', port: 0 } });
    await assert.rejects(mgr.start(), /ManagerOptions\.webhook is not set/);
    await assert.rejects(fetch(`http://127.0.0.1:${mgr.ports.metrics}/metrics`), 'the metrics server was closed');
  });
});
