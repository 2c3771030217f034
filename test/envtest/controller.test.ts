/**
 * The real coil-controller entrypoint (`dist/src/controller/main.js`) as a child process with a
 * kubeconfig: it serves probes, metrics and webhooks on Coil's flags, takes the Lease, answers a
 * BlockRequest, refuses a bad flag, and shuts down cleanly on SIGTERM, releasing the Lease.
 */
import 'reflect-metadata';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { blockRequestResult, isAnswered } from '../../src/api/v2/blockrequest.js';
import { coilCrds } from '../../src/api/v2/crd.js';
import { FIN_COIL, LEADER_ELECTION_ID } from '../../src/api/v2/keys.js';
import { addIpam } from '../../src/controller/ipam-registry.js';
import { Kinds } from '../../src/api/v2/kinds.js';
import type { Client } from '../../src/runtime/client.js';
import { ApiError } from '../../src/runtime/errors.js';
import { Registry } from '../../src/runtime/registry.js';
import { ControlPlane, eventually, freePort, REPO_ROOT } from './control-plane.js';
import { adminClient, createNode, createPool, createRequest, registerWebhooks } from './controller-support.js';
import { metricValue, scrape } from './runtime-support.js';

const MAIN = join(REPO_ROOT, 'dist/src/controller/main.js');

function run(args: readonly string[]): { child: ChildProcess; exit: Promise<number | null>; output: () => string } {
  const child = spawn(process.execPath, [MAIN, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
  const exit = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return { child, exit, output: () => out };
}

describe('coil-controller entrypoint (child process)', () => {
  let cp: ControlPlane;
  let client: Client;
  let proc: ReturnType<typeof run>;
  const ports = { metrics: 0, health: 0, webhook: 0 };

  before(async () => {
    cp = await ControlPlane.start({ crds: coilCrds() });
    client = adminClient(cp);
    const { dir } = await cp.writeServingCert();
    ports.metrics = await freePort();
    ports.health = await freePort();
    ports.webhook = await freePort();
    proc = run([
      `--kubeconfig=${cp.kubeconfigPath}`,
      `--metrics-addr=127.0.0.1:${ports.metrics}`,
      `--health-addr=127.0.0.1:${ports.health}`,
      '--secure-endpoints=false',
      `--webhook-addr=127.0.0.1:${ports.webhook}`,
      `--cert-dir=${dir}`,
      '--leader-election-namespace=default',
      '--gc-interval=10s',
      '--zap-stacktrace-level=panic',
    ]);
    await eventually(async () => (await fetch(`http://127.0.0.1:${ports.health}/readyz`)).status === 200, { timeoutMs: 30_000 }).catch((e: unknown) => {
      throw new Error(`controller not ready: ${String(e)}\n${proc.output().slice(-3000)}`);
    });
    await registerWebhooks(cp, addIpam(new Registry(), { addressPool: false, blockRequest: false, gc: false }), ports.webhook, 'coilv2-ipam');
  });
  after(async () => {
    if (proc && proc.child.exitCode === null) proc.child.kill('SIGKILL');
    await cp?.stop();
  });

  test('takes the Lease coil-leader', async () => {
    await eventually(async () => {
      const res = await cp.request('GET', `/apis/coordination.k8s.io/v1/namespaces/default/leases/${LEADER_ELECTION_ID}`);
      return res.status === 200 && !!(JSON.parse(res.body) as { spec?: { holderIdentity?: string } }).spec?.holderIdentity;
    });
  });

  test('its webhooks add the finalizer and deny an invalid pool', async () => {
    const p = await eventually(async () => {
      const name = `p-${Date.now()}`;
      const pool = await createPool(client, name, { subnets: [{ ipv4: `10.${40 + (Date.now() % 50)}.0.0/24` }] });
      return pool.metadata?.finalizers?.includes(FIN_COIL) ? pool : false;
    });
    assert.ok(p);
    await assert.rejects(createPool(client, 'bad', { subnets: [{ ipv4: '10.0.0.1/24' }] }), (e: unknown) => e instanceof ApiError && e.code === 422 && /host bits are set/.test(e.message));
  });

  test('answers a BlockRequest and exports the pool gauges on --metrics-addr', async () => {
    await createPool(client, 'main', { subnets: [{ ipv4: '10.30.0.0/24' }] });
    // The GC runs too: a block of a Node that does not exist would be released at once.
    await createNode(client, 'n1', { status: 'True', sinceMs: Date.now() });
    const req = await createRequest(client, 'main', 'n1');
    const br = await eventually(async () => {
      const r = await client.get(Kinds.BlockRequest, { name: req.metadata!.name! });
      return r && isAnswered(r.status) ? r : false;
    }).catch((e: unknown) => {
      throw new Error(`no answer: ${String(e)}\n${proc.output().slice(-3000)}`);
    });
    assert.deepEqual(blockRequestResult(br.status), { kind: 'allocated', addressBlockName: 'main-0' });
    await eventually(async () => metricValue(await scrape(ports.metrics), 'coil_controller_allocated_blocks', { pool: 'main' }) === 1);
    assert.equal(metricValue(await scrape(ports.metrics), 'coil_controller_max_blocks', { pool: 'main' }), 8);
  });

  test('exits 2 on an unknown flag', async () => {
    const bad = run(['--no-such-flag=1']);
    assert.equal(await bad.exit, 2);
    assert.match(bad.output(), /no-such-flag/);
  });

  test('SIGTERM shuts down gracefully: exit 0 and the Lease released', async () => {
    proc.child.kill('SIGTERM');
    assert.equal(await proc.exit, 0, proc.output().slice(-2000));
    const res = await cp.request('GET', `/apis/coordination.k8s.io/v1/namespaces/default/leases/${LEADER_ELECTION_ID}`);
    assert.ok(!(JSON.parse(res.body) as { spec?: { holderIdentity?: string } }).spec?.holderIdentity, res.body);
  });
});
