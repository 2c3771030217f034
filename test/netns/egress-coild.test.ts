/**
 * coild with an egress client pod, on a netns node against a real API server. This machine's
 * kernel has no FoU, so ADD of a pod naming an Egress must fail clearly — message, Warning Event
 * on the pod — and leave nothing behind (no veth, no address), as Coil fails ADD when FoU setup
 * fails; pods naming no Egress are unaffected. Where the kernel has FoU the same ADD must succeed
 * with the client rules in the pod. Root only; skipped with the reason otherwise.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { probeFeatures } from '../../src/netlink/features.js';
import { IpRunner } from '../../src/netlink/iproute2/ip-runner.js';
import { TestNetnsSet } from './test-netns.js';
import { Kinds } from '../../src/api/v2/kinds.js';
import { eventually } from '../envtest/control-plane.js';
import { NodeLab, labSkipReason, type LabNode, type LabPod } from './node-lab.js';
import { kernelHas, kernelLacks, prerequisite } from '../support/prerequisite.js';

describe('coild with an egress client pod', { skip: prerequisite(labSkipReason()) }, () => {
  let lab: NodeLab;
  let node: LabNode;
  let hasFou = false;
  let missing: string[] = [];
  const netns = new TestNetnsSet();

  async function annotatedPod(name: string, annotations: Record<string, string>): Promise<LabPod> {
    const ns = await netns.create('egpod');
    await lab.admin.create(Kinds.Pod, { metadata: { name, namespace: 'app', annotations }, spec: { nodeName: node.name, containers: [{ name: 'c', image: 'pause' }] } });
    return { name, namespace: 'app', ns, containerId: randomBytes(32).toString('hex') };
  }

  before(async () => {
    const f = await probeFeatures(new IpRunner());
    hasFou = f.fou && f.ipip;
    missing = (['fou', 'ipip'] as const).filter((k) => !f[k]);
    lab = await NodeLab.start();
    await lab.createPool('default', { subnets: [{ ipv4: '10.100.0.0/16' }], blockSizeBits: 5 });
    await lab.createNamespace('app');
    await lab.createNamespace('internet');
    await lab.admin.create(Kinds.Egress, { metadata: { namespace: 'internet', name: 'nat' }, spec: { destinations: ['0.0.0.0/0'], replicas: 1, sessionAffinity: 'ClientIP' } });
    await lab.admin.create(Kinds.Service, { metadata: { namespace: 'internet', name: 'nat' }, spec: { type: 'ClusterIP', ports: [{ name: 'fou', protocol: 'UDP', port: 5555 }] } });
    node = await lab.addNode('node-e', '10.250.0.1');
    await lab.startCoild(node, [`--egress-state-dir=${join(lab.dir, 'egress')}`]);
  });
  after(async () => {
    await netns.cleanup();
    await lab?.stop();
  });

  it('coild reports the kernel features it probed as coil_coild_kernel_feature', async () => {
    const text = await (await fetch(`http://127.0.0.1:${node.metricsPort}/metrics`)).text();
    assert.match(text, new RegExp(`coil_coild_kernel_feature\\{feature="fou"\\} ${hasFou ? 1 : 0}`));
  });

  it('a pod naming no Egress is set up as usual', async () => {
    const pod = await annotatedPod('plain', {});
    const r = await lab.runCoil(node, 'ADD', pod);
    assert.equal(r.code, 0, r.stdout);
  });

  it('ADD of a pod naming an Egress fails clearly without FoU, with an Event, leaving nothing behind', async (t) => {
    if (hasFou) return t.skip(kernelHas(['fou', 'ipip']));
    const pod = await annotatedPod('client', { 'egress.coil.cybozu.com/internet': 'nat' });
    const r = await lab.runCoil(node, 'ADD', pod);
    assert.notEqual(r.code, 0);
    assert.match(String(r.json?.msg), /egress NAT needs FoU tunnels, but this node's kernel lacks fou/);
    const snap = await lab.snapshot(node);
    assert.ok(!snap.allocations.some((a) => a.containerId === pod.containerId), 'the address was freed');
    await eventually(async () => {
      const hosts = await lab.hostPods(node);
      assert.ok(!hosts.some((h) => h.containerId === pod.containerId), 'the veth was removed');
    }, { timeoutMs: 10_000 });
    await eventually(async () => {
      const res = await lab.cp.request('GET', '/api/v1/namespaces/app/events');
      const events = (JSON.parse(res.body) as { items: Array<{ reason: string; involvedObject: { name: string }; type: string }> }).items;
      assert.ok(events.some((e) => e.reason === 'EgressUnavailable' && e.involvedObject.name === 'client' && e.type === 'Warning'), JSON.stringify(events.map((e) => e.reason)));
    }, { timeoutMs: 10_000 });
  });

  it('with FoU, ADD sets up the client rules and the tunnel to the ClusterIP', async (t) => {
    if (!hasFou) return t.skip(kernelLacks(missing, 'test/netns/egress-fou-vm.test.ts'));
    const pod = await annotatedPod('client-ok', { 'egress.coil.cybozu.com/internet': 'nat' });
    const r = await lab.runCoil(node, 'ADD', pod);
    assert.equal(r.code, 0, r.stdout);
    const rules = await lab.ipJson<Array<{ priority: number }>>(pod.ns, ['-4', 'rule', 'show']);
    // 1700: the tunnel link's flow-pin slot (src/node-agent/egress/flow-pins.ts).
    assert.deepEqual(rules.map((x) => x.priority), [0, 1700, 1800, 1900, 2000, 2001, 2002, 2100, 32766, 32767]);
  });
});
