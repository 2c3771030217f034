/**
 * Coil's egress-only mode (coild `--enable-ipam=false`) on a netns node against a real API server:
 * Debian's ptp + host-local give the pod its network, and `coil` is chained after them as the
 * runtime runs a conflist (the previous plugin's result as `prevResult`). coild must allocate and
 * wire nothing, create no BlockRequest, need no AddressPool to be ready, print prevResult back, and
 * refuse an unchained ADD. A pod naming an Egress gets its tunnels where the kernel has FoU, and a
 * clear failure where it lacks it (this machine). Root only; skipped with the reason otherwise.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, it } from 'node:test';
import { probeFeatures } from '../../src/netlink/features.js';
import { IpRunner } from '../../src/netlink/iproute2/ip-runner.js';
import { readAddrs } from '../../src/netlink/addr.js';
import { TestNetnsSet } from './test-netns.js';
import { Kinds } from '../../src/api/v2/kinds.js';
import { NodeLab, labSkipReason, type LabNode, type LabPod } from './node-lab.js';
import { prerequisite } from '../support/prerequisite.js';

const run = promisify(execFile);
const PTP = '/usr/lib/cni/ptp';
const skip = prerequisite(labSkipReason() ?? (existsSync(PTP) ? undefined : `${PTP} missing (Debian package containernetworking-plugins; hack/setup.sh installs it)`));

describe('coild in egress-only mode (--enable-ipam=false), chained after ptp + host-local', { skip }, () => {
  let lab: NodeLab;
  let node: LabNode;
  let hasFou = false;
  const netns = new TestNetnsSet();
  const ip = new IpRunner();

  async function pod(name: string, annotations: Record<string, string> = {}): Promise<LabPod> {
    const ns = await netns.create('eopod');
    await lab.admin.create(Kinds.Pod, { metadata: { name, namespace: 'app', annotations }, spec: { nodeName: node.name, containers: [{ name: 'c', image: 'pause' }] } });
    return { name, namespace: 'app', ns, containerId: randomBytes(32).toString('hex') };
  }

  /** The first plugin of the conflist: ptp + host-local, run in the node's netns as its host. */
  async function ptp(command: 'ADD' | 'DEL', p: LabPod): Promise<Record<string, unknown>> {
    const conf = JSON.stringify({
      cniVersion: '1.0.0', name: 'k8s-pod-network', type: 'ptp', ipMasq: false, mtu: 1500,
      ipam: { type: 'host-local', dataDir: join(lab.dir, 'host-local'), ranges: [[{ subnet: '10.77.0.0/24' }]], routes: [{ dst: '0.0.0.0/0' }] },
    });
    const child = execFile('ip', ['netns', 'exec', node.ns.name, PTP], {
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin', CNI_COMMAND: command, CNI_CONTAINERID: p.containerId, CNI_NETNS: p.ns.path, CNI_IFNAME: 'eth0', CNI_PATH: '/usr/lib/cni' },
    });
    child.stdin?.end(conf);
    const out = await new Promise<string>((resolve, reject) => {
      let text = '';
      child.stdout?.on('data', (d: Buffer) => (text += d.toString()));
      child.on('close', (code) => (code === 0 ? resolve(text) : reject(new Error(`ptp ${command} exited ${code}: ${text}`))));
    });
    return out.trim() === '' ? {} : (JSON.parse(out) as Record<string, unknown>);
  }

  before(async () => {
    hasFou = (await probeFeatures(ip)).fou;
    lab = await NodeLab.start();
    await lab.createNamespace('app');
    await lab.createNamespace('internet');
    await lab.admin.create(Kinds.Egress, { metadata: { namespace: 'internet', name: 'nat' }, spec: { destinations: ['0.0.0.0/0'], replicas: 1, sessionAffinity: 'ClientIP' } });
    await lab.admin.create(Kinds.Service, { metadata: { namespace: 'internet', name: 'nat' }, spec: { type: 'ClusterIP', ports: [{ name: 'fou', protocol: 'UDP', port: 5555 }] } });
    node = await lab.addNode('node-eo', '10.250.0.7');
    // No AddressPool exists: an IPAM coild would never become ready; this one must.
    await lab.startCoild(node, ['--enable-ipam=false', `--egress-state-dir=${join(lab.dir, 'egress')}`]);
  });
  after(async () => {
    await netns.cleanup();
    await lab?.stop();
  });

  it('is ready and answers STATUS without any AddressPool; /ipam says IPAM is off', async () => {
    assert.equal((await fetch(`http://127.0.0.1:${node.healthPort}/readyz`)).status, 200);
    const ipam = await fetch(`http://127.0.0.1:${node.healthPort}/ipam`);
    assert.equal(ipam.status, 404);
    assert.match(await ipam.text(), /IPAM is disabled/);
    const p = await pod('status-probe');
    const r = await lab.runCoil(node, 'STATUS', p, { cniVersion: '1.1.0' });
    assert.equal(r.code, 0, r.stdout);
  });

  it('a chained ADD prints the previous plugin\'s result back and leaves its wiring alone; DEL twice succeeds', async () => {
    const p = await pod('web');
    const prevResult = await ptp('ADD', p);
    const r = await lab.runCoil(node, 'ADD', p, { netconf: { prevResult } });
    assert.equal(r.code, 0, r.stdout);
    assert.deepEqual(JSON.parse(r.stdout), prevResult);
    const [eth0] = await readAddrs(ip, { netns: p.ns.path, dev: 'eth0' });
    const podIp = ((prevResult.ips as Array<{ address: string }>)[0]!.address).split('/')[0];
    assert.ok(eth0?.addr_info.some((a) => a.local === podIp), 'the address ptp gave is still there');
    assert.deepEqual(await lab.admin.list(Kinds.BlockRequest), [], 'no BlockRequest');
    assert.deepEqual(await lab.admin.list(Kinds.AddressBlock), [], 'no AddressBlock');
    for (let i = 0; i < 2; i++) assert.equal((await lab.runCoil(node, 'DEL', p, { netconf: { prevResult } })).code, 0);
    await ptp('DEL', p);
  });

  it('an unchained ADD (no prevResult) is refused with code 7 and says why', async () => {
    const p = await pod('alone');
    const r = await lab.runCoil(node, 'ADD', p);
    assert.equal(r.code, 1);
    const err = JSON.parse(r.stdout) as { code: number; msg: string };
    assert.equal(err.code, 7);
    assert.match(err.msg, /egress-only mode/);
  });

  it('a pod naming an Egress gets its tunnels where the kernel has FoU, a clear failure where it has not', async () => {
    const p = await pod('client', { 'egress.coil.cybozu.com/internet': 'nat' });
    const prevResult = await ptp('ADD', p);
    try {
      const r = await lab.runCoil(node, 'ADD', p, { netconf: { prevResult } });
      if (hasFou) {
        assert.equal(r.code, 0, r.stdout);
        assert.deepEqual(JSON.parse(r.stdout), prevResult);
      } else {
        assert.equal(r.code, 1);
        assert.match((JSON.parse(r.stdout) as { msg: string }).msg, /failed to set up egress: .*FoU/);
      }
      assert.equal((await lab.runCoil(node, 'DEL', p, { netconf: { prevResult } })).code, 0);
    } finally {
      await ptp('DEL', p);
    }
  });
});
