/**
 * Issue 25 on netns nodes with real veths, the real `coil` executable, coild and the IPAM
 * controller: node-a's pods run while its AddressBlocks are deleted (finalizer removed, as after
 * an uninstall's release) and coild is restarted. Another node asking for a block meanwhile does
 * not get theirs; the restarted coild keeps every pod's veth and route, claims the block back and
 * registers the addresses into it, so its next pod gets a fresh address (docs/ipam-recovery.md).
 * Root only; skipped with the reason otherwise.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { FIN_COIL } from '../../src/api/v2/keys.js';
import { Kinds } from '../../src/api/v2/kinds.js';
import { eventually } from '../envtest/control-plane.js';
import { NodeLab, labLogsOnFailure, labSkipReason, type LabNode, type LabPod } from './node-lab.js';
import { prerequisite } from '../support/prerequisite.js';

interface ResultIp { address: string }

describe('coild after its AddressBlocks were lost while its pods run', { skip: prerequisite(labSkipReason()) }, () => {
  let lab: NodeLab;
  let a: LabNode;
  let b: LabNode;
  const printLogsIfFailed = labLogsOnFailure();
  const pods: { pod: LabPod; ip: string }[] = [];

  before(async () => {
    lab = await NodeLab.start();
    await lab.createPool('default', { subnets: [{ ipv4: '10.100.0.0/24' }], blockSizeBits: 5 });
    await lab.createNamespace('lab');
    a = await lab.addNode('node-a', '10.250.0.1');
    b = await lab.addNode('node-b', '10.250.0.2');
    await lab.startCoild(a, ['--low-water-mark=0']);
    await lab.startCoild(b, ['--low-water-mark=0']);
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
    pods.push({ pod, ip });
    return ip;
  };

  it('node-a\'s pods keep their network and addresses; node-b never gets their block', async () => {
    const ipA1 = await add(a, 'a1');
    const ipA2 = await add(a, 'a2');
    assert.deepEqual(await lab.blocksOf(a), ['default-0']);

    // The blocks go while the pods run: coild stopped, finalizers released, blocks deleted.
    await lab.stopCoild(a, 'SIGTERM');
    for (const blk of await lab.admin.list(Kinds.AddressBlock, { labelSelector: 'coil.cybozu.com/node=node-a' })) {
      await lab.admin.removeFinalizer(Kinds.AddressBlock, blk, FIN_COIL);
      await lab.admin.delete(Kinds.AddressBlock, { name: blk.metadata!.name! });
    }
    await eventually(async () => (await lab.blocksOf(a)).length === 0);

    // node-b asks for a block meanwhile: not default-0, which holds a1's and a2's addresses.
    const ipB = await add(b, 'b1');
    assert.deepEqual(await lab.blocksOf(b), ['default-1']);
    assert.ok(![ipA1, ipA2].includes(ipB), `node-b's pod got ${ipB}`);

    // coild on node-a again: the veths and routes stay, the block comes back, the addresses are registered.
    await lab.startCoild(a, ['--low-water-mark=0']);
    assert.deepEqual((await lab.hostPods(a)).map((p) => p.ipv4).sort(), [ipA1, ipA2].sort(), 'every pod keeps its veth and route');
    await eventually(async () => (await lab.blocksOf(a)).includes('default-0'), { timeoutMs: 20_000 });
    const snap = await eventually(async () => {
      const s = await lab.snapshot(a);
      return s.allocations.length === 2 && s.orphans.length === 0 ? s : false;
    }, { timeoutMs: 20_000 });
    assert.deepEqual(snap.allocations.map((x) => x.ipv4).sort(), [ipA1, ipA2].sort());
    const ipA3 = await add(a, 'a3');
    assert.ok(![ipA1, ipA2, ipB].includes(ipA3), `node-a's next pod got ${ipA3}`);
    assert.deepEqual((await lab.hostPods(a)).length, 3);
  });
});
