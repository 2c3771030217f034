/**
 * The runtime against a real kube-apiserver: a reconciler registered only by decorator
 * reconciles create/update/delete of a CRD (with a finalizer), an owned object's change
 * re-enqueues its owner, errors retry with growing backoff, Events are recorded, and /metrics
 * exposes controller-runtime's names with real values.
 */
import 'reflect-metadata';
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { inject } from 'inversify';
import { Cache } from '../../src/runtime/cache.js';
import { Client } from '../../src/runtime/client.js';
import { Reconciler } from '../../src/runtime/decorators.js';
import { isAlreadyExists, type Result } from '../../src/runtime/errors.js';
import { EventRecorder } from '../../src/runtime/event-recorder.js';
import { apiVersionOf, defineKind, keyOf } from '../../src/runtime/kind.js';
import type { Manager } from '../../src/runtime/manager.js';
import { OperatorFacade } from '../../src/runtime/operator-facade.js';
import { Registry, indexKind, watchKind, type Reconcile, type ReconcileContext, type Request } from '../../src/runtime/registry.js';
import { Container } from 'inversify';
import { ControlPlane, eventually } from './control-plane.js';
import { createNamespace, metricValue, sampleCrd, sampleKind, scrape, testManager, type Sample } from './runtime-support.js';

const Widget = sampleKind('Widget');
const Gadget = sampleKind('Gadget');
const Flaky = sampleKind('Flaky');
const Ticket = sampleKind('Ticket');
const NS = 'rt-reconcile';
/** A core kind watched for notes: a ConfigMap labelled `widget=<name>` annotates that Widget. */
const ConfigMap = defineKind<Sample & { data?: Record<string, string> }>({ group: '', version: 'v1', kind: 'ConfigMap', plural: 'configmaps', namespaced: true });
const widgetOf = (cm: { metadata?: { namespace?: string; labels?: Record<string, string> } }): Request[] => {
  const name = cm.metadata?.labels?.['widget'];
  return name && cm.metadata?.namespace ? [{ namespace: cm.metadata.namespace, name }] : [];
};
const FINALIZER = `${Widget.group}/cleanup`;
const JOURNAL = Symbol('journal');

/** What the sample reconcilers saw, for the assertions. */
class Journal {
  readonly absent = new Set<string>();
  readonly cleanedUp = new Set<string>();
  readonly flakyAttempts = new Map<string, { attempt: number; atMs: number }[]>();
  readonly ticket = { active: new Map<string, number>(), maxPerKey: 0, running: 0, maxRunning: 0, runs: 0, lastSeen: new Map<string, number>() };
}

const registry = new Registry();

/**
 * The sample: keeps a child Gadget `<name>-gadget` (controller-owned) and mirrors
 * `spec.size` and the Gadget's `spec.color` into status; cleans up through a finalizer.
 */
@Reconciler({
  name: 'widget',
  for: Widget,
  owns: [Gadget],
  watches: [watchKind(ConfigMap, widgetOf)],
  indexes: [indexKind(ConfigMap, 'configmap.widget', (cm) => widgetOf(cm).map(keyOf))],
  registry,
  maxConcurrentReconciles: 2,
})
class WidgetReconciler implements Reconcile {
  constructor(
    @inject(Cache) private readonly cache: Cache,
    @inject(Client) private readonly client: Client,
    @inject(OperatorFacade) private readonly operator: OperatorFacade,
    @inject(EventRecorder) private readonly events: EventRecorder,
    @inject(JOURNAL) private readonly journal: Journal,
  ) {}

  async reconcile(req: Request): Promise<Result> {
    const w = this.cache.get(Widget, req);
    if (!w) {
      this.journal.absent.add(keyOf(req));
      return {};
    }
    if (await this.operator.handleFinalizer(Widget, w, FINALIZER, async () => this.cleanup(req))) return {};
    const name = `${req.name}-gadget`;
    const gadget = this.cache.get(Gadget, { namespace: req.namespace, name });
    if (!gadget) {
      try {
        await this.client.create(Gadget, {
          metadata: {
            name,
            namespace: req.namespace,
            ownerReferences: [{ apiVersion: apiVersionOf(Widget), kind: Widget.kind, name: req.name, uid: w.metadata!.uid!, controller: true, blockOwnerDeletion: true }],
          },
          spec: { color: 'grey' },
        });
        this.events.event(w, 'Normal', 'GadgetCreated', `created ${name}`);
      } catch (e) {
        if (!isAlreadyExists(e)) throw e;
      }
    }
    const notes = this.cache.byIndex(ConfigMap, 'configmap.widget', keyOf(req)).map((cm) => cm.data?.['note'] ?? '');
    const status = { observedSize: w.spec?.['size'] ?? null, gadgetColor: gadget?.spec?.['color'] ?? null, notes: notes.sort() };
    const current = { observedSize: w.status?.['observedSize'] ?? null, gadgetColor: w.status?.['gadgetColor'] ?? null, notes: w.status?.['notes'] ?? [] };
    if (JSON.stringify(status) !== JSON.stringify(current)) {
      await this.client.patchStatus(Widget, req, status, { resourceVersion: w.metadata!.resourceVersion! });
    }
    return {};
  }

