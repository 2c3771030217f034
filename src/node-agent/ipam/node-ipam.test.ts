import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { AddressBlock } from '../../api/v2/addressblock.js';
import type { BlockRequest } from '../../api/v2/blockrequest.js';
import { ipamSnapshot } from './introspection.js';
import { silentLogger } from '../../runtime/logging.js';
import { BlockRequester } from './block-request.js';
import { FakeBlockClient, FakeCoildCache, fakeBlock } from '../../../test/fakes/coild-cache.fake.js';
import { Kinds } from '../../api/v2/kinds.js';
import { NodeIpam, NodeIpamError } from './node-ipam.js';
import { until } from '../../../test/fakes/timing.js';

type Controller = 'answer' | 'answer-silently' | 'fail' | 'silent' | 'forbidden';

/** NodeIpam + BlockRequester over fakes; blocks are /30 (4 addresses) at 10.0.<n>.0. */
function lab(o: { controller?: Controller; lowWaterMark?: number; coolingMs?: number; allocTimeoutMs?: number; exportSync?: () => Promise<void>; onUnreadableBlock?: (b: AddressBlock, reason: string) => void; onAddressesOrphaned?: (e: { containerId: string; ipv4?: string }[]) => void } = {}) {
  const cache = new FakeCoildCache();
  const clock = { ms: 1_000_000 };
  const now = (): number => clock.ms;
  let next = 10;
  const answer = (br: BlockRequest, silently: boolean): void => {
    const i = next++;
    const b = fakeBlock(br.spec.poolName, i, `10.0.${i}.0/30`, { uid: br.metadata!.uid! });
    if (silently) cache.put(Kinds.AddressBlock, b);
    else setImmediate(() => cache.emit(Kinds.AddressBlock, 'ADDED', b));
  };
  const client = new FakeBlockClient((br) => {
    const mode = o.controller ?? 'answer';
    if (mode === 'answer' || mode === 'answer-silently') answer(br, mode === 'answer-silently');
    if (mode === 'forbidden') throw new Error('blockrequests is forbidden');
    if (mode === 'fail') {
      const status = { conditions: [{ type: 'Failed', status: 'True', reason: 'out of blocks', message: 'pool p does not have free blocks', lastTransitionTime: '' }] };
      setImmediate(() => client.answer(br, status));
    }
  });
  const logger = silentLogger();
  const requester = new BlockRequester({ cache: cache.asCache(), client: client.asClient(), nodeName: 'n1', logger, pollMs: 20, now });
  const ipam = new NodeIpam({
    cache: cache.asCache(), requester, logger, now,
    lowWaterMark: o.lowWaterMark ?? 0, coolingMs: o.coolingMs ?? 0, allocTimeoutMs: o.allocTimeoutMs ?? 2_000,
    ...(o.exportSync && { exportSync: o.exportSync }),
    ...(o.onUnreadableBlock && { onUnreadableBlock: o.onUnreadableBlock }),
    ...(o.onAddressesOrphaned && { onAddressesOrphaned: o.onAddressesOrphaned }),
  });
  requester.start();
  ipam.start();
  const alloc = (key: string, pool = 'p') => ipam.allocate({ pool, containerId: key, ifname: 'eth0' });
  return { cache, clock, client, requester, ipam, alloc, answer, done: () => requester.stop() };
}

