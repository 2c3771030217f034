/**
 * AddressBlock GC and BlockRequest expiry against the real apiserver: a deleted Node's blocks go
 * at once (watched, not polled); a block of a Node that never existed goes; a Node NotReady past
 * the grace period loses the blocks no pod uses (Coil #204) and keeps the others until their pods
 * are gone; a Ready node keeps its blocks; answered BlockRequests are deleted after their TTL;
 * the GC keeps working across an apiserver restart.
 */
import 'reflect-metadata';
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { AddressBlock } from '../../src/api/v2/addressblock.js';
import { isAnswered } from '../../src/api/v2/blockrequest.js';
import { coilCrds } from '../../src/api/v2/crd.js';
import { FIN_COIL, LABEL_NODE, LABEL_POOL, LABEL_REQUEST } from '../../src/api/v2/keys.js';
import { Kinds } from '../../src/api/v2/kinds.js';
import type { Client } from '../../src/runtime/client.js';
import type { Manager } from '../../src/runtime/manager.js';
import { ControlPlane, eventually } from './control-plane.js';
import { adminClient, createNode, createPool, createRequest, ipamManager, setNodeReady } from './controller-support.js';

const HOUR = 3_600_000;

describe('AddressBlock GC and BlockRequest expiry', () => {
  let cp: ControlPlane;
  let mgr: Manager;
  let client: Client;
  let nextIndex = 0;

  /** A block as the controller makes it (finalizer and all), in pool `gc` (10.20.0.0/16, /27 blocks). */
  const block = async (node: string): Promise<AddressBlock> => {
    const index = nextIndex++;
    return client.create(Kinds.AddressBlock, {
      metadata: { name: `gc-${index}`, labels: { [LABEL_POOL]: 'gc', [LABEL_NODE]: node, [LABEL_REQUEST]: `uid-${index}` }, finalizers: [FIN_COIL] },
      index,
      ipv4: `10.20.${Math.floor(index / 8)}.${(index % 8) * 32}/27`,
    });
  };
  const exists = async (name: string): Promise<boolean> => (await client.get(Kinds.AddressBlock, { name })) !== undefined;
  const pod = async (name: string, node: string, ip: string, extra: { hostNetwork?: boolean } = {}): Promise<void> => {
    await client.create(Kinds.Pod, {
      metadata: { name, namespace: 'default' },
      spec: { nodeName: node, containers: [{ name: 'c', image: 'pause' }], automountServiceAccountToken: false, ...extra },
    });
    await client.patchStatus(Kinds.Pod, { namespace: 'default', name }, { phase: 'Running', podIP: ip, podIPs: [{ ip }] });
  };

  before(async () => {
    cp = await ControlPlane.start({ crds: coilCrds() });
    client = adminClient(cp);
    await cp.request('POST', '/api/v1/namespaces/default/serviceaccounts', { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'default' } });
    await createPool(client, 'gc', { subnets: [{ ipv4: '10.20.0.0/16' }] });
    // The sweep interval stays at an hour: everything below must happen through watches and requeues.
    mgr = await ipamManager(cp, { gc: true, blockRequest: true }, { gcIntervalMs: HOUR, nodeNotReadyReclaimMs: HOUR, reclaimRecheckMs: 300, blockRequestTtlMs: 1_000 });
    await mgr.start();
  });
  after(async () => {
    await mgr?.stop();
    await cp?.stop();
  });

  test('the GC releases a block from the slim cached copy (no managedFields, ownerReferences, creationTimestamp), as coil-controller caches it', async () => {
    await createNode(client, 'slim', { status: 'True', sinceMs: Date.now() });
    const pool = (await client.get(Kinds.AddressPool, { name: 'gc' }))!;
    const index = nextIndex++;
    const made = await client.create(Kinds.AddressBlock, {
      index,
      ipv4: `10.20.${Math.floor(index / 8)}.${(index % 8) * 32}/27`,
      metadata: { name: 'gc-slim', labels: { [LABEL_POOL]: 'gc', [LABEL_NODE]: 'slim', [LABEL_REQUEST]: 'uid-slim' }, finalizers: [FIN_COIL], ownerReferences: [{ apiVersion: 'coil.cybozu.com/v2', kind: 'AddressPool', name: 'gc', uid: pool.metadata!.uid!, controller: true }] },
    });
    assert.ok(made.metadata!.managedFields?.length, 'the apiserver wrote managedFields');
    const cached = await eventually(() => mgr.cache.get(Kinds.AddressBlock, { name: 'gc-slim' }) ?? false);
    assert.deepEqual(Object.keys(cached.metadata!).sort(), ['finalizers', 'labels', 'name', 'resourceVersion', 'uid']);
    assert.equal(cached.metadata!.uid, made.metadata!.uid);
    // Releasing needs the cached uid (delete precondition), resourceVersion (finalizer patch guard) and finalizers.
    await client.delete(Kinds.Node, { name: 'slim' });
    await eventually(async () => !(await exists('gc-slim')), { timeoutMs: 10_000 });
  });

  test("deleting a Node releases its blocks at once (finalizer removed, block deleted), other nodes' stay", async () => {
    await createNode(client, 'gone', { status: 'True', sinceMs: Date.now() });
    await createNode(client, 'stays', { status: 'True', sinceMs: Date.now() });
    const [a, b, c] = [await block('gone'), await block('gone'), await block('stays')];
    await new Promise((r) => setTimeout(r, 300));
    assert.ok(await exists(a.metadata!.name!), 'a block of a live node was released');
    await client.delete(Kinds.Node, { name: 'gone' });
    await eventually(async () => !(await exists(a.metadata!.name!)) && !(await exists(b.metadata!.name!)), { timeoutMs: 10_000 });
    assert.ok(await exists(c.metadata!.name!));
  });

  test('a block of a Node that does not exist is released', async () => {
    const ghost = await block('never-existed');
    await eventually(async () => !(await exists(ghost.metadata!.name!)), { timeoutMs: 10_000 });
  });

  test('a Node NotReady past the grace period loses the blocks no pod uses (Coil #204), keeps the used one until its pod goes', async () => {
    await createNode(client, 'dead', { status: 'Unknown', sinceMs: Date.now() - 2 * HOUR });
    // Pods first: a block is judged as soon as it appears. Indices i → 10.20.⌊i/8⌋.(i mod 8)·32/27.
    const at = (i: number, host: number): string => `10.20.${Math.floor(i / 8)}.${(i % 8) * 32 + host}`;
    await pod('in-used', 'dead', at(nextIndex, 3));
    await pod('host-net', 'dead', at(nextIndex + 1, 0), { hostNetwork: true });
    await pod('finished', 'dead', at(nextIndex + 1, 1));
    await client.patchStatus(Kinds.Pod, { namespace: 'default', name: 'finished' }, { phase: 'Succeeded' });
    const used = await block('dead');
    const hostOnly = await block('dead');
    const free = await block('dead');
    await eventually(async () => !(await exists(free.metadata!.name!)) && !(await exists(hostOnly.metadata!.name!)), { timeoutMs: 10_000 });
    assert.ok(await exists(used.metadata!.name!), 'a block still used by a pod was released');
    // A graceful delete leaves the pod Terminating (no kubelet confirms it): its containers may still run.
    await client.delete(Kinds.Pod, { namespace: 'default', name: 'in-used' });
    await new Promise((r) => setTimeout(r, 700));
    assert.ok(await exists(used.metadata!.name!), 'released while its pod was only Terminating');
    // Operators force-delete the pods of a dead node (#204); then the block goes.
    const res = await cp.request('DELETE', '/api/v1/namespaces/default/pods/in-used?gracePeriodSeconds=0');
    assert.equal(res.status, 200, res.body);
    await eventually(async () => (await client.get(Kinds.Pod, { namespace: 'default', name: 'in-used' })) === undefined);
    await eventually(async () => !(await exists(used.metadata!.name!)), { timeoutMs: 10_000 });
  });

  test('a Node NotReady for less than the grace period, or Ready, keeps its blocks', async () => {
    await createNode(client, 'flaky', { status: 'False', sinceMs: Date.now() - 60_000 });
    await createNode(client, 'healthy', { status: 'True', sinceMs: Date.now() - 2 * HOUR });
    const f = await block('flaky');
    const h = await block('healthy');
    await new Promise((r) => setTimeout(r, 1_000));
    assert.ok(await exists(f.metadata!.name!));
    assert.ok(await exists(h.metadata!.name!));
    // Once the NotReady time passes the grace period, the block goes without any other event.
    await setNodeReady(client, 'flaky', { status: 'False', sinceMs: Date.now() - HOUR + 1_500 });
    await new Promise((r) => setTimeout(r, 500));
    assert.ok(await exists(f.metadata!.name!), 'released before the grace period ended');
    await eventually(async () => !(await exists(f.metadata!.name!)), { timeoutMs: 10_000 });
    assert.ok(await exists(h.metadata!.name!));
  });

  test('answered BlockRequests are deleted after their TTL', async () => {
    await createNode(client, 'asker', { status: 'True', sinceMs: Date.now() });
    const req = await createRequest(client, 'gc', 'asker');
    await eventually(async () => isAnswered((await client.get(Kinds.BlockRequest, { name: req.metadata!.name! }))?.status));
    await eventually(async () => (await client.get(Kinds.BlockRequest, { name: req.metadata!.name! })) === undefined, { timeoutMs: 10_000 });
  });

  test('the GC keeps working across an apiserver restart (errors are retried, never fatal)', async () => {
    await createNode(client, 'late', { status: 'True', sinceMs: Date.now() });
    const b = await block('late');
    await cp.stopApiServer();
    await new Promise((r) => setTimeout(r, 1_000));
    await cp.startApiServer();
    await client.delete(Kinds.Node, { name: 'late' });
    await eventually(async () => !(await exists(b.metadata!.name!)), { timeoutMs: 30_000 });
  });
});