  private async cleanup(req: Request): Promise<void> {
    this.journal.cleanedUp.add(keyOf(req));
  }
}

/** Fails the first four attempts of every key, then succeeds. */
@Reconciler({ name: 'flaky', for: Flaky, registry, backoff: { baseDelayMs: 100, maxDelayMs: 10_000 } })
class FlakyReconciler implements Reconcile {
  constructor(@inject(JOURNAL) private readonly journal: Journal) {}

  async reconcile(req: Request, ctx: ReconcileContext): Promise<Result> {
    const list = this.journal.flakyAttempts.get(keyOf(req)) ?? [];
    list.push({ attempt: ctx.attempt, atMs: performance.now() });
    this.journal.flakyAttempts.set(keyOf(req), list);
    if (ctx.attempt < 4) throw new Error(`attempt ${ctx.attempt} fails on purpose`);
    return {};
  }
}

/** Simulates I/O-bound work while counting how many reconciles of one key and of all keys overlap. */
@Reconciler({ name: 'ticket', for: Ticket, registry, maxConcurrentReconciles: 8 })
class TicketReconciler implements Reconcile {
  constructor(
    @inject(Cache) private readonly cache: Cache,
    @inject(JOURNAL) private readonly journal: Journal,
  ) {}

  async reconcile(req: Request): Promise<Result> {
    const t = this.journal.ticket;
    const key = keyOf(req);
    const n = (t.active.get(key) ?? 0) + 1;
    t.active.set(key, n);
    t.maxPerKey = Math.max(t.maxPerKey, n);
    t.maxRunning = Math.max(t.maxRunning, ++t.running);
    t.runs++;
    try {
      await new Promise((r) => setTimeout(r, 1 + Math.random() * 10));
      const obj = this.cache.get(Ticket, req);
      if (obj) t.lastSeen.set(key, Number(obj.spec?.['n'] ?? 0));
      return {};
    } finally {
      t.running--;
      t.active.set(key, n - 1);
    }
  }
}

