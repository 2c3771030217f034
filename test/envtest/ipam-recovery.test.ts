/**
 * The controller after AddressBlocks were lost while their Pods still run (issue 25: coil
 * uninstalled, `kubectl delete addressblocks --all`, coil installed again; or an etcd restored from
 * an older backup), against the real apiserver (docs/ipam-recovery.md):
 * - an ordinary BlockRequest of another node never gets a block holding a live Pod's address —
 *   the allocator skips it (host-network and finished Pods do not count);
 * - the node whose Pods hold the addresses claims the block back (annotation
 *   `coil.cybozu.com/claim-index`) and gets `<pool>-<index>` for itself; a claim of another node,
 *   or one no Pod proves, is refused;
 * - deleting a block live Pods use waits on its finalizer with an Event naming them.
 */
import 'reflect-metadata';
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { V1Pod } from '@kubernetes/client-node';
import { blockRequestResult, isAnswered, type BlockRequest } from '../../src/api/v2/blockrequest.js';
import { coilCrds } from '../../src/api/v2/crd.js';
import { ANN_CLAIM_INDEX, LABEL_NODE } from '../../src/api/v2/keys.js';
import { Kinds } from '../../src/api/v2/kinds.js';
import type { Client } from '../../src/runtime/client.js';
import type { Manager } from '../../src/runtime/manager.js';
import { ControlPlane, eventually } from './control-plane.js';
import { adminClient, createNode, createPool, createRequest, ipamManager } from './controller-support.js';

/** A Pod on `node` whose status (as kubelet would write it) holds `ips`. */
async function runningPod(client: Client, name: string, node: string, ips: string[], o: { hostNetwork?: boolean; phase?: string } = {}): Promise<V1Pod> {
  await client.create(Kinds.Pod, {
    metadata: { name, namespace: 'default' },
    spec: { nodeName: node, containers: [{ name: 'c', image: 'example.invalid/x' }], ...(o.hostNetwork && { hostNetwork: true }) },
  });
  return client.patchStatus(Kinds.Pod, { namespace: 'default', name }, { phase: o.phase ?? 'Running', podIP: ips[0], podIPs: ips.map((ip) => ({ ip })) });
}

async function answered(client: Client, name: string): Promise<BlockRequest> {
  return eventually(async () => {
    const br = await client.get(Kinds.BlockRequest, { name });
    return br && isAnswered(br.status) ? br : false;
  });
}

function claim(client: Client, pool: string, node: string, index: number, name: string): Promise<BlockRequest> {
  return client.create(Kinds.BlockRequest, {
    metadata: { name, annotations: { [ANN_CLAIM_INDEX]: String(index) } },
    spec: { nodeName: node, poolName: pool },
  });
}

async function events(cp: ControlPlane, object: string): Promise<{ type: string; reason: string; message: string }[]> {
  const res = await cp.request('GET', `/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3D${object}`);
  return (JSON.parse(res.body) as { items: { type: string; reason: string; message: string }[] }).items;
}

describe('IPAM recovery in the controller: blocks lost while their Pods run', () => {
  let cp: ControlPlane;
  let mgr: Manager;
  let client: Client;

  before(async () => {
    cp = await ControlPlane.start({ crds: coilCrds() });
    client = adminClient(cp);
    for (const n of ['n1', 'n2']) await createNode(client, n);
    await createPool(client, 'p', { subnets: [{ ipv4: '10.5.0.0/24' }] });
    // n1's pods run with addresses of block 0 (10.5.0.0/27); its AddressBlock is gone.
    await runningPod(client, 'web-a', 'n1', ['10.5.0.1']);
    await runningPod(client, 'web-b', 'n1', ['10.5.0.2']);
    // Not holders: a host-network pod showing an address of block 1, a finished pod of block 2.
    await runningPod(client, 'host', 'n2', ['10.5.0.33'], { hostNetwork: true });
    await runningPod(client, 'done', 'n2', ['10.5.0.65'], { phase: 'Succeeded' });
    mgr = await ipamManager(cp, { addressPool: true, blockRequest: true, gc: true });
    await mgr.start();
  });
  after(async () => {
    await mgr?.stop();
    await cp?.stop();
  });

  test('another node\'s request skips the block whose addresses live Pods of n1 hold', async () => {
    const br = await answered(client, (await createRequest(client, 'p', 'n2', 'req-p-n2-1')).metadata!.name!);
    assert.deepEqual(blockRequestResult(br.status), { kind: 'allocated', addressBlockName: 'p-1' }, 'p-0 holds web-a and web-b; host-network pods do not count');
    const br2 = await answered(client, (await createRequest(client, 'p', 'n2', 'req-p-n2-2')).metadata!.name!);
    assert.deepEqual(blockRequestResult(br2.status), { kind: 'allocated', addressBlockName: 'p-2' }, 'a Succeeded pod holds nothing');
  });

  test('n2 cannot claim block 0; n1, whose Pods prove it, gets p-0 back', async () => {
    const refused = await answered(client, (await claim(client, 'p', 'n2', 0, 'claim-p-n2')).metadata!.name!);
    const r = blockRequestResult(refused.status);
    assert.equal(r.kind, 'failed');
    assert.equal((r as { reason: string }).reason, 'claim refused');
    assert.match((r as { message: string }).message, /default\/web-a \(10\.5\.0\.1\) on n1/);
    assert.equal(await client.get(Kinds.AddressBlock, { name: 'p-0' }), undefined);

    const granted = await answered(client, (await claim(client, 'p', 'n1', 0, 'claim-p-n1')).metadata!.name!);
    assert.deepEqual(blockRequestResult(granted.status), { kind: 'allocated', addressBlockName: 'p-0' });
    const b = (await client.get(Kinds.AddressBlock, { name: 'p-0' }))!;
    assert.deepEqual([b.index, b.ipv4, b.metadata?.labels?.[LABEL_NODE]], [0, '10.5.0.0/27', 'n1']);
    await eventually(async () => (await events(cp, 'claim-p-n1')).some((e) => e.reason === 'BlockClaimed' && /web-a/.test(e.message)));
    // Asked again (coild's next pass before it saw the block): answered with the same block.
    const again = await answered(client, (await claim(client, 'p', 'n1', 0, 'claim-p-n1-again')).metadata!.name!);
    assert.deepEqual(blockRequestResult(again.status), { kind: 'allocated', addressBlockName: 'p-0' });
  });

  test('a claim no Pod of the node proves is refused', async () => {
    const br = await answered(client, (await claim(client, 'p', 'n1', 5, 'claim-p-n1-5')).metadata!.name!);
    const r = blockRequestResult(br.status);
    assert.equal(r.kind, 'failed');
    assert.match((r as { message: string }).message, /no live Pod of node n1 holds an address of block p-5/);
    assert.equal(await client.get(Kinds.AddressBlock, { name: 'p-5' }), undefined);
  });

  test('deleting a block live Pods use waits on its finalizer, with an Event naming them', async () => {
    await client.delete(Kinds.AddressBlock, { name: 'p-0' });
    await eventually(async () => (await events(cp, 'p-0')).some((e) => e.type === 'Warning' && e.reason === 'DeletionWaitsForPods' && /default\/web-a \(10\.5\.0\.1\) on n1/.test(e.message)));
    const b = await client.get(Kinds.AddressBlock, { name: 'p-0' });
    assert.ok(b?.metadata?.deletionTimestamp, 'still there, on its finalizer');
  });
});
