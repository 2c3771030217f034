/**
 * The BlockRequest reconciler against the real apiserver: allocation of the lowest free block with
 * Coil's labels, finalizer and ownerReference; a burst of 100 requests from 50 nodes; an exhausted
 * pool; a block created before a crash is reused; a name collision (Coil #152) moves on; a pool
 * being deleted allocates nothing; a controller restart in the middle of a burst leaves every
 * request answered exactly once with no duplicate or leaked block; a request its node consumed and
 * deleted before the answer was written is done, not a failed reconcile.
 */
import 'reflect-metadata';
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { AddressBlock } from '../../src/api/v2/addressblock.js';
import { blockRequestResult, isAnswered, type BlockRequest } from '../../src/api/v2/blockrequest.js';
import { coilCrds } from '../../src/api/v2/crd.js';
import { FIN_COIL, LABEL_NODE, LABEL_POOL, LABEL_REQUEST } from '../../src/api/v2/keys.js';
import { checkNoOverlap } from '../../src/ipam/invariants.js';
import { Kinds } from '../../src/api/v2/kinds.js';
import { ApiTransport } from '../../src/runtime/api-transport.js';
import type { Client } from '../../src/runtime/client.js';
import { Informer } from '../../src/runtime/informer.js';
import { silentLogger } from '../../src/runtime/logging.js';
import type { Manager } from '../../src/runtime/manager.js';
import { ControlPlane, eventually } from './control-plane.js';
import { recordingLogger } from './runtime-support.js';
import { adminClient, createPool, createRequest, ipamManager } from './controller-support.js';

/** Records every answer each request receives, to prove none is answered twice. */
class AnswerLog {
  readonly answers = new Map<string, string[]>();
  private readonly informer: Informer<BlockRequest>;

  constructor(cp: ControlPlane) {
    this.informer = new Informer(Kinds.BlockRequest, new ApiTransport(cp.kubeConfig), silentLogger());
    this.informer.onEvent((e) => {
      if (e.type === 'DELETED' || !isAnswered(e.object.status) || (e.old && isAnswered(e.old.status))) return;
      const r = blockRequestResult(e.object.status);
      const list = this.answers.get(e.object.metadata!.name!) ?? [];
      list.push(r.kind === 'allocated' ? r.addressBlockName : `failed:${r.kind === 'failed' ? r.reason : ''}`);
      this.answers.set(e.object.metadata!.name!, list);
    });
    this.informer.start();
  }

  stop(): Promise<void> {
    return this.informer.stop();
  }
}

async function blocksOf(client: Client, pool: string): Promise<AddressBlock[]> {
  return client.list(Kinds.AddressBlock, { labelSelector: `${LABEL_POOL}=${pool}` });
}

async function answered(client: Client, name: string): Promise<BlockRequest> {
  return eventually(async () => {
    const br = await client.get(Kinds.BlockRequest, { name });
    return br && isAnswered(br.status) ? br : false;
  });
}

