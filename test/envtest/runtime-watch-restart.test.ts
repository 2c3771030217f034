/**
 * The informer cache survives the API server going away: stop and start the real kube-apiserver
 * (etcd keeps the data), change and delete objects while the runtime cannot see them, and the
 * reconciler catches up — including deletes it never received as watch events.
 *
 * The runtime reaches the apiserver through a TCP pass-through that the test can hold closed, so
 * "while the watch was down" is a fact of the test, not a race with the informer's retry timer.
 */
import 'reflect-metadata';
import assert from 'node:assert/strict';
import { createServer, connect, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { KubeConfig } from '@kubernetes/client-node';
import { Container, inject } from 'inversify';
import { ApiTransport } from '../../src/runtime/api-transport.js';
import { Cache } from '../../src/runtime/cache.js';
import { Client } from '../../src/runtime/client.js';
import { Reconciler } from '../../src/runtime/decorators.js';
import type { Result } from '../../src/runtime/errors.js';
import { keyOf } from '../../src/runtime/kind.js';
import type { Manager } from '../../src/runtime/manager.js';
import { Registry, type Reconcile, type Request } from '../../src/runtime/registry.js';
import { ControlPlane, eventually } from './control-plane.js';
import { createNamespace, sampleCrd, sampleKind, testManager } from './runtime-support.js';

const Crate = sampleKind('Crate');
const NS = 'rt-restart';
const SEEN = Symbol('seen');

/** Last state each key was reconciled with: the spec's `label`, or `absent`. */
type Seen = Map<string, string>;

const registry = new Registry();

@Reconciler({ name: 'crate', for: Crate, registry })
class CrateReconciler implements Reconcile {
  constructor(
    @inject(Cache) private readonly cache: Cache,
    @inject(SEEN) private readonly seen: Seen,
  ) {}

  async reconcile(req: Request): Promise<Result> {
    const c = this.cache.get(Crate, req);
    this.seen.set(keyOf(req), c ? String(c.spec?.['label']) : 'absent');
    return {};
  }
}

/** A TCP pass-through to the apiserver that can refuse and cut connections on demand. */
class Gate {
  private server: Server | undefined;
  private readonly sockets = new Set<Socket>();
  open = true;

  constructor(private readonly targetPort: number) {}

  async start(): Promise<number> {
    this.server = createServer((client) => {
      if (!this.open) return void client.destroy();
      const upstream = connect(this.targetPort, '127.0.0.1');
      for (const s of [client, upstream]) {
        this.sockets.add(s);
        s.on('close', () => this.sockets.delete(s));
        s.on('error', () => undefined);
      }
      client.pipe(upstream).pipe(client);
      client.on('close', () => upstream.destroy());
      upstream.on('close', () => client.destroy());
    });
    await new Promise<void>((r) => this.server!.listen(0, '127.0.0.1', r));
    return (this.server.address() as AddressInfo).port;
  }

  close(): void {
    this.open = false;
    for (const s of this.sockets) s.destroy();
  }

  async stop(): Promise<void> {
    this.close();
    await new Promise((r) => this.server?.close(r));
  }
}

describe('runtime: the watch survives an apiserver restart', () => {
  let cp: ControlPlane;
  let mgr: Manager;
  let gate: Gate;
  let direct: Client;
  const seen: Seen = new Map();

  before(async () => {
    cp = await ControlPlane.start({ crds: [sampleCrd(Crate)] });
    await createNamespace(cp, NS);
    gate = new Gate(cp.apiPort);
    const port = await gate.start();
    const kc = new KubeConfig();
    kc.loadFromOptions({
      clusters: cp.kubeConfig.clusters.map((c) => ({ ...c, server: `https://127.0.0.1:${port}` })),
      users: cp.kubeConfig.users,
      contexts: cp.kubeConfig.contexts,
      currentContext: cp.kubeConfig.currentContext,
    });
    const container = new Container();
    container.bind(SEEN).toConstantValue(seen);
    mgr = testManager(cp, registry, { kubeConfig: kc, container });
    await mgr.start();
    direct = new Client(new ApiTransport(cp.kubeConfig), 'test');
  });
  after(async () => {
    await mgr?.stop();
    await gate?.stop();
    await cp?.stop();
  });

  test('objects changed, deleted and created while the apiserver was down are caught up', async () => {
    await direct.create(Crate, { metadata: { name: 'changed', namespace: NS }, spec: { label: 'v1' } });
    await direct.create(Crate, { metadata: { name: 'deleted', namespace: NS }, spec: { label: 'v1' } });
    await eventually(() => seen.get(`${NS}/changed`) === 'v1' && seen.get(`${NS}/deleted`) === 'v1');

    const deletions: string[] = [];
    mgr.cache.onEvent(Crate, (e) => {
      // `old` is set only on deletes found by diffing a relist against the store.
      if (e.type === 'DELETED') deletions.push(`${keyOf(e.object)}${e.old ? ' (found by relist)' : ''}`);
    });
    gate.close();
    await cp.stopApiServer();
    await cp.startApiServer();
    await direct.mergePatch(Crate, { namespace: NS, name: 'changed' }, { spec: { label: 'v2' } });
    assert.equal(await direct.delete(Crate, { namespace: NS, name: 'deleted' }), true);
    await direct.create(Crate, { metadata: { name: 'created', namespace: NS }, spec: { label: 'v1' } });
    await new Promise((r) => setTimeout(r, 1_000));
    assert.equal(seen.get(`${NS}/changed`), 'v1', 'the runtime must not have seen the change yet');
    gate.open = true;

    await eventually(() => seen.get(`${NS}/changed`) === 'v2' && seen.get(`${NS}/deleted`) === 'absent' && seen.get(`${NS}/created`) === 'v1', { timeoutMs: 60_000 });
    assert.equal(mgr.cache.get(Crate, { namespace: NS, name: 'deleted' }), undefined);
    assert.deepEqual(deletions, [`${NS}/deleted (found by relist)`]);
  });

  test('the watch keeps delivering after the restart', async () => {
    await direct.mergePatch(Crate, { namespace: NS, name: 'changed' }, { spec: { label: 'v3' } });
    await eventually(() => seen.get(`${NS}/changed`) === 'v3');
    const res = await fetch(`http://127.0.0.1:${mgr.ports.health}/readyz`);
    assert.equal(res.status, 200);
  });
});