describe('NodeIpam', () => {
  it('a released block whose name comes back with a new uid is a new block (a watch gap shows it as an update)', async () => {
    const t = lab({ controller: 'silent', allocTimeoutMs: 200 });
    const withUid = (uid: string) => {
      const b = fakeBlock('p', 3, '10.0.3.0/30');
      return { ...b, metadata: { ...b.metadata, uid } };
    };
    t.cache.emit(Kinds.AddressBlock, 'ADDED', withUid('block-uid-1'));
    t.ipam.setReleasing('p-3', true); // coild released it: finalizer off, delete sent
    // The delete went unseen; the controller gave the name to this node's next block.
    t.cache.emit(Kinds.AddressBlock, 'MODIFIED', withUid('block-uid-2'));
    const a = await t.alloc('c1');
    assert.equal(a.blockName, 'p-3');
    assert.equal(t.client.created.length, 0, 'no BlockRequest: the new p-3 serves');
    t.done();
  });

  // Coil re-syncs table 119 on each block allocation: a pod on a new block is not up before its
  // block is exported (the netns coild test read table 119 empty right after such an ADD).
  it('an ADD served from a block that just arrived returns only after the export sync that includes it', async () => {
    const events: string[] = [];
    const t = lab({ exportSync: async () => { events.push('sync started'); await new Promise((r) => setTimeout(r, 30)); events.push('sync done'); } });
    await t.alloc('c1');
    events.push('ADD returned');
    assert.deepEqual(events, ['sync started', 'sync done', 'ADD returned']);
    await t.alloc('c2'); // same block: no new sync
    assert.deepEqual(events.filter((e) => e === 'sync started'), ['sync started']);
    t.done();
  });

  it('ADD twice for one key returns the same address', async () => {
    const t = lab();
    const a = await t.alloc('c1');
    assert.equal((await t.alloc('c1')).ipv4, a.ipv4);
    assert.equal(t.client.created.length, 1);
    t.done();
  });

  it('concurrent ADDs on a full node share one BlockRequest per round', async () => {
    const t = lab();
    const got = await Promise.all(['a', 'b', 'c', 'd', 'e', 'f'].map((k) => t.alloc(k)));
    assert.equal(new Set(got.map((g) => g.ipv4)).size, 6);
    // 6 pods, 4 addresses a block: two requests, never one per waiting ADD.
    assert.equal(t.client.created.length, 2);
    assert.ok(t.client.created.every((br) => br.metadata?.labels?.['coil.cybozu.com/node'] === 'n1'));
    t.done();
  });

  it('waiting for a block of one pool does not hold up ADDs served by another pool', async () => {
    const t = lab({ controller: 'silent', allocTimeoutMs: 200 });
    t.cache.emit(Kinds.AddressBlock, 'ADDED', fakeBlock('other', 0, '10.9.0.0/30'));
    const waiting = t.alloc('w', 'p');
    const served = await t.alloc('s', 'other');
    assert.equal(served.ipv4, '10.9.0.0');
    await assert.rejects(waiting, (e: unknown) => e instanceof NodeIpamError && e.kind === 'timeout');
    t.done();
  });

  it('an answer that reaches the cache before anyone waits is not lost (Coil #271)', async () => {
    const t = lab({ controller: 'answer-silently' });
    const a = await t.alloc('c1');
    assert.equal(a.ipv4, '10.0.10.0');
    t.done();
  });

  it('a timed-out request is joined by the next ADD, not issued again', async () => {
    const t = lab({ controller: 'silent', allocTimeoutMs: 100 });
    await assert.rejects(t.alloc('c1'), NodeIpamError);
    const retry = t.alloc('c1');
    await new Promise((r) => setTimeout(r, 20));
    assert.equal(t.client.created.length, 1);
    t.answer(t.client.created[0]!, false);
    assert.equal((await retry).ipv4, '10.0.10.0');
    t.done();
  });

  it('a pool out of blocks fails the ADD with out-of-blocks', async () => {
    const t = lab({ controller: 'fail' });
    await assert.rejects(t.alloc('c1'), (e: unknown) => e instanceof NodeIpamError && e.kind === 'out-of-blocks' && /out of blocks/.test(e.message));
    assert.deepEqual(t.ipam.allocations(), []);
    assert.equal(t.ipam.isUsable('p'), false);
    t.cache.emit(Kinds.AddressBlock, 'ADDED', fakeBlock('p', 0, '10.8.0.0/30'));
    assert.equal(t.ipam.isUsable('p'), true);
    t.done();
  });

  it('a BlockRequest that cannot be created fails every waiting ADD at once, without retrying', async () => {
    const t = lab({ controller: 'forbidden' });
    const results = await Promise.allSettled([t.alloc('c1'), t.alloc('c2')]);
    assert.deepEqual(results.map((r) => r.status === 'rejected' && /forbidden/.test(String(r.reason))), [true, true]);
    assert.equal(t.client.created.length, 1);
    t.done();
  });

  it('reserved blocks are never allocated from', async () => {
    const t = lab();
    t.cache.emit(Kinds.AddressBlock, 'ADDED', fakeBlock('p', 0, '10.8.0.0/30', { reserved: true }));
    assert.equal((await t.alloc('c1')).ipv4, '10.0.10.0');
    assert.ok(!t.ipam.releasable(0).some((b) => b.name === 'p-0'));
    t.done();
  });

  it('a freed address is not handed out again while it cools', async () => {
    const t = lab({ coolingMs: 1_000 });
    t.cache.emit(Kinds.AddressBlock, 'ADDED', fakeBlock('p', 0, '10.8.0.0/30'));
    const first = await t.alloc('k1');
    for (const k of ['k2', 'k3', 'k4']) await t.alloc(k);
    t.ipam.free('k1', 'eth0');
    assert.equal(t.ipam.freeCount('p'), 0);
    const k5 = await t.alloc('k5'); // from a new block, not k1's cooling address
    assert.notEqual(k5.ipv4, first.ipv4);
    t.clock.ms += 1_000;
    assert.equal(t.ipam.freeCount('p'), 4);
    t.done();
  });

  it('an emptied block becomes releasable only after the grace period and its cooling', async () => {
    const t = lab({ coolingMs: 1_000 });
    t.cache.emit(Kinds.AddressBlock, 'ADDED', fakeBlock('p', 0, '10.8.0.0/30'));
    await t.alloc('k1');
    t.ipam.free('k1', 'eth0');
    t.clock.ms += 500;
    assert.deepEqual(t.ipam.releasable(500), []);
    t.clock.ms += 500;
    assert.deepEqual(t.ipam.releasable(500).map((b) => b.name), ['p-0']);
    assert.equal(t.ipam.nextReleaseAtMs(500), t.clock.ms);
    t.done();
  });

  it('a block deleted by someone is not allocated from and goes as soon as its last pod does (Coil #202)', async () => {
    const t = lab();
    const b = fakeBlock('p', 0, '10.8.0.0/30');
    t.cache.emit(Kinds.AddressBlock, 'ADDED', b);
    await t.alloc('k1');
    t.cache.emit(Kinds.AddressBlock, 'MODIFIED', { ...b, metadata: { ...b.metadata, deletionTimestamp: new Date() } });
    assert.equal((await t.alloc('k2')).ipv4, '10.0.10.0');
    assert.deepEqual(t.ipam.releasable(3_600_000).map((x) => x.name), []);
    t.ipam.free('k1', 'eth0');
    assert.deepEqual(t.ipam.releasable(3_600_000).map((x) => x.name), ['p-0']);
    t.done();
  });

  it('warm prefetch asks for the next block below the low-water mark, without an ADD waiting', async () => {
    const t = lab({ lowWaterMark: 2 });
    t.cache.emit(Kinds.AddressBlock, 'ADDED', fakeBlock('p', 0, '10.8.0.0/30'));
    await t.alloc('k1');
    await t.alloc('k2');
    assert.equal(t.client.created.length, 0);
    await t.alloc('k3');
    assert.equal(t.client.created.length, 1);
    // The answer is read on the requester's 20 ms poll: a fixed wait of one poll failed on a busy machine.
    await until(() => t.ipam.freeCount('p') === 5, 'the prefetched block in use');
    assert.equal(t.client.created.length, 1);
    t.done();
  });

  it('recovery registers a host address into its block and refuses a second holder', () => {
    const t = lab();
    t.cache.emit(Kinds.AddressBlock, 'ADDED', fakeBlock('p', 0, '10.8.0.0/30'));
    assert.deepEqual(t.ipam.register({ pool: 'p', containerId: 'c1', ifname: 'eth0', ipv4: '10.8.0.2' }), { ok: true, blockName: 'p-0' });
    assert.equal(t.ipam.register({ pool: 'p', containerId: 'c2', ifname: 'eth0', ipv4: '10.8.0.2' }).ok, false);
    assert.equal(t.ipam.register({ pool: 'p', containerId: 'c3', ifname: 'eth0', ipv4: '10.77.0.1' }).ok, false);
    assert.equal(t.ipam.lookup('c1', 'eth0')?.ipv4, '10.8.0.2');
    t.done();
  });

  it('recovery keeps both halves of a dual-stack pod whose block holds one family, and names the other', () => {
    const t = lab();
    // The pool was re-created IPv4-only (p-0) and IPv6-only (q-0) while dual-stack pods ran.
    t.cache.emit(Kinds.AddressBlock, 'ADDED', fakeBlock('p', 0, '10.8.0.0/30'));
    t.cache.emit(Kinds.AddressBlock, 'ADDED', { ...fakeBlock('q', 0, ''), ipv4: undefined, ipv6: 'fd00:9::/126' } as AddressBlock);
    assert.deepEqual(t.ipam.register({ pool: 'p', containerId: 'c1', ifname: 'eth0', ipv4: '10.8.0.2', ipv6: 'fd00:8:0:0::2' }),
      { ok: true, blockName: 'p-0', withoutBlock: { pool: 'p', containerId: 'c1', ifname: 'eth0', ipv6: 'fd00:8::2' } });
    assert.deepEqual(t.ipam.lookup('c1', 'eth0'), { key: 'c1:eth0', offset: 2, pool: 'p', blockName: 'p-0', containerId: 'c1', ifname: 'eth0', ipv4: '10.8.0.2', ipv6: 'fd00:8::2', withoutBlock: { ipv6: 'fd00:8::2' } });
    // The IPv4 half is the stray when only the IPv6 family has a block.
    assert.deepEqual(t.ipam.register({ pool: 'q', containerId: 'c2', ifname: 'eth0', ipv4: '10.7.0.1', ipv6: 'fd00:9::1' }),
      { ok: true, blockName: 'q-0', withoutBlock: { pool: 'q', containerId: 'c2', ifname: 'eth0', ipv4: '10.7.0.1' } });
    // A dual-stack block at the same offset holds both: nothing is left out.
    t.cache.emit(Kinds.AddressBlock, 'ADDED', { ...fakeBlock('r', 0, '10.6.0.0/30'), ipv6: 'fd00:6::/126' } as AddressBlock);
    assert.deepEqual(t.ipam.register({ pool: 'r', containerId: 'c3', ifname: 'eth0', ipv4: '10.6.0.3', ipv6: 'fd00:6::3' }), { ok: true, blockName: 'r-0' });
    // ...and one whose IPv6 subnet changed holds the IPv6 at that offset, not the wired one.
    assert.deepEqual(t.ipam.register({ pool: 'r', containerId: 'c4', ifname: 'eth0', ipv4: '10.6.0.1', ipv6: 'fd00:5::1' }),
      { ok: true, blockName: 'r-0', withoutBlock: { pool: 'r', containerId: 'c4', ifname: 'eth0', ipv6: 'fd00:5::1' } });
    assert.equal(ipamSnapshot(t.ipam, 'n1', [], 0).allocations.find((a) => a.containerId === 'c4')?.ipv6, 'fd00:5::1', '/ipam shows the wired address');
    t.done();
  });

  // Issue 25 item 8: Coil's controller wrote a mapped pool's block ipv6 as `10.9.0.0/29`, and one
  // block NodeIpam could not read stopped every block after it in the same sync.
  it('reads a block whose ipv6 Coil\'s controller wrote in IPv4 form, and skips and reports one it cannot read without losing the others', async () => {
    const reported: string[] = [];
    const t = lab({ controller: 'silent', allocTimeoutMs: 100, onUnreadableBlock: (b, reason) => reported.push(`${b.metadata?.name}: ${reason}`) });
    const mapped: AddressBlock = { ...fakeBlock('m', 0, '10.1.0.0/29'), ipv6: '10.9.0.0/29' };
    const bad: AddressBlock = { ...fakeBlock('p', 1, '10.8.1.0/30'), ipv6: 'fd00::/120' }; // sizes differ
    const garbage: AddressBlock = { ...fakeBlock('p', 2, 'not-a-cidr') };
    t.cache.put(Kinds.AddressBlock, mapped);
    t.cache.put(Kinds.AddressBlock, bad);
    t.cache.put(Kinds.AddressBlock, garbage);
    t.cache.emit(Kinds.AddressBlock, 'ADDED', fakeBlock('p', 3, '10.8.3.0/30'));
    assert.deepEqual(t.ipam.nodeBlocks().map((b) => b.name), ['m-0', 'p-3']);
    const m = await t.ipam.allocate({ pool: 'm', containerId: 'c1', ifname: 'eth0' });
    assert.deepEqual([m.ipv4, m.ipv6], ['10.1.0.0', '::ffff:10.9.0.0']);
    assert.equal((await t.alloc('c2')).blockName, 'p-3');
    assert.deepEqual(t.ipam.unreadableBlocks().map((b) => b.name), ['p-1', 'p-2']);
    assert.equal(reported.length, 2, 'each reported once');
    assert.match(reported[0]!, /^p-1: dual stack block must be the same size/);
    t.cache.emit(Kinds.AddressBlock, 'MODIFIED', garbage); // another sync: not reported again
    assert.equal(reported.length, 2);
    const snap = ipamSnapshot(t.ipam, 'n1', [], 0);
    assert.deepEqual(snap.unreadableBlocks.map((b) => [b.name, b.pool, b.index]), [['p-1', 'p', 1], ['p-2', 'p', 2]]);
    t.cache.emit(Kinds.AddressBlock, 'DELETED', garbage);
    assert.deepEqual(t.ipam.unreadableBlocks().map((b) => b.name), ['p-1']);
    t.done();
  });

  // Issue 25, "a block removed with its finalizer while pods use it": its addresses stay their
  // pods'; when the block comes back (claimed, or by an ordinary request), they are taken first.
  it('a block deleted while pods use it: its addresses stay held and are registered again the moment it comes back', async () => {
    const orphaned: string[] = [];
    const t = lab({ controller: 'silent', allocTimeoutMs: 50, onAddressesOrphaned: (es) => orphaned.push(...es.map((e) => `${e.containerId}=${e.ipv4}`)) });
    const b0 = fakeBlock('p', 0, '10.8.0.0/30');
    t.cache.emit(Kinds.AddressBlock, 'ADDED', b0);
    const a1 = await t.alloc('c1');
    const a2 = await t.alloc('c2');
    t.cache.emit(Kinds.AddressBlock, 'DELETED', b0);
    assert.deepEqual(orphaned, [`c1=${a1.ipv4}`, `c2=${a2.ipv4}`]);
    assert.equal(t.ipam.lookup('c1', 'eth0'), undefined);
    t.ipam.free('c2', 'eth0'); // c2's pod is deleted meanwhile: no longer held
    t.cache.emit(Kinds.AddressBlock, 'ADDED', b0);
    assert.equal(t.ipam.lookup('c1', 'eth0')?.ipv4, a1.ipv4, 'registered again before any ADD');
    const fresh = [(await t.alloc('c3')).ipv4, (await t.alloc('c4')).ipv4, (await t.alloc('c5')).ipv4];
    assert.ok(!fresh.includes(a1.ipv4), `a new pod got ${a1.ipv4}, c1's address`);
    t.done();
  });
});