describe('runtime: decorator-registered reconcilers on a real apiserver', () => {
  let cp: ControlPlane;
  let mgr: Manager;
  let client: Client;
  const journal = new Journal();

  before(async () => {
    cp = await ControlPlane.start({ crds: [sampleCrd(Widget), sampleCrd(Gadget), sampleCrd(Flaky), sampleCrd(Ticket)] });
    await createNamespace(cp, NS);
    const container = new Container();
    container.bind(JOURNAL).toConstantValue(journal);
    mgr = testManager(cp, registry, { container, leaderElection: { name: 'rt-reconcile', namespace: NS, leaseDurationMs: 4_000, renewDeadlineMs: 3_000, retryPeriodMs: 500 } });
    await mgr.start();
    client = mgr.client;
  });
  after(async () => {
    await mgr?.stop();
    await cp?.stop();
  });

  const widget = (name: string) => cp_get(client, name);

  test('reconciles a create: finalizer added, owned Gadget created, status written', async () => {
    await client.create(Widget, { metadata: { name: 'w1', namespace: NS }, spec: { size: 3 } });
    const w = await eventually(async () => {
      const w = await widget('w1');
      return w?.status?.['observedSize'] === 3 && w.metadata?.finalizers?.includes(FINALIZER) ? w : false;
    });
    const g = await client.get(Gadget, { namespace: NS, name: 'w1-gadget' });
    assert.equal(g?.metadata?.ownerReferences?.[0]?.uid, w.metadata?.uid);
    assert.equal(g?.metadata?.ownerReferences?.[0]?.controller, true);
  });

  test('reconciles an update of the spec', async () => {
    const w = (await widget('w1'))!;
    await client.mergePatch(Widget, { namespace: NS, name: 'w1' }, { spec: { size: 7 } });
    await eventually(async () => (await widget('w1'))?.status?.['observedSize'] === 7);
    assert.notEqual((await widget('w1'))?.metadata?.resourceVersion, w.metadata?.resourceVersion);
  });

  test("an owned object's change re-enqueues its owner", async () => {
    await eventually(async () => (await widget('w1'))?.status?.['gadgetColor'] === 'grey');
    await client.mergePatch(Gadget, { namespace: NS, name: 'w1-gadget' }, { spec: { color: 'blue' } });
    await eventually(async () => (await widget('w1'))?.status?.['gadgetColor'] === 'blue');
  });

  test('a watched kind maps to its Widget through the watch and an index', async () => {
    await client.create(ConfigMap, { metadata: { name: 'note-1', namespace: NS, labels: { widget: 'w1' } }, data: { note: 'hello' } });
    await eventually(async () => JSON.stringify((await widget('w1'))?.status?.['notes']) === '["hello"]');
    await client.mergePatch(ConfigMap, { namespace: NS, name: 'note-1' }, { metadata: { labels: { widget: 'elsewhere' } } });
    await eventually(async () => JSON.stringify((await widget('w1'))?.status?.['notes']) === '[]');
  });

  test('reconciles a delete: the finalizer runs cleanup, then the object goes and is seen absent', async () => {
    assert.equal(await client.delete(Widget, { namespace: NS, name: 'w1' }), true);
    await eventually(async () => (await widget('w1')) === undefined);
    assert.ok(journal.cleanedUp.has(`${NS}/w1`));
    await eventually(() => journal.absent.has(`${NS}/w1`));
  });

  test('records an Event on the reconciled object', async () => {
    await eventually(async () => {
      const res = await cp.request('GET', `/api/v1/namespaces/${NS}/events?fieldSelector=involvedObject.name%3Dw1`);
      const events = (JSON.parse(res.body) as { items: { reason: string; source?: { component?: string } }[] }).items;
      return events.some((e) => e.reason === 'GadgetCreated' && e.source?.component === 'runtime-test');
    });
  });

  test('errors retry with growing backoff until the reconcile succeeds', async () => {
    await client.create(Flaky, { metadata: { name: 'f1', namespace: NS } });
    const attempts = await eventually(() => {
      const a = journal.flakyAttempts.get(`${NS}/f1`) ?? [];
      return a.length >= 5 ? a : false;
    });
    assert.deepEqual(attempts.map((a) => a.attempt), [0, 1, 2, 3, 4]);
    const gaps = attempts.slice(1).map((a, i) => a.atMs - attempts[i]!.atMs);
    // Nominal 100, 200, 400, 800 ms; a retry never comes before its backoff.
    [100, 200, 400, 800].forEach((d, i) => assert.ok(gaps[i]! >= d - 1, `retry ${i + 1} after ${gaps[i]} ms, backoff was ${d} ms`));
    assert.ok(gaps[3]! > gaps[0]!, 'backoff grows');
  });

  test('1,000 events on 50 keys: one key never reconciled twice at once, keys in parallel, last state seen', async (ctx) => {
    const names = Array.from({ length: 50 }, (_, i) => `t${i}`);
    await Promise.all(names.map((name) => client.create(Ticket, { metadata: { name, namespace: NS }, spec: { n: 0 } })));
    for (let round = 1; round <= 19; round++) {
      await Promise.all(names.map((name) => client.mergePatch(Ticket, { namespace: NS, name }, { spec: { n: round } })));
    }
    const t = journal.ticket;
    await eventually(() => names.every((name) => t.lastSeen.get(`${NS}/${name}`) === 19), { timeoutMs: 60_000 });
    assert.equal(t.maxPerKey, 1, 'a key was reconciled concurrently');
    assert.ok(t.maxRunning > 1, `no parallelism across keys (max ${t.maxRunning})`);
    assert.ok(t.maxRunning <= 8, `more workers than maxConcurrentReconciles (${t.maxRunning})`);
    assert.ok(t.runs <= 1000, `de-duplication: ${t.runs} reconciles for 1,000 events`);
    ctx.diagnostic(`1,000 events → ${t.runs} reconciles, at most ${t.maxRunning} keys at once, ${t.maxPerKey} per key`);
  });

  test('/metrics exposes controller-runtime and workqueue names with real values', async () => {
    const m = await scrape(mgr.ports.metrics!);
    const w = { controller: 'widget' };
    const q = { name: 'widget', controller: 'widget' };
    assert.ok(metricValue(m, 'controller_runtime_reconcile_total', { ...w, result: 'success' })! > 0);
    assert.ok(metricValue(m, 'controller_runtime_reconcile_errors_total', { controller: 'flaky' })! >= 4);
    assert.ok(metricValue(m, 'controller_runtime_reconcile_time_seconds_count', w)! > 0);
    assert.ok(metricValue(m, 'controller_runtime_reconcile_time_seconds_bucket', { ...w, le: '60' })! > 0);
    assert.equal(metricValue(m, 'controller_runtime_max_concurrent_reconciles', w), 2);
    assert.equal(metricValue(m, 'workqueue_depth', q), 0);
    assert.equal(metricValue(m, 'workqueue_unfinished_work_seconds', q), 0);
    assert.equal(metricValue(m, 'workqueue_longest_running_processor_seconds', q), 0);
    assert.ok(metricValue(m, 'workqueue_adds_total', q)! > 0);
    assert.ok(metricValue(m, 'workqueue_queue_duration_seconds_count', q)! > 0);
    assert.ok(metricValue(m, 'workqueue_work_duration_seconds_count', q)! > 0);
    assert.ok(metricValue(m, 'workqueue_retries_total', { name: 'flaky' })! >= 4);
    assert.equal(metricValue(m, 'leader_election_master_status', { name: 'rt-reconcile' }), 1);
  });

  test('/healthz and /readyz answer ok once the cache is synced', async () => {
    for (const path of ['/healthz', '/readyz']) {
      const res = await fetch(`http://127.0.0.1:${mgr.ports.health}${path}`);
      assert.equal(res.status, 200, path);
      assert.equal(await res.text(), 'ok');
    }
  });
});

function cp_get(client: Client, name: string): Promise<Sample | undefined> {
  return client.get(Widget, { namespace: NS, name });
}
