/**
 * The AddressPool `default` made by coil-controller (`--default-pool`, the chart's
 * `defaultPool.create`), against a real kube-apiserver whose AddressPool webhooks point at the
 * controller. Before a webhook answers, creating the pool fails ("failed calling webhook") — the
 * chart's old post-install hook failed there on every `helm install` without `--wait`; the
 * controller instead creates it once its own webhook serves, and adopts an existing pool.
 */
import 'reflect-metadata';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { coilCrds } from '../../src/api/v2/crd.js';
import { FIN_COIL } from '../../src/api/v2/keys.js';
import { addIpam } from '../../src/controller/ipam-registry.js';
import { DefaultPoolEnsurer } from '../../src/reconcilers/default-pool.js';
import { Kinds } from '../../src/api/v2/kinds.js';
import type { Client } from '../../src/runtime/client.js';
import { createLogger } from '../../src/runtime/logging.js';
import { Registry } from '../../src/runtime/registry.js';
import { ControlPlane, eventually, freePort, REPO_ROOT } from './control-plane.js';
import { adminClient, registerWebhooks } from './controller-support.js';

const MAIN = join(REPO_ROOT, 'dist/src/controller/main.js');
const log = createLogger({ name: 'default-pool-test', level: 'fatal' });
const SPEC = { blockSizeBits: 4, subnets: [{ ipv4: '10.70.0.0/24' }] };

describe('default AddressPool made by coil-controller (--default-pool)', () => {
  let cp: ControlPlane;
  let client: Client;
  let child: ChildProcess | undefined;
  let output = '';
  let webhookPort: number;
  let certDir: string;

  before(async () => {
    cp = await ControlPlane.start({ crds: coilCrds() });
    client = adminClient(cp);
    certDir = (await cp.writeServingCert()).dir;
    webhookPort = await freePort();
    // As the chart installs them: the webhook configurations exist before any controller serves.
    await registerWebhooks(cp, addIpam(new Registry(), { addressPool: false, blockRequest: false, gc: false }), webhookPort, 'coilv2-ipam');
  });
  after(async () => {
    if (child && child.exitCode === null) child.kill('SIGKILL');
    await cp?.stop();
  });

  test('before the webhook serves, creating the pool fails (what the post-install hook met)', async () => {
    const ensurer = new DefaultPoolEnsurer({ client, spec: SPEC, logger: log });
    await assert.rejects(ensurer.ensureOnce(), /failed calling webhook/);
    assert.equal(await client.get(Kinds.AddressPool, { name: 'default' }), undefined);
  });

  test('the controller creates it through its webhook once it serves', async () => {
    child = spawn(process.execPath, [MAIN, `--kubeconfig=${cp.kubeconfigPath}`, '--metrics-addr=0', '--health-addr=0',
      `--webhook-addr=127.0.0.1:${webhookPort}`, `--cert-dir=${certDir}`, '--leader-election-namespace=default',
      `--default-pool=${JSON.stringify(SPEC)}`], { stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout!.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (output += d.toString()));
    const pool = await eventually(async () => (await client.get(Kinds.AddressPool, { name: 'default' })) ?? false, { timeoutMs: 30_000 })
      .catch((e: unknown) => assert.fail(`no default pool: ${String(e)}\n${output.slice(-3000)}`));
    assert.deepEqual(pool.spec, SPEC);
    assert.ok(pool.metadata?.finalizers?.includes(FIN_COIL), 'the mutating webhook ran on the create');
    assert.match(output, /default AddressPool ensured/);
  });

  test('an existing pool is adopted: missing subnets appended, a conflicting one left alone', async () => {
    const grown = { ...SPEC, subnets: [...SPEC.subnets, { ipv4: '10.71.0.0/24' }] };
    assert.equal(await new DefaultPoolEnsurer({ client, spec: grown, logger: log }).ensureOnce(), 'appended');
    assert.deepEqual((await client.get(Kinds.AddressPool, { name: 'default' }))!.spec.subnets, grown.subnets);
    assert.equal(await new DefaultPoolEnsurer({ client, spec: grown, logger: log }).ensureOnce(), 'adopted');
    assert.equal(await new DefaultPoolEnsurer({ client, spec: { ...grown, blockSizeBits: 5 }, logger: log }).ensureOnce(), 'left-alone');
    assert.equal((await client.get(Kinds.AddressPool, { name: 'default' }))!.spec.blockSizeBits, 4);
  });

  test('a bad --default-pool stops the controller at start, naming the field', async () => {
    const bad = spawn(process.execPath, [MAIN, `--kubeconfig=${cp.kubeconfigPath}`, '--default-pool={"subnets":[{"ipv4":"10.0.0.1/24"}]}'], { stdio: ['ignore', 'pipe', 'pipe'] });
    let err = '';
    bad.stderr!.on('data', (d: Buffer) => (err += d.toString()));
    const code = await new Promise<number | null>((resolve) => bad.on('exit', resolve));
    assert.equal(code, 2);
    assert.match(err, /--default-pool: spec\.subnets\[0\]\.ipv4/);
  });
});
