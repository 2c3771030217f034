/**
 * Issue 25's scenario on netns nodes with real veths, the real `coil` executable, coild and the
 * IPAM controller: pods run on two nodes; coil is "uninstalled" (coild's DaemonSet deleted, coild
 * stopped — it tells an uninstall by its owning DaemonSet), every AddressBlock and the pool are
 * deleted as the README's clean-up does, coil is "installed" again (a new DaemonSet, the pool
 * again, coild started) and more pods start on both nodes. Before, the uninstall flushed tables
 * 116/119 and the rule under the running pods, the reinstall's recovery deleted their route-less
 * veths ("removed":2) and the controller handed their block to the other node: no network and
 * duplicate addresses. Now the pods keep their network throughout, their blocks come back to
 * their node, and no address is given twice (docs/ipam-recovery.md).
 * Root only; skipped with the reason otherwise.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { V1DaemonSet } from '@kubernetes/client-node';
import { Kinds } from '../../src/api/v2/kinds.js';
import { eventually } from '../envtest/control-plane.js';
import { NodeLab, labLogsOnFailure, labSkipReason, type LabNode, type LabPod } from './node-lab.js';
import { prerequisite } from '../support/prerequisite.js';

interface ResultIp { address: string }
interface Route { dst: string }

const SYSTEM = 'coil-system';
const POOL = { subnets: [{ ipv4: '10.100.0.0/24' }], blockSizeBits: 5 };

describe('uninstall, clean-up and reinstall of coil while pods run', { skip: prerequisite(labSkipReason()) }, () => {
  let lab: NodeLab;
  let a: LabNode;
  let b: LabNode;
  const printLogsIfFailed = labLogsOnFailure();
  const pods = new Map<string, { pod: LabPod; ip: string; node: LabNode }>();
  let generation = 0;

  /** coild's DaemonSet and, per node, its Pod owned by it (what the chart and kubelet make). */
  const install = async (): Promise<void> => {
    const ds = await lab.admin.create(Kinds.DaemonSet, {
      metadata: { name: 'coild', namespace: SYSTEM },
      spec: { selector: { matchLabels: { app: 'coild' } }, template: { metadata: { labels: { app: 'coild' } }, spec: { containers: [{ name: 'coild', image: 'coil' }] } } },
    } as V1DaemonSet);
    generation++;
    for (const node of [a, b]) {
      const name = `coild-${node.name}-${generation}`;
      await lab.admin.create(Kinds.Pod, {
        metadata: { name, namespace: SYSTEM, labels: { app: 'coild' }, ownerReferences: [{ apiVersion: 'apps/v1', kind: 'DaemonSet', name: 'coild', uid: ds.metadata!.uid!, controller: true }] },
        spec: { nodeName: node.name, hostNetwork: true, containers: [{ name: 'coild', image: 'coil' }] },
      });
      await lab.startCoild(node, ['--low-water-mark=0'], { COIL_POD_NAMESPACE: SYSTEM, COIL_POD_NAME: name });
    }
  };

  before(async () => {
    lab = await NodeLab.start();
    await lab.createPool('default', POOL);
    await lab.createNamespace('lab');
    await lab.createNamespace(SYSTEM);
    a = await lab.addNode('node-a', '10.250.0.1');
    b = await lab.addNode('node-b', '10.250.0.2');
    await install();
  });
  after(async () => {
    await printLogsIfFailed(lab);
    await lab?.stop();
  });

  /** ADD through the coil executable, then the Pod status kubelet would write. */
  const add = async (node: LabNode, name: string): Promise<string> => {
    const pod = await lab.createPod(node, 'lab', name);
    const r = await lab.runCoil(node, 'ADD', pod);
    assert.equal(r.code, 0, r.stdout);
    const ip = (r.json!.ips as ResultIp[])[0]!.address.split('/')[0]!;
    await lab.admin.patchStatus(Kinds.Pod, { namespace: 'lab', name }, { phase: 'Running', podIP: ip, podIPs: [{ ip }] });
    pods.set(name, { pod, ip, node });
    return ip;
  };
  const ping = (from: string, to: string) => lab.ip.exec(['ping', '-c1', '-w5', pods.get(to)!.ip], { netns: pods.get(from)!.pod.ns.path });
  const t116 = (node: LabNode) => lab.ipJson<Route[]>(node.ns, ['-4', 'route', 'show', 'table', '116']);

  it('running pods keep their network and their addresses; no address is given twice', async () => {
    await add(a, 'a1');
    await add(a, 'a2');
    await add(b, 'b1');
    await ping('a1', 'a2');

    // helm uninstall: the DaemonSet goes, coild stops and sees it gone.
    await lab.admin.delete(Kinds.DaemonSet, { namespace: SYSTEM, name: 'coild' });
    await lab.stopCoild(a, 'SIGTERM');
    await lab.stopCoild(b, 'SIGTERM');
    assert.deepEqual((await t116(a)).map((r) => r.dst).sort(), [pods.get('a1')!.ip, pods.get('a2')!.ip].sort(), 'node-a keeps its pods\' routes');
    await ping('a1', 'a2');
    // The post-delete hook releases the finalizers; the README's clean-up deletes blocks and pools.
    await lab.deleteBlocksAndPool('default');

    // Installed again, and new pods start on both nodes.
    await lab.createPool('default', POOL);
    await install();
    await eventually(async () => {
      const [sa, sb] = [await lab.snapshot(a), await lab.snapshot(b)];
      return sa.allocations.length === 2 && sb.allocations.length === 1 && sa.orphans.length === 0 && sb.orphans.length === 0;
    }, { timeoutMs: 30_000 });
    for (let i = 2; i <= 4; i++) await add(b, `b${i}`);
    for (let i = 3; i <= 4; i++) await add(a, `a${i}`);
    const ips = [...pods.values()].map((p) => p.ip);
    assert.equal(new Set(ips).size, ips.length, `no address twice: ${JSON.stringify(Object.fromEntries([...pods].map(([n, p]) => [n, p.ip])))}`);
    assert.deepEqual((await lab.hostPods(a)).length, 4);
    await ping('a1', 'a2');
    await ping('a3', 'a1');
  });
});
