/**
 * What one coild costs the real kube-apiserver in connections: coild's API side (its cache with
 * every kind and selector it watches, plus live reads: test/support/coild-api-client.ts) holds
 * exactly one TCP connection to the apiserver over HTTP/2 — on Node and on Bun, coild's runtime —
 * and one per watch with `--api-http2=false` (HTTP/1.1). Counted from the OS: the child's socket
 * inodes (/proc/PID/fd) matched to established connections to the apiserver's port in
 * /proc/net/tcp. Then the apiserver is restarted (etcd keeps the data) and every informer
 * recovers: an object created afterwards reaches all three caches, again over one connection.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { connect } from 'node:http2';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { after, before, test } from 'node:test';
import { coilCrds } from '../../src/api/v2/crd.js';
import { tcpConnections } from '../support/tcp-connections.js';
import { ControlPlane, eventually, REPO_ROOT } from './control-plane.js';

const NODE = 'conn-node';
const BUN = join(REPO_ROOT, 'node_modules/@oven/bun-linux-x64/bin/bun');
const SCRIPT = join(REPO_ROOT, 'dist/test/support/coild-api-client.js');

/** One coild-api-client child and the facts it printed. */
class CoildClient {
  readonly facts: { synced?: boolean; kinds?: number; event?: string; kind?: string; name?: string }[] = [];
  readonly child: ChildProcess;
  stderr = '';

  constructor(readonly label: string, runtime: string, cp: ControlPlane, flags: readonly string[] = []) {
    this.child = spawn(runtime, [SCRIPT, '--kubeconfig', cp.kubeconfigPath, ...flags], {
      env: { ...process.env, COIL_NODE_NAME: NODE, BUN_BE_BUN: '1' },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    createInterface({ input: this.child.stdout! }).on('line', (l) => this.facts.push(JSON.parse(l) as CoildClient['facts'][number]));
    this.child.stderr!.on('data', (d: Buffer) => (this.stderr += d.toString()));
  }

  saw(kind: string, name: string): boolean {
    return this.facts.some((f) => f.kind === kind && f.name === name);
  }

  async stop(): Promise<void> {
    if (this.child.exitCode !== null) return;
    const exited = new Promise((r) => this.child.once('exit', r));
    this.child.stdin!.end();
    await exited;
  }
}

let cp: ControlPlane;
const clients: CoildClient[] = [];

before(async () => {
  cp = await ControlPlane.start({ crds: coilCrds() });
  const node = await cp.request('POST', '/api/v1/nodes', { apiVersion: 'v1', kind: 'Node', metadata: { name: NODE } });
  assert.equal(node.status, 201, node.body);
});

after(async () => {
  for (const c of clients) await c.stop();
  await cp?.stop();
});

const pod = (name: string): object => ({
  apiVersion: 'v1', kind: 'Pod', metadata: { name, namespace: 'default' },
  spec: { nodeName: NODE, containers: [{ name: 'c', image: 'registry.invalid/none' }] },
});

test('a coild holds one HTTP/2 connection to the apiserver, on Node and on Bun, and its informers survive an apiserver restart', async (t) => {
  // What the apiserver grants one connection (its --http2-max-streams-per-connection).
  const probe = connect(cp.server, { ca: cp.ca.caPem });
  const settings = await new Promise<{ maxConcurrentStreams?: number }>((r) => probe.once('remoteSettings', r));
  probe.destroy();
  t.diagnostic(`kube-apiserver SETTINGS_MAX_CONCURRENT_STREAMS: ${settings.maxConcurrentStreams}`);

  const h2node = new CoildClient('node', process.execPath, cp);
  const h2bun = new CoildClient('bun', BUN, cp);
  const h1node = new CoildClient('node --api-http2=false', process.execPath, cp, ['--api-http2=false']);
  clients.push(h2node, h2bun, h1node);
  const all = [h2node, h2bun, h1node];
  await eventually(() => all.every((c) => c.facts.some((f) => f.synced)), { timeoutMs: 60_000 }).catch((err: unknown) => {
    throw new Error(`${String(err)}; stderr: ${all.map((c) => `${c.label}: ${c.stderr}`).join('; ')}`);
  });
  const watches = all[0]!.facts.find((f) => f.synced)!.kinds!;

  const created = await cp.request('POST', '/api/v1/namespaces/default/pods', pod('before-restart'));
  assert.equal(created.status, 201, created.body);
  await eventually(() => all.every((c) => c.saw('Pod', 'before-restart')), { timeoutMs: 30_000 });

  const count = async (): Promise<number[]> => Promise.all(all.map((c) => tcpConnections(c.child.pid!, [cp.apiPort])));
  // A finished HTTP/1.1 request's socket may linger a moment: counted once settled.
  await eventually(async () => {
    const [n2, b2, n1] = await count();
    assert.deepEqual({ node: n2, bun: b2 }, { node: 1, bun: 1 }, 'HTTP/2: one connection per coild');
    assert.ok(n1! >= watches, `HTTP/1.1: ${n1} connections for ${watches} watches`);
    return true;
  }, { timeoutMs: 10_000 });
  const [, , h1Before] = await count();
  t.diagnostic(`connections to the apiserver per coild: HTTP/2 1 (Node), 1 (Bun); HTTP/1.1 ${h1Before} for ${watches} watches`);

  await cp.stopApiServer();
  await cp.startApiServer();
  const again = await cp.request('POST', '/api/v1/namespaces/default/pods', pod('after-restart'));
  assert.equal(again.status, 201, again.body);
  await eventually(() => all.every((c) => c.saw('Pod', 'after-restart')), { timeoutMs: 90_000 }).catch((err: unknown) => {
    throw new Error(`${String(err)}; stderr: ${all.map((c) => `${c.label}: ${c.stderr}`).join('; ')}`);
  });
  await eventually(async () => {
    const [n2, b2] = await count();
    assert.deepEqual({ node: n2, bun: b2 }, { node: 1, bun: 1 }, 'after the restart: one connection per coild');
    return true;
  }, { timeoutMs: 30_000 });
});