describe('BlockRequest reconciler', () => {
  let cp: ControlPlane;
  let mgr: Manager;
  let client: Client;
  let log: AnswerLog;

  before(async () => {
    cp = await ControlPlane.start({ crds: coilCrds() });
    client = adminClient(cp);
    log = new AnswerLog(cp);
    mgr = await ipamManager(cp, { addressPool: true, blockRequest: true });
    await mgr.start();
  });
  after(async () => {
    await mgr?.stop();
    await log?.stop();
    await cp?.stop();
  });

  test('answers Complete with the lowest free block: labels, finalizer, controller ownerReference to the pool', async () => {
    const pool = await createPool(client, 'one', { subnets: [{ ipv4: '10.1.0.0/24', ipv6: 'fd01::/120' }] });
    const req = await createRequest(client, 'one', 'n1');
    const br = await answered(client, req.metadata!.name!);
    assert.deepEqual(blockRequestResult(br.status), { kind: 'allocated', addressBlockName: 'one-0' });
    const c = br.status!.conditions!.find((x) => x.type === 'Complete')!;
    assert.deepEqual([c.status, c.reason, c.message], ['True', 'allocated', 'allocated a block one-0']);
    const b = (await client.get(Kinds.AddressBlock, { name: 'one-0' }))!;
    assert.deepEqual([b.index, b.ipv4, b.ipv6], [0, '10.1.0.0/27', 'fd01::/123']);
    assert.deepEqual(b.metadata?.labels, { [LABEL_POOL]: 'one', [LABEL_NODE]: 'n1', [LABEL_REQUEST]: req.metadata!.uid! });
    assert.deepEqual(b.metadata?.finalizers, [FIN_COIL]);
    const ref = b.metadata?.ownerReferences?.[0];
    assert.deepEqual([ref?.kind, ref?.name, ref?.uid, ref?.controller, ref?.blockOwnerDeletion], ['AddressPool', 'one', pool.metadata!.uid, true, true]);
  });

  test('100 requests from 50 nodes at once get 100 distinct, non-overlapping blocks, the lowest 100 indices', async () => {
    await createPool(client, 'burst', { subnets: [{ ipv4: '10.100.0.0/20', ipv6: 'fd20::/116' }] });
    const names = Array.from({ length: 100 }, (_, i) => `req-burst-node${i % 50}-${i}`);
    await Promise.all(names.map((n, i) => createRequest(client, 'burst', `node${i % 50}`, n)));
    const reqs = await eventually(async () => {
      const all = (await client.list(Kinds.BlockRequest)).filter((r) => names.includes(r.metadata!.name!));
      return all.length === 100 && all.every((r) => isAnswered(r.status)) ? all : false;
    }, { timeoutMs: 60_000 });
    const blocks = await blocksOf(client, 'burst');
    assert.equal(blocks.length, 100);
    assert.deepEqual(blocks.map((b) => b.index).sort((a, b) => a - b), Array.from({ length: 100 }, (_, i) => i));
    assert.deepEqual(checkNoOverlap(blocks.flatMap((b) => [{ label: b.metadata!.name!, cidr: b.ipv4! }, { label: b.metadata!.name!, cidr: b.ipv6! }])), []);
    const byName = new Map(blocks.map((b) => [b.metadata!.name!, b]));
    for (const r of reqs) {
      const res = blockRequestResult(r.status);
      assert.equal(res.kind, 'allocated');
      const b = byName.get((res as { addressBlockName: string }).addressBlockName)!;
      assert.equal(b.metadata?.labels?.[LABEL_REQUEST], r.metadata!.uid, `${r.metadata!.name} got another request's block`);
      assert.equal(b.metadata?.labels?.[LABEL_NODE], r.spec.nodeName);
    }
    await eventually(() => names.every((n) => log.answers.get(n)?.length === 1));
  });

  test('an exhausted pool answers Complete + Failed "out of blocks" and records a Warning Event', async () => {
    await createPool(client, 'tiny', { subnets: [{ ipv4: '10.2.0.0/26' }] });
    await answered(client, (await createRequest(client, 'tiny', 'a')).metadata!.name!);
    await answered(client, (await createRequest(client, 'tiny', 'b')).metadata!.name!);
    const br = await answered(client, (await createRequest(client, 'tiny', 'c')).metadata!.name!);
    assert.deepEqual(blockRequestResult(br.status), { kind: 'failed', reason: 'out of blocks', message: 'pool tiny does not have free blocks' });
    const complete = br.status!.conditions!.find((x) => x.type === 'Complete')!;
    assert.deepEqual([complete.status, complete.reason], ['True', 'completed with failure']);
    assert.equal((await blocksOf(client, 'tiny')).length, 2);
    await eventually(async () => {
      const res = await cp.request('GET', '/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3Dreq-tiny-c');
      const items = (JSON.parse(res.body) as { items: { type: string; reason: string; message: string }[] }).items;
      return items.some((e) => e.type === 'Warning' && e.reason === 'OutOfBlocks' && e.message === 'pool tiny does not have free blocks');
    });
  });

  test('a block name taken by another request (Coil #152) is skipped, not failed', async () => {
    await createPool(client, 'clash', { subnets: [{ ipv4: '10.3.0.0/24' }] });
    // Unlabelled, so the controller's per-pool state does not know index 0 is taken.
    await client.create(Kinds.AddressBlock, { metadata: { name: 'clash-0', labels: { [LABEL_REQUEST]: 'someone-else' } }, index: 0, ipv4: '10.3.0.0/27' });
    const br = await answered(client, (await createRequest(client, 'clash', 'n1')).metadata!.name!);
    assert.deepEqual(blockRequestResult(br.status), { kind: 'allocated', addressBlockName: 'clash-1' });
  });

  test('a pool being deleted allocates nothing', async () => {
    await createPool(client, 'going', { subnets: [{ ipv4: '10.4.0.0/24' }] });
    await eventually(async () => (await client.get(Kinds.AddressPool, { name: 'going' }))?.metadata?.finalizers?.includes(FIN_COIL) === true);
    await client.create(Kinds.AddressBlock, { metadata: { name: 'going-hold', labels: { [LABEL_POOL]: 'going' }, finalizers: ['test/hold'] }, index: 5, ipv4: '10.4.0.160/27' });
    await client.delete(Kinds.AddressPool, { name: 'going' });
    await eventually(() => mgr.cache.get(Kinds.AddressPool, { name: 'going' })?.metadata?.deletionTimestamp !== undefined);
    const br = await answered(client, (await createRequest(client, 'going', 'n1')).metadata!.name!);
    assert.deepEqual(blockRequestResult(br.status), { kind: 'failed', reason: 'out of blocks', message: 'pool going is being deleted' });
    assert.deepEqual((await blocksOf(client, 'going')).map((b) => b.metadata!.name), ['going-hold']);
  });

  test('a block created for a request before a crash is reused, not doubled (Coil #198, #271)', async () => {
    await mgr.stop({ releaseLease: false });
    await createPool(client, 'crash', { subnets: [{ ipv4: '10.5.0.0/24' }] });
    const req = await createRequest(client, 'crash', 'n1');
    // What a controller that died between the create and the status write leaves behind.
    await client.create(Kinds.AddressBlock, {
      metadata: { name: 'crash-0', labels: { [LABEL_POOL]: 'crash', [LABEL_NODE]: 'n1', [LABEL_REQUEST]: req.metadata!.uid! }, finalizers: [FIN_COIL] },
      index: 0,
      ipv4: '10.5.0.0/27',
    });
    mgr = await ipamManager(cp, { addressPool: true, blockRequest: true }, {}, 'ipam-test-2');
    await mgr.start();
    const br = await answered(client, req.metadata!.name!);
    assert.deepEqual(blockRequestResult(br.status), { kind: 'allocated', addressBlockName: 'crash-0' });
    assert.equal((await blocksOf(client, 'crash')).length, 1);
  });

  test('a controller restart in the middle of a burst: every request answered once, blocks = answered requests', async (t) => {
    await createPool(client, 'restart', { subnets: [{ ipv4: '10.6.0.0/20' }] });
    const names = Array.from({ length: 80 }, (_, i) => `req-restart-${i}`);
    const creating = Promise.all(names.map((n, i) => createRequest(client, 'restart', `node${i % 40}`, n)));
    // Stop once some, not all, are answered (or right away if the burst is fast), then start afresh.
    await eventually(() => names.some((n) => log.answers.has(n)), { intervalMs: 5 });
    await mgr.stop({ releaseLease: false });
    const atStop = names.filter((n) => log.answers.has(n)).length;
    t.diagnostic(`${atStop} of 80 answered when the first controller stopped`);
    await creating;
    mgr = await ipamManager(cp, { addressPool: true, blockRequest: true }, {}, 'ipam-test-3');
    await mgr.start();
    await eventually(() => names.every((n) => log.answers.has(n)), { timeoutMs: 60_000 });
    // Let any late duplicate answer or block surface before counting.
    await new Promise((r) => setTimeout(r, 500));
    for (const n of names) assert.equal(log.answers.get(n)!.length, 1, `${n} answered ${log.answers.get(n)!.length} times`);
    const blocks = await blocksOf(client, 'restart');
    const answeredBlocks = names.map((n) => log.answers.get(n)![0]!);
    assert.equal(new Set(answeredBlocks).size, 80, 'two requests got the same block');
    assert.deepEqual(blocks.map((b) => b.metadata!.name!).sort(), [...answeredBlocks].sort(), 'blocks differ from answered requests (leak or duplicate)');
    assert.deepEqual(checkNoOverlap(blocks.map((b) => ({ label: b.metadata!.name!, cidr: b.ipv4! }))), []);
  });

  test('a request its node consumed and deleted before the status write is done: no 404 warning, no retry', async () => {
    await mgr.stop({ releaseLease: false });
    const rec = recordingLogger('ipam-consumed');
    mgr = await ipamManager(cp, { addressPool: true, blockRequest: true }, {}, 'ipam-test-4', { logger: rec.logger });
    // The node's side of the race: its cache shows the block (labelled with the request's UID)
    // before the controller's status write, so coild consumes the request and deletes it.
    const mgrClient = mgr.client as unknown as { create: (kind: unknown, obj: AddressBlock) => Promise<unknown> };
    const create = mgrClient.create.bind(mgr.client);
    mgrClient.create = async (kind, obj) => {
      const made = await create(kind, obj);
      if (kind === Kinds.AddressBlock) await client.delete(Kinds.BlockRequest, { name: 'req-consumed-n1' });
      return made;
    };
    await mgr.start();
    await createPool(client, 'consumed', { subnets: [{ ipv4: '10.7.0.0/24' }] });
    await createRequest(client, 'consumed', 'n1');
    await eventually(async () => (await client.get(Kinds.BlockRequest, { name: 'req-consumed-n1' })) === undefined);
    const ofRequest = () => rec.records.filter((r) => r.object === 'req-consumed-n1');
    await eventually(() => ofRequest().some((r) => r.msg === 'reconciled' || r.level >= 40));
    assert.deepEqual(ofRequest().filter((r) => r.level >= 40).map((r) => `${r.msg}: ${r.err?.message}`), []);
    assert.deepEqual((await blocksOf(client, 'consumed')).map((b) => b.metadata!.name), ['consumed-0']);
  });
});
