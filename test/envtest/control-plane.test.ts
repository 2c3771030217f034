/**
 * The envtest harness itself: it starts and stops cleanly, leaves no process behind even when
 * the test process is killed, survives an apiserver restart with its data, runs
 * kube-controller-manager, and reuses the cached control-plane build.
 */
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { access, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import * as k8s from '@kubernetes/client-node';
import { ControlPlane, REPO_ROOT, buildEnv, eventually, kubernetesVersion } from './control-plane.js';

const run = promisify(execFile);

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** PIDs of the children of `pid` whose command line matches `pattern` (via /proc, no ps). */
async function descendants(pattern: RegExp): Promise<number[]> {
  const { stdout } = await run('pgrep', ['-f', pattern.source]).catch(() => ({ stdout: '' }));
  return stdout.split('\n').filter(Boolean).map(Number);
}

describe('envtest control plane', () => {
  let cp: ControlPlane;

  before(async () => {
    cp = await ControlPlane.start({ controllerManager: true });
  });
  after(() => cp?.stop());

  test('the control-plane build is skipped when the binaries are cached', async () => {
    // The release this run uses ($COIL_KUBERNETES), as controlPlaneBinDir asks for it.
    const { stderr, stdout } = await run('bash', [join(REPO_ROOT, 'hack/build-control-plane.sh')], { env: buildEnv(kubernetesVersion()) });
    assert.match(stderr, /control plane cached/);
    assert.equal(stdout.trim(), cp.binDir);
  });

  test('kube-controller-manager runs the deployment and replicaset controllers', async () => {
    const apps = cp.kubeConfig.makeApiClient(k8s.AppsV1Api);
    const labels = { app: 'kcm-check' };
    await apps.createNamespacedDeployment({
      namespace: 'default',
      body: {
        metadata: { name: 'kcm-check' },
        spec: {
          replicas: 2,
          selector: { matchLabels: labels },
          template: { metadata: { labels }, spec: { containers: [{ name: 'c', image: 'example.invalid/none' }] } },
        },
      },
    });
    const deployment = await eventually(async () => {
      const d = await apps.readNamespacedDeployment({ name: 'kcm-check', namespace: 'default' });
      return d.status?.replicas === 2 ? d : false;
    });
    assert.equal(deployment.status?.replicas, 2, 'the ReplicaSet created two Pods');
  });

  test('objects survive an apiserver restart (etcd keeps the data)', async () => {
    const core = cp.kubeConfig.makeApiClient(k8s.CoreV1Api);
    await core.createNamespace({ body: { metadata: { name: 'survivor' } } });
    await cp.stopApiServer();
    await assert.rejects(core.readNamespace({ name: 'survivor' }), 'the apiserver is down');
    await cp.startApiServer();
    const ns = await core.readNamespace({ name: 'survivor' });
    assert.equal(ns.metadata?.name, 'survivor');
  });

  test('stop() ends every process and removes the directory', async () => {
    const other = await ControlPlane.start();
    const pids = await descendants(new RegExp(`etcd.*${other.etcdPort}|kube-apiserver.*${other.apiPort}`));
    assert.ok(pids.length >= 2, `found etcd and kube-apiserver (${pids.join(',')})`);
    await other.stop();
    for (const pid of pids) assert.equal(isAlive(pid), false, `process ${pid} is gone`);
    await assert.rejects(access(other.dir), 'the directory is removed');
  });

  test('a test process killed with SIGKILL leaves no etcd or kube-apiserver behind', async () => {
    // A child Node process starts a plane and reports its ports; then it is killed without
    // any chance to clean up. setpriv --pdeathsig must take its children down with it.
    const script = `
      const { ControlPlane } = await import(${JSON.stringify(join(REPO_ROOT, 'dist/test/envtest/control-plane.js'))});
      const cp = await ControlPlane.start();
      console.log(JSON.stringify({ etcd: cp.etcdPort, api: cp.apiPort, dir: cp.dir }));
      setInterval(() => {}, 1000);`;
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
    const ports = await new Promise<{ etcd: number; api: number; dir: string }>((resolve, reject) => {
      child.stdout.on('data', (chunk: Buffer) => resolve(JSON.parse(chunk.toString()) as { etcd: number; api: number; dir: string }));
      child.on('exit', (code) => reject(new Error(`child exited early (${code})`)));
    });
    const pids = await descendants(new RegExp(`etcd.*${ports.etcd}|kube-apiserver.*${ports.api}`));
    assert.ok(pids.length >= 2, `found etcd and kube-apiserver (${pids.join(',')})`);
    child.kill('SIGKILL');
    await eventually(() => pids.every((pid) => !isAlive(pid)), { timeoutMs: 10_000 });
    // What the killed process could not do: its plane's directory is the test's to remove.
    await rm(ports.dir, { recursive: true, force: true });
  });
});
