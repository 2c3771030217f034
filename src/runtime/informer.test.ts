import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import type { KubeConfig, KubernetesObject } from '@kubernetes/client-node';
import bunyan from 'bunyan';
import { ApiTransport } from './api-transport.js';
import { FakeApiServer } from '../../test/fakes/api-server.fake.js';
import { Informer, type InformerEvent } from './informer.js';
import { defineKind } from './kind.js';
import { silentLogger } from './logging.js';

/**
 * Recovery paths a real apiserver cannot be made to take on demand (a 410 Gone in the middle of
 * a watch, a connection that stays open but goes silent, failing lists), driven by a
 * {@link FakeApiServer}; everything else is covered against the real one in test/envtest.
 */
const Thing = defineKind({ group: 'test.coil.example', version: 'v1', kind: 'Thing', plural: 'things', namespaced: false });

const obj = (name: string, rv: string): KubernetesObject => ({ apiVersion: 'test.coil.example/v1', kind: 'Thing', metadata: { name, resourceVersion: rv } });

describe('Informer recovery', () => {
  // A fresh server per test: a request of an earlier test still in flight must not count here.
  let api: FakeApiServer;
  let kc: KubeConfig;
  beforeEach(async () => {
    api = new FakeApiServer();
    kc = await api.start();
  });
  afterEach(() => api.stop());

  const informer = (opts = {}) => new Informer(Thing, new ApiTransport(kc), silentLogger(), { initialBackoffMs: 20, maxBackoffMs: 100, ...opts });

  async function until(cond: () => boolean): Promise<void> {
    const end = Date.now() + 10_000;
    while (!cond()) {
      if (Date.now() > end) throw new Error('condition not met in time');
      await new Promise((r) => setTimeout(r, 10));
    }
  }

  it('keeps retrying a failing list with backoff and syncs once it succeeds', async () => {
    api.play([500, 503, 403, { items: [obj('a', '5')], rv: '5' }], ['silent']);
    const inf = informer();
    inf.start();
    await inf.waitForSync();
    assert.equal(api.listCount, 4);
    assert.equal(inf.get('a')?.metadata?.resourceVersion, '5');
    await until(() => api.watchRVs.length === 1);
    assert.deepEqual(api.watchRVs, ['5'], 'the watch starts from the list resourceVersion');
    await inf.stop();
  });

  it('starts the backoff again after each outage once a watch was accepted, so repeated restarts do not stretch the retry delay', async () => {
    // Each cut is a new outage (an apiserver restart) after a watch the server had accepted: every
    // retry is the first of its outage. Before, the count kept growing across outages, and after
    // a few restarts an informer waited its maximum delay before it even tried again.
    api.play([{ items: [obj('a', '5')], rv: '5' }], ['open']);
    const ring = new bunyan.RingBuffer({ limit: 100 });
    const log = bunyan.createLogger({ name: 'test', streams: [{ type: 'raw', stream: ring, level: 'warn' }] });
    const inf = new Informer(Thing, new ApiTransport(kc), log, { initialBackoffMs: 20, maxBackoffMs: 10_000 });
    inf.start();
    for (let cut = 1; cut <= 5; cut++) {
      // The watch's event came through, so the informer has seen the server accept it.
      await until(() => inf.get('a')?.metadata?.resourceVersion === `w${cut}`);
      api.cutWatches();
    }
    await until(() => inf.get('a')?.metadata?.resourceVersion === 'w6');
    const failures = (ring.records as { msg: string; failures: number }[]).filter((r) => r.msg === 'list/watch failed; retrying').map((r) => r.failures);
    assert.deepEqual(failures, [1, 1, 1, 1, 1]);
    await inf.stop();
  });

  it('relists on a 410 Gone event and reports objects deleted meanwhile', async () => {
    api.play([{ items: [obj('a', '5'), obj('b', '6')], rv: '6' }, { items: [obj('a', '9')], rv: '9' }], ['gone', 'silent']);
    const inf = informer();
    const events: string[] = [];
    inf.onEvent((e: InformerEvent<KubernetesObject>) => events.push(`${e.type} ${e.object.metadata?.name}`));
    inf.start();
    await until(() => api.watchRVs.includes('9'));
    assert.equal(api.listCount, 2);
    assert.deepEqual(events, ['ADDED a', 'ADDED b', 'DELETED b', 'MODIFIED a']);
    assert.equal(inf.get('b'), undefined);
    await inf.stop();
  });

  it('a relist keeps the stored object when its resourceVersion has not moved, and transforms only what changed', async () => {
    api.play([{ items: [obj('a', '5'), obj('b', '6')], rv: '6' }, { items: [obj('a', '5'), obj('b', '7')], rv: '9' }], ['gone', 'silent']);
    const transformed: string[] = [];
    const inf = informer({ transform: (o: KubernetesObject) => (transformed.push(`${o.metadata?.name}@${o.metadata?.resourceVersion}`), o) });
    let firstA: unknown;
    inf.onEvent((e: InformerEvent<KubernetesObject>) => void (e.object.metadata?.name === 'a' && (firstA ??= e.object)));
    inf.start();
    await until(() => api.watchRVs.includes('9'));
    assert.equal(api.listCount, 2);
    assert.equal(inf.get('a'), firstA, 'the unchanged object is the one stored by the first list, not a copy');
    assert.equal(inf.get('b')?.metadata?.resourceVersion, '7');
    assert.deepEqual(transformed, ['a@5', 'b@6', 'b@7']);
    await inf.stop();
  });

  it('a silent watch trips the watchdog and is replaced by a relist', async () => {
    api.play([{ items: [obj('a', '5')], rv: '5' }], ['silent']);
    const inf = informer({ watchdogMs: 200 });
    inf.start();
    await until(() => api.listCount >= 3);
    assert.ok(inf.hasSynced());
    await inf.stop();
  });

  it('retryNow cuts a backoff short and lists again at once; no effect while it watches', async () => {
    api.play([503, { items: [obj('a', '5')], rv: '5' }], ['silent']);
    // A backoff far beyond the test's patience: only retryNow can end it.
    const inf = informer({ initialBackoffMs: 600_000, maxBackoffMs: 600_000 });
    assert.equal(inf.retryNow(), false);
    inf.start();
    await until(() => inf.backingOff);
    assert.equal(inf.hasSynced(), false);
    assert.equal(inf.retryNow(), true);
    await inf.waitForSync();
    assert.equal(inf.get('a')?.metadata?.resourceVersion, '5');
    await until(() => api.watchRVs.length === 1);
    assert.equal(inf.retryNow(), false, 'a watch in progress is left alone');
    assert.equal(api.listCount, 2);
    await inf.stop();
  });

  it('stop ends the loop even while a watch is still connecting', async () => {
    api.play([{ items: [], rv: '1' }], ['silent']);
    const inf = informer();
    inf.start();
    await until(() => api.watchRVs.length === 1);
    await inf.stop();
    const lists = api.listCount;
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(api.listCount, lists);
  });
});

