/**
 * coil-egress against a real API server: the client-pod source keeps exactly the pods naming its
 * Egress (annotation added, edited, removed; a finished pod leaves through the field selector),
 * and the coil-egress program, run in an egress pod netns on this kernel without FoU, installs
 * its NAT table, exports `coil_egress_kernel_feature{feature="fou"} 0` and stays unready with the
 * reason in /readyz. Root only (netns); skipped with the reason otherwise.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import type { V1Pod } from '@kubernetes/client-node';
import { ClientPodSource } from '../../src/egress-agent/client-pod-source.js';
import { probeFeatures } from '../../src/netlink/features.js';
import { IpRunner } from '../../src/netlink/ip-runner.js';
import { TestNetnsSet, netnsSkipReason, type TestNetns } from './test-netns.js';
import { Kinds } from '../../src/api/v2/kinds.js';
import { ApiTransport } from '../../src/runtime/api-transport.js';
import { Client } from '../../src/runtime/client.js';
import { silentLogger } from '../../src/runtime/logging.js';
import { ControlPlane, eventually, freePort } from '../envtest/control-plane.js';
import { wire } from './egress-peer.js';
import { coilEgressCommand } from './node-lab.js';
import { prerequisite } from '../support/prerequisite.js';

describe('coil-egress against a real API server', { skip: prerequisite(netnsSkipReason()) }, () => {
  let cp: ControlPlane;
  let admin: Client;
  const stop = new AbortController();
  let source: ClientPodSource;
  let running: Promise<void>;
  const ip = new IpRunner();
  const netns = new TestNetnsSet({ ip });

  const podOf = (name: string, annotations: Record<string, string>, hostNetwork = false): V1Pod => ({
    metadata: { namespace: 'app', name, annotations }, spec: { nodeName: 'n1', hostNetwork, containers: [{ name: 'c', image: 'pause' }] },
  });
  const names = () => source.list().map((p) => `${p.name}:${p.ips.join(',')}`).sort();

  before(async () => {
    cp = await ControlPlane.start();
    admin = new Client(new ApiTransport(cp.kubeConfig), 'egress-test');
    for (const ns of ['app', 'internet']) await cp.request('POST', '/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns } });
    await admin.create(Kinds.Pod, podOf('before-start', { 'egress.coil.cybozu.com/internet': 'nat' }));
    await admin.patchStatus(Kinds.Pod, { namespace: 'app', name: 'before-start' }, { phase: 'Running', podIP: '10.1.0.1', podIPs: [{ ip: '10.1.0.1' }] });
    source = new ClientPodSource({ transport: new ApiTransport(cp.kubeConfig), egress: { namespace: 'internet', name: 'nat' }, log: silentLogger(), onChange: () => undefined });
    running = source.run(stop.signal);
  });
  after(async () => {
    stop.abort();
    await running;
    await netns.cleanup();
    await cp?.stop();
  });

  it('lists the pods that existed before the start', async () => {
    await eventually(() => assert.deepEqual(names(), ['before-start:10.1.0.1']), { timeoutMs: 10_000 });
  });

  it('adds clients as they appear, ignores others and host-network pods, follows annotation edits', async () => {
    await admin.create(Kinds.Pod, podOf('other', { 'egress.coil.cybozu.com/internet': 'other' }));
    await admin.create(Kinds.Pod, podOf('hostnet', { 'egress.coil.cybozu.com/internet': 'nat' }, true));
    await admin.create(Kinds.Pod, podOf('later', { 'egress.coil.cybozu.com/internet': 'a,nat' }));
    await eventually(() => assert.deepEqual(names(), ['before-start:10.1.0.1', 'later:']), { timeoutMs: 10_000 });
    await admin.patchStatus(Kinds.Pod, { namespace: 'app', name: 'later' }, { phase: 'Pending', podIPs: [{ ip: '10.1.0.2' }, { ip: 'fd00::2' }] });
    await eventually(() => assert.deepEqual(names(), ['before-start:10.1.0.1', 'later:10.1.0.2,fd00::2']), { timeoutMs: 10_000 });
    await admin.mergePatch(Kinds.Pod, { namespace: 'app', name: 'later' }, { metadata: { annotations: { 'egress.coil.cybozu.com/internet': 'a' } } });
    await eventually(() => assert.deepEqual(names(), ['before-start:10.1.0.1']), { timeoutMs: 10_000 });
  });

  it('a pod that finished (Succeeded) leaves the set through the field selector', async () => {
    await admin.patchStatus(Kinds.Pod, { namespace: 'app', name: 'before-start' }, { phase: 'Succeeded' });
    await eventually(() => assert.deepEqual(names(), []), { timeoutMs: 10_000 });
  });

  it('the program in a netns without FoU: NAT installed, feature metric 0, unready with the reason', async () => {
    const f = await probeFeatures(ip);
    const e: TestNetns = await netns.create('egress-agent');
    const x = await netns.create('egress-agent-x');
    await wire(ip, e, 'eth0', x, 'eth0');
    await ip.batch([['addr', 'add', '198.51.100.1/24', 'dev', 'eth0']], { netns: e.path });
    const [metrics, health] = [await freePort(), await freePort()];
    // As the image runs it: on Bun, its bundle (node-lab.ts coilEgressCommand).
    const egress = coilEgressCommand();
    const child = spawn('ip', ['netns', 'exec', e.name, ...egress.argv, '--kubeconfig', cp.kubeconfigPath,
      `--metrics-addr=:${metrics}`, `--health-addr=:${health}`, '--backend=nftables'], {
      env: { ...process.env, COIL_POD_NAMESPACE: 'internet', COIL_EGRESS_NAME: 'nat', COIL_POD_ADDRESSES: '198.51.100.1', HOSTNAME: 'nat-0', ...egress.env }, stdio: ['ignore', 'ignore', 'pipe'],
    });
    let log = '';
    child.stderr.on('data', (b: Buffer) => { log += b.toString(); });
    try {
      // The ports live in the netns: reach them through it.
      const get = async (port: number, path: string) => (await ip.exec(['ip', 'netns', 'exec', e.name, 'curl', '-s', `http://127.0.0.1:${port}${path}`]).catch((err: Error) => ({ stdout: err.message }))).stdout;
      await eventually(async () => assert.match(await get(metrics, '/metrics'), /coil_egress_kernel_feature\{feature="fou"\}/), { timeoutMs: 20_000 });
      const text = await get(metrics, '/metrics');
      assert.match(text, new RegExp(`coil_egress_kernel_feature\\{feature="fou"\\} ${f.fou ? 1 : 0}`));
      const nft = (await ip.exec(['nft', 'list', 'table', 'ip', 'coil-egress'], { netns: e.path })).stdout;
      assert.match(nft, /oifname "eth0" ip saddr != 198\.51\.100\.1 counter packets 0 bytes 0 masquerade/);
      if (!f.fou) {
        const ready = await get(health, '/readyz');
        assert.match(ready, /\[-\]kernel failed: the kernel lacks fou/);
        assert.match(log, /the kernel lacks fou/);
      }
    } finally {
      child.kill('SIGTERM');
      await new Promise((r) => child.on('exit', r));
    }
  });
});
