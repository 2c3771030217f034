/**
 * The coil-controller entrypoint with only the Egress part (`--enable-ipam=false`), as a child
 * process: the egress image defaults to the controller's own (its Pod named by COIL_POD_NAMESPACE
 * and COIL_POD_NAME), `--egress-port` reaches the Service and coil-egress, and a named Pod that
 * cannot be read stops the start-up with exit 1.
 */
import 'reflect-metadata';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { coilCrds } from '../../src/api/v2/crd.js';
import { Kinds } from '../../src/api/v2/kinds.js';
import type { Client } from '../../src/runtime/client.js';
import { ControlPlane, eventually, REPO_ROOT } from './control-plane.js';
import { adminClient } from './controller-support.js';
import { createEgress } from './egress-support.js';

const MAIN = join(REPO_ROOT, 'dist/src/controller/main.js');
const ARGS = ['--enable-ipam=false', '--enable-webhooks=false', '--leader-elect=false', '--metrics-addr=0', '--health-addr=0'];

function run(cp: ControlPlane, args: readonly string[], env: Record<string, string>) {
  const child = spawn(process.execPath, [MAIN, `--kubeconfig=${cp.kubeconfigPath}`, ...ARGS, ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (out += d.toString()));
  const exit = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return { child, exit, output: () => out };
}

describe('coil-controller with only the Egress part (child process)', () => {
  let cp: ControlPlane;
  let client: Client;
  let proc: ReturnType<typeof run> | undefined;

  before(async () => {
    cp = await ControlPlane.start({ crds: coilCrds() });
    client = adminClient(cp);
    await client.create(Kinds.Pod, {
      metadata: { namespace: 'default', name: 'coil-controller-abc' },
      spec: { containers: [{ name: 'sidecar', image: 'example.com/other:1' }, { name: 'coil-controller', image: 'example.com/coil:own' }] },
    } as never);
  });
  after(async () => {
    if (proc && proc.child.exitCode === null) proc.child.kill('SIGKILL');
    await cp?.stop();
  });

  test('a Pod that cannot be read stops the start with exit 1', async () => {
    const p = run(cp, [], { COIL_POD_NAMESPACE: 'default', COIL_POD_NAME: 'missing' });
    assert.equal(await p.exit, 1, p.output());
    assert.match(p.output(), /cannot find the controller image in Pod default\/missing/);
  });

  test("Egress pods get the controller's own image and the --egress-port", async () => {
    proc = run(cp, ['--egress-port=6000'], { COIL_POD_NAMESPACE: 'default', COIL_POD_NAME: 'coil-controller-abc' });
    await createEgress(client, 'default', 'nat');
    const d = await eventually(() => client.get(Kinds.Deployment, { namespace: 'default', name: 'nat' }).then((x) => x ?? false)).catch((e: unknown) => {
      throw new Error(`${String(e)}\n${proc!.output().slice(-3000)}`);
    });
    const c = d.spec!.template.spec!.containers[0]!;
    assert.equal(c.image, 'example.com/coil:own');
    assert.deepEqual(c.args, ['--fou-port=6000', '--backend=iptables']);
    const svc = await eventually(() => client.get(Kinds.Service, { namespace: 'default', name: 'nat' }).then((x) => x ?? false));
    assert.deepEqual(svc.spec?.ports?.map((p) => [p.port, p.protocol]), [[6000, 'UDP']]);
    proc.child.kill('SIGTERM');
    assert.equal(await proc.exit, 0, proc.output());
  });
});
