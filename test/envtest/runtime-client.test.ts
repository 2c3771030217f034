/**
 * The runtime's client and cache against a real kube-apiserver: the write helpers and their
 * optimistic-concurrency guards (merge patch with resourceVersion, JSON patch `test`, server-side
 * apply, status subresource, finalizers, delete preconditions), and the informer cache's label
 * and field selectors and indexes.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { ApiTransport } from '../../src/runtime/api-transport.js';
import { Cache } from '../../src/runtime/cache.js';
import { Client } from '../../src/runtime/client.js';
import { ApiError, isConflict, isNotFound, isPatchTestFailed, isStaleWrite } from '../../src/runtime/errors.js';
import { EventRecorder } from '../../src/runtime/event-recorder.js';
import { silentLogger } from '../../src/runtime/logging.js';
import { ControlPlane, eventually } from './control-plane.js';
import { createNamespace, GROUP, sampleCrd, sampleKind } from './runtime-support.js';

const Box = sampleKind('Box');
const NS = 'rt-client';
const ConfigMap = { group: '', version: 'v1', kind: 'ConfigMap', plural: 'configmaps', namespaced: true } as const;

async function failure(p: Promise<unknown>): Promise<ApiError> {
  try {
    await p;
  } catch (e) {
    assert.ok(e instanceof ApiError, String(e));
    return e;
  }
  assert.fail('the request succeeded');
}

describe('runtime: client helpers and cache on a real apiserver', () => {
  let cp: ControlPlane;
  let client: Client;
  let cache: Cache;

  before(async () => {
    cp = await ControlPlane.start({ crds: [sampleCrd(Box)] });
    await createNamespace(cp, NS);
    const transport = new ApiTransport(cp.kubeConfig);
    client = new Client(transport, 'rt-client-test');
    cache = new Cache(transport, silentLogger(), { initialBackoffMs: 100 });
    cache.ensure(Box, { namespace: NS, labelSelector: `${GROUP}/tier=gold` });
    cache.ensure(ConfigMap, { namespace: NS, fieldSelector: 'metadata.name!=skip-me' });
    cache.addIndex(Box, 'by-owner', (b) => [String(b.spec?.['owner'] ?? '')]);
    cache.start();
    await cache.waitForSync(30_000);
  });
  after(async () => {
    await cache?.stop();
    await cp?.stop();
  });

  test('get returns undefined for a missing object; create fills apiVersion and kind', async () => {
    assert.equal(await client.get(Box, { namespace: NS, name: 'none' }), undefined);
    const b = await client.create(Box, { metadata: { name: 'b1', namespace: NS }, spec: { owner: 'alice' } });
    assert.equal(b.apiVersion, `${GROUP}/v1`);
    assert.equal(b.kind, 'Box');
  });

  test('a merge patch carrying a stale resourceVersion fails with 409 Conflict', async () => {
    const b = (await client.get(Box, { namespace: NS, name: 'b1' }))!;
    await client.mergePatch(Box, { namespace: NS, name: 'b1' }, { spec: { size: 1 } });
    const err = await failure(client.mergePatch(Box, { namespace: NS, name: 'b1' }, { spec: { size: 2 } }, { resourceVersion: b.metadata!.resourceVersion! }));
    assert.ok(isConflict(err), err.message);
    assert.ok(isStaleWrite(err), 'a controller requeues it as no error');
  });

  test('a JSON patch guarded by a stale resourceVersion fails its test op', async () => {
    const b = (await client.get(Box, { namespace: NS, name: 'b1' }))!;
    await client.mergePatch(Box, { namespace: NS, name: 'b1' }, { spec: { size: 3 } });
    const err = await failure(client.jsonPatch(Box, { namespace: NS, name: 'b1' }, [{ op: 'replace', path: '/spec/size', value: 4 }], { resourceVersion: b.metadata!.resourceVersion! }));
    assert.ok(isPatchTestFailed(err), err.message);
  });

  test('finalizers are added and removed under a resourceVersion precondition', async () => {
    let b = (await client.get(Box, { namespace: NS, name: 'b1' }))!;
    const stale = b;
    b = await client.addFinalizer(Box, b, `${GROUP}/a`);
    b = await client.addFinalizer(Box, b, `${GROUP}/b`);
    assert.deepEqual(b.metadata?.finalizers, [`${GROUP}/a`, `${GROUP}/b`]);
    assert.equal(await client.addFinalizer(Box, b, `${GROUP}/a`), b, 'no write when already present');
    const err = await failure(client.addFinalizer(Box, stale, `${GROUP}/c`));
    assert.ok(isPatchTestFailed(err), 'a stale object cannot clobber the list');
    assert.ok(isStaleWrite(err), 'a controller requeues it as no error (the AddressPool reconciler met this on a stale cache)');
    b = await client.removeFinalizer(Box, b, `${GROUP}/a`);
    b = await client.removeFinalizer(Box, b, `${GROUP}/b`);
    assert.deepEqual(b.metadata?.finalizers ?? [], []);
  });

  test('server-side apply owns its fields under the field manager', async () => {
    const applied = await client.apply(Box, { apiVersion: `${GROUP}/v1`, kind: 'Box', metadata: { name: 'b2', namespace: NS }, spec: { owner: 'bob', size: 9 } });
    assert.equal(applied.spec?.['size'], 9);
    assert.ok(applied.metadata?.managedFields?.some((f) => f.manager === 'rt-client-test' && f.operation === 'Apply'));
    const again = await client.apply(Box, { apiVersion: `${GROUP}/v1`, kind: 'Box', metadata: { name: 'b2', namespace: NS }, spec: { owner: 'bob', size: 10 } });
    assert.equal(again.spec?.['size'], 10);
  });

  test('status goes through the status subresource only', async () => {
    const b = (await client.get(Box, { namespace: NS, name: 'b2' }))!;
    const updated = await client.patchStatus(Box, { namespace: NS, name: 'b2' }, { phase: 'Ready' }, { resourceVersion: b.metadata!.resourceVersion! });
    assert.equal(updated.status?.['phase'], 'Ready');
    const viaMain = await client.mergePatch(Box, { namespace: NS, name: 'b2' }, { status: { phase: 'Ignored' } });
    assert.equal(viaMain.status?.['phase'], 'Ready', 'the main resource ignores status');
  });

  test('delete honours a uid precondition and reports an already-gone object', async () => {
    const err = await failure(client.delete(Box, { namespace: NS, name: 'b2' }, { uid: '00000000-0000-0000-0000-000000000000' }));
    assert.ok(isConflict(err), err.message);
    assert.equal(await client.delete(Box, { namespace: NS, name: 'b2' }), true);
    assert.equal(await client.delete(Box, { namespace: NS, name: 'b2' }), false);
    assert.ok(isNotFound(await failure(client.mergePatch(Box, { namespace: NS, name: 'b2' }, {}))));
  });

  test('the cache holds only objects matching its label selector and serves indexes', async () => {
    const tier = (t: string) => ({ [`${GROUP}/tier`]: t });
    await client.create(Box, { metadata: { name: 'g1', namespace: NS, labels: tier('gold') }, spec: { owner: 'carol' } });
    await client.create(Box, { metadata: { name: 'g2', namespace: NS, labels: tier('gold') }, spec: { owner: 'carol' } });
    await client.create(Box, { metadata: { name: 's1', namespace: NS, labels: tier('silver') }, spec: { owner: 'carol' } });
    await eventually(() => cache.byIndex(Box, 'by-owner', 'carol').length === 2);
    assert.deepEqual(cache.list(Box).map((b) => b.metadata?.name).sort(), ['g1', 'g2']);
    assert.equal(cache.get(Box, { namespace: NS, name: 's1' }), undefined);
    await client.mergePatch(Box, { namespace: NS, name: 'g2' }, { spec: { owner: 'dave' } });
    await eventually(() => cache.byIndex(Box, 'by-owner', 'dave').length === 1);
    assert.deepEqual(cache.byIndex(Box, 'by-owner', 'carol').map((b) => b.metadata?.name), ['g1']);
    await client.mergePatch(Box, { namespace: NS, name: 'g1' }, { metadata: { labels: tier('silver') } });
    await eventually(() => cache.get(Box, { namespace: NS, name: 'g1' }) === undefined);
    assert.deepEqual(cache.byIndex(Box, 'by-owner', 'carol'), [], 'an object leaving the selector leaves the index');
  });

  test('the cache honours a field selector on a core kind', async () => {
    for (const name of ['keep-me', 'skip-me']) await client.create(ConfigMap, { metadata: { name, namespace: NS }, data: { a: '1' } } as never);
    await eventually(() => cache.get(ConfigMap, { namespace: NS, name: 'keep-me' }) !== undefined);
    assert.equal(cache.get(ConfigMap, { namespace: NS, name: 'skip-me' }), undefined);
  });

  test('cached objects are frozen so callers cannot corrupt the cache', () => {
    const b = cache.get(Box, { namespace: NS, name: 'g2' })!;
    assert.throws(() => {
      (b.spec as Record<string, unknown>)['owner'] = 'mallory';
    }, TypeError);
  });

  test('repeated Events aggregate into one with a count; a different message starts a new one', async () => {
    const recorder = new EventRecorder(new ApiTransport(cp.kubeConfig), 'rt-client-test', 'test-0', silentLogger());
    const box = await client.create(Box, { metadata: { name: 'noisy', namespace: NS } });
    for (let i = 0; i < 3; i++) recorder.event(box, 'Warning', 'SyncFailed', 'pool exhausted');
    recorder.event(box, 'Normal', 'Synced', 'done');
    await recorder.flush();
    const res = await cp.request('GET', `/api/v1/namespaces/${NS}/events?fieldSelector=involvedObject.name%3Dnoisy`);
    const events = (JSON.parse(res.body) as { items: { reason: string; count: number; involvedObject: { uid: string } }[] }).items;
    assert.deepEqual(events.map((e) => [e.reason, e.count]).sort(), [['SyncFailed', 3], ['Synced', 1]]);
    assert.ok(events.every((e) => e.involvedObject.uid === box.metadata!.uid));
  });
});