describe('Informer indexes', () => {
  // A value names one key (stored as the key) or several (a Set), and goes when no object yields it:
  // 150,000 Pods indexed by address would otherwise cost a Set per address, and churn leave empty ones.
  it('follows adds, moves and deletes of values shared by several objects or by one', () => {
    const inf = new Informer(Thing, {} as ApiTransport, silentLogger());
    inf.addIndex('color', (o) => [String(o.metadata?.labels?.color)]);
    const thing = (name: string, rv: string, color: string): KubernetesObject => ({ ...obj(name, rv), metadata: { name, resourceVersion: rv, labels: { color } } });
    const upsert = (o: KubernetesObject): void => (inf as unknown as { upsert(o: KubernetesObject): void }).upsert(o);
    const remove = (o: KubernetesObject): void => (inf as unknown as { remove(k: string, o: KubernetesObject, r: boolean): void }).remove(o.metadata!.name!, o, false);
    const names = (color: string): string[] => inf.byIndex('color', color).map((o) => o.metadata!.name!).sort();
    upsert(thing('a', '1', 'red'));
    upsert(thing('b', '2', 'red'));
    assert.deepEqual(names('red'), ['a', 'b']);
    upsert(thing('a', '3', 'blue'));
    assert.deepEqual([names('red'), names('blue')], [['b'], ['a']]);
    remove(thing('b', '2', 'red'));
    assert.deepEqual(names('red'), []);
    assert.equal((inf as unknown as { indices: Map<string, Map<string, unknown>> }).indices.get('color')!.has('red'), false, 'an emptied value is dropped');
    upsert(thing('a', '4', 'blue'));
    assert.deepEqual(names('blue'), ['a']);
  });
});
