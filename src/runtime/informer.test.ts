import assert from 'node:assert/strict';
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { KubeConfig, type KubernetesObject } from '@kubernetes/client-node';
import { ApiTransport } from './api-transport.js';
import { Informer, type InformerEvent } from './informer.js';
import { defineKind } from './kind.js';
import { silentLogger } from './logging.js';

/**
 * Recovery paths a real apiserver cannot be made to take on demand (a 410 Gone in the middle of
 * a watch, a connection that stays open but goes silent, a failing list) are driven by a
 * scripted HTTP server here; everything else is covered against the real one in test/envtest.
 */
const Thing = defineKind({ group: 'test.coil.example', version: 'v1', kind: 'Thing', plural: 'things', namespaced: false });

/** What the fake server answers: one entry consumed per request, the last one repeated. */
interface Script {
  /** Each list: a status code to fail with, or the items and resourceVersion to return. */
  lists: (number | { items: KubernetesObject[]; rv: string })[];
  /** Each watch: send a 410 Gone ERROR event, or stay silent (headers never even flushed). */
  watches: ('gone' | 'silent')[];
  listCount: number;
  watchRVs: string[];
}

const obj = (name: string, rv: string): KubernetesObject => ({ apiVersion: 'test.coil.example/v1', kind: 'Thing', metadata: { name, resourceVersion: rv } });
const next = <T>(q: T[]): T => (q.length > 1 ? q.shift()! : q[0]!);

describe('Informer recovery', () => {
  let server: Server;
  let kc: KubeConfig;
  const script: Script = { lists: [], watches: [], listCount: 0, watchRVs: [] };
  const play = (lists: Script['lists'], watches: Script['watches']) => Object.assign(script, { lists, watches, listCount: 0, watchRVs: [] });
  const open = new Set<ServerResponse>();

  before(async () => {
    server = createServer((req, res) => {
      const url = new URL(req.url!, 'http://x');
      if (url.searchParams.get('watch') === 'true') {
        script.watchRVs.push(url.searchParams.get('resourceVersion') ?? '');
        res.writeHead(200, { 'content-type': 'application/json' });
        open.add(res);
        res.on('close', () => open.delete(res));
        if (next(script.watches) === 'gone') res.write(JSON.stringify({ type: 'ERROR', object: { kind: 'Status', code: 410, reason: 'Expired', message: 'too old resource version' } }) + '\n');
        return;
      }
      script.listCount++;
      const answer = next(script.lists);
      if (typeof answer === 'number') return void res.writeHead(answer, { 'content-type': 'application/json' }).end(JSON.stringify({ kind: 'Status', code: answer, message: 'scripted failure' }));
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ kind: 'ThingList', metadata: { resourceVersion: answer.rv }, items: answer.items }));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    kc = new KubeConfig();
    kc.loadFromOptions({
      clusters: [{ name: 'fake', server: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, skipTLSVerify: true }],
      users: [{ name: 'u' }],
      contexts: [{ name: 'fake', cluster: 'fake', user: 'u' }],
      currentContext: 'fake',
    });
  });
  after(async () => {
    for (const r of open) r.destroy();
    await new Promise((r) => server.close(r));
  });

  const informer = (opts = {}) => new Informer(Thing, new ApiTransport(kc), kc, silentLogger(), { initialBackoffMs: 20, maxBackoffMs: 100, ...opts });

  async function until(cond: () => boolean): Promise<void> {
    const end = Date.now() + 10_000;
    while (!cond()) {
      if (Date.now() > end) throw new Error('condition not met in time');
      await new Promise((r) => setTimeout(r, 10));
    }
  }

  it('keeps retrying a failing list with backoff and syncs once it succeeds', async () => {
    play([500, 503, 403, { items: [obj('a', '5')], rv: '5' }], ['silent']);
    const inf = informer();
    inf.start();
    await inf.waitForSync();
    assert.equal(script.listCount, 4);
    assert.equal(inf.get('a')?.metadata?.resourceVersion, '5');
    await until(() => script.watchRVs.length === 1);
    assert.deepEqual(script.watchRVs, ['5'], 'the watch starts from the list resourceVersion');
    await inf.stop();
  });

  it('relists on a 410 Gone event and reports objects deleted meanwhile', async () => {
    play([{ items: [obj('a', '5'), obj('b', '6')], rv: '6' }, { items: [obj('a', '9')], rv: '9' }], ['gone', 'silent']);
    const inf = informer();
    const events: string[] = [];
    inf.onEvent((e: InformerEvent<KubernetesObject>) => events.push(`${e.type} ${e.object.metadata?.name}`));
    inf.start();
    await until(() => script.watchRVs.includes('9'));
    assert.equal(script.listCount, 2);
    assert.deepEqual(events, ['ADDED a', 'ADDED b', 'DELETED b', 'MODIFIED a']);
    assert.equal(inf.get('b'), undefined);
    await inf.stop();
  });

  it('a silent watch trips the watchdog and is replaced by a relist', async () => {
    play([{ items: [obj('a', '5')], rv: '5' }], ['silent']);
    const inf = informer({ watchdogMs: 200 });
    inf.start();
    await until(() => script.listCount >= 3);
    assert.ok(inf.hasSynced());
    await inf.stop();
  });

  it('stop ends the loop even while a watch is still connecting', async () => {
    play([{ items: [], rv: '1' }], ['silent']);
    const inf = informer();
    inf.start();
    await until(() => script.watchRVs.length === 1);
    await inf.stop();
    const lists = script.listCount;
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(script.listCount, lists);
  });
});
