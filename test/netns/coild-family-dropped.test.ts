/**
 * Issue 33 on netns nodes with real veths, the real `coil` executable, coild and the IPAM
 * controller: dual-stack pods run on node-a; coild stops, the blocks and the pool are deleted (the
 * README's clean-up) and the pool is created again IPv4-only (its first install example); coild
 * starts again. Before, recovery registered each pod into its claimed-back IPv4-only block and
 * dropped the IPv6 half: no route for it in table 119 (unreachable from other nodes), none in
 * `/ipam`'s orphans. Now the allocation keeps both halves, and the IPv6 address stays exported
 * alone (`<address>/128 dev lo proto 30`) and listed in `orphans` (`no-pool`) while its Pod runs;
 * the pod's DEL takes the route (docs/ipam-recovery.md#a-family-the-pool-no-longer-has).
 * Root only; skipped with the reason otherwise.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Kinds } from '../../src/api/v2/kinds.js';
import { eventually } from '../envtest/control-plane.js';
import { NodeLab, labLogsOnFailure, labSkipReason, type LabNode, type LabPod } from './node-lab.js';
import { prerequisite } from '../support/prerequisite.js';

interface ResultIp { address: string }
interface Route { dst: string; dev?: string; protocol?: string }

describe('coild after the pool was re-created without a family its running pods use', { skip: prerequisite(labSkipReason()) }, () => {
  let lab: NodeLab;
  let a: LabNode;
  const printLogsIfFailed = labLogsOnFailure();
  const pods = new Map<string, { pod: LabPod; ips: string[] }>();

  before(async () => {
    lab = await NodeLab.start();
    await lab.createPool('default', { subnets: [{ ipv4: '10.100.0.0/24', ipv6: 'fd00:100::/120' }], blockSizeBits: 5 });
    await lab.createNamespace('lab');
    a = await lab.addNode('node-a', '10.250.0.1');
    await lab.startCoild(a, ['--low-water-mark=0']);
  });
  after(async () => {
    await printLogsIfFailed(lab);
    await lab?.stop();
  });

  /** ADD through the coil executable, then the Pod status kubelet would write (every address). */
  const add = async (node: LabNode, name: string): Promise<string[]> => {
    const pod = await lab.createPod(node, 'lab', name);
    const r = await lab.runCoil(node, 'ADD', pod);
    assert.equal(r.code, 0, r.stdout);
    const ips = (r.json!.ips as ResultIp[]).map((x) => x.address.split('/')[0]!);
    await lab.admin.patchStatus(Kinds.Pod, { namespace: 'lab', name }, { phase: 'Running', podIP: ips[0], podIPs: ips.map((ip) => ({ ip })) });
    pods.set(name, { pod, ips });
    return ips;
  };
  /** Table 119 of `node`, IPv6: the routes BIRD advertises. */
  const t119v6 = (node: LabNode) => lab.ipJson<Route[]>(node.ns, ['-6', 'route', 'show', 'table', '119']);

  it('an IPv6 address the IPv4-only pool lacks stays in the allocation, in table 119 and in /ipam orphans while its Pod runs', async () => {
    const [v4a1, v6a1] = await add(a, 'a1');
    const [v4a2, v6a2] = await add(a, 'a2');
    assert.ok(v6a1?.includes(':') && v6a2?.includes(':'), `dual-stack pods: ${v4a1} ${v6a1}, ${v4a2} ${v6a2}`);

    await lab.stopCoild(a, 'SIGTERM');
    await lab.deleteBlocksAndPool('default');
    await lab.createPool('default', { subnets: [{ ipv4: '10.100.0.0/24' }], blockSizeBits: 5 });
    await lab.startCoild(a, ['--low-water-mark=0']);

    // The IPv4 block is claimed back; each IPv6 half stays the pod's, exported and shown.
    await eventually(async () => (await lab.snapshot(a)).allocations.length === 2 && (await lab.snapshot(a)).orphans.length === 2, { timeoutMs: 30_000 });
    const snap = await lab.snapshot(a);
    assert.deepEqual(snap.allocations.map((x) => [x.ipv4, x.ipv6]).sort(), [[v4a1, v6a1], [v4a2, v6a2]].sort(), 'both halves kept');
    assert.deepEqual(snap.orphans.map((o) => [o.ipv4, o.ipv6, o.state, o.podName, o.registeredIn]).sort(),
      [[undefined, v6a1, 'no-pool', 'a1', snap.allocations[0]!.block], [undefined, v6a2, 'no-pool', 'a2', snap.allocations[0]!.block]].sort());
    assert.match(snap.orphans[0]!.message!, /pool default does not hold .*exported alone while the Pod runs/);
    await eventually(async () => (await t119v6(a)).length === 2, { timeoutMs: 10_000 });
    assert.deepEqual((await t119v6(a)).map((r) => [r.dst, r.dev, r.protocol]).sort(), [[`${v6a1}`, 'lo', '30'], [`${v6a2}`, 'lo', '30']].sort(),
      'each IPv6 address alone, routed as the blocks are');

    // The pod goes: its route goes.
    const a1 = pods.get('a1')!;
    assert.equal((await lab.runCoil(a, 'DEL', a1.pod)).code, 0);
    await eventually(async () => (await t119v6(a)).map((r) => r.dst).join() === v6a2, { timeoutMs: 10_000 });
    assert.deepEqual((await lab.snapshot(a)).orphans.map((o) => o.ipv6), [v6a2]);
  });
});
