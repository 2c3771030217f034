/**
 * BlockRequester: where it learns an answer (the block in the node's AddressBlock cache, else a
 * read of the request by name on a backoff — no BlockRequest watch, docs/performance.md#scale),
 * and its clean-up: coild deletes each BlockRequest it consumed, by UID, because Coil's
 * controller never does (docs/compatibility.md "BlockRequests").
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import bunyan from 'bunyan';
import type { AddressBlock } from '../../api/v2/addressblock.js';
import type { BlockRequest, BlockRequestStatus } from '../../api/v2/blockrequest.js';
import type { Condition } from '../../api/v2/conditions.js';
import { LABEL_NODE, LABEL_POOL } from '../../api/v2/keys.js';
import { silentLogger } from '../../runtime/logging.js';
import { BlockRequester, type BlockRequestOutcome } from './block-request.js';
import { NodeIpam } from './node-ipam.js';
import { FakeBlockClient, FakeCoildCache, fakeBlock } from '../../../test/fakes/coild-cache.fake.js';
import { FakeClock } from '../../../test/fakes/clock.fake.js';
import { until } from '../../../test/fakes/timing.js';
import { Kinds } from '../../api/v2/kinds.js';

const COMPLETE: Condition = { type: 'Complete', status: 'True', reason: 'allocated', message: 'allocated', lastTransitionTime: '' };
const FAILED: Condition = { type: 'Failed', status: 'True', reason: 'out of blocks', message: 'pool p does not have free blocks', lastTransitionTime: '' };

function request(name: string, uid: string, o: { node?: string; status?: BlockRequest['status'] } = {}): BlockRequest {
  const node = o.node ?? 'n1';
  return { metadata: { name, uid, labels: { [LABEL_NODE]: node, [LABEL_POOL]: 'p' } }, spec: { nodeName: node, poolName: 'p' }, ...(o.status && { status: o.status }) };
}

const settled = (): Promise<void> => new Promise((r) => setTimeout(r, 60));

describe('BlockRequester clean-up', () => {
  it('deletes a request once its block is in the cache, naming its UID', async () => {
    const cache = new FakeCoildCache();
    const client = new FakeBlockClient((br) => setImmediate(() => cache.emit(Kinds.AddressBlock, 'ADDED', fakeBlock('p', 0, '10.0.0.0/30', { uid: br.metadata!.uid! }))));
    const r = new BlockRequester({ cache: cache.asCache(), client: client.asClient(), nodeName: 'n1', logger: silentLogger(), pollMs: 20 });
    r.start();
    assert.deepEqual(await r.request('p', 2_000), { kind: 'allocated', blockName: 'p-0' });
    await settled();
    assert.deepEqual(client.requestsDeleted, [{ name: client.created[0]!.metadata!.name!, uid: client.created[0]!.metadata!.uid! }]);
    r.stop();
  });

  it('deletes a request answered Failed', async () => {
    const cache = new FakeCoildCache();
    const client: FakeBlockClient = new FakeBlockClient((br) => setImmediate(() => client.answer(br, { conditions: [COMPLETE, FAILED] })));
    const r = new BlockRequester({ cache: cache.asCache(), client: client.asClient(), nodeName: 'n1', logger: silentLogger(), pollMs: 20 });
    r.start();
    assert.equal((await r.request('p', 2_000)).kind, 'failed');
    await settled();
    assert.deepEqual(client.requestsDeleted.map((d) => d.uid), [client.created[0]!.metadata!.uid]);
    r.stop();
  });

  it('keeps a timed-out request while it is outstanding, and deletes it once answered', async () => {
    const cache = new FakeCoildCache();
    const client = new FakeBlockClient();
    const r = new BlockRequester({ cache: cache.asCache(), client: client.asClient(), nodeName: 'n1', logger: silentLogger(), pollMs: 20 });
    r.start();
    assert.equal((await r.request('p', 50)).kind, 'timeout');
    await settled();
    assert.deepEqual(client.requestsDeleted, [], 'the next ADD joins it: not consumed yet');
    const br = client.created[0]!;
    cache.emit(Kinds.AddressBlock, 'ADDED', fakeBlock('p', 0, '10.0.0.0/30', { uid: br.metadata!.uid! }));
    await settled();
    assert.deepEqual(client.requestsDeleted, [{ name: br.metadata!.name!, uid: br.metadata!.uid! }]);
    r.stop();
  });

  it('deletes answered requests an earlier run left, but neither pending ones nor other nodes\'; a pending one once it is answered', async () => {
    const cache = new FakeCoildCache();
    const client = new FakeBlockClient();
    const pending = request('req-p-n1-pending', 'u-pending');
    for (const br of [
      request('req-p-n1-old', 'u-old', { status: { conditions: [COMPLETE], addressBlockName: 'p-7' } }),
      pending,
      request('req-p-n2-old', 'u-n2', { node: 'n2', status: { conditions: [COMPLETE], addressBlockName: 'p-8' } }),
    ]) client.apiOnly.set(`BlockRequest/${br.metadata!.name!}`, br);
    const r = new BlockRequester({ cache: cache.asCache(), client: client.asClient(), nodeName: 'n1', logger: silentLogger(), pollMs: 20 });
    r.start();
    await until(() => client.requestsDeleted.length > 0, 'the answered request deleted');
    await settled();
    assert.deepEqual(client.lists, ['coil.cybozu.com/node=n1'], 'one list of this node\'s requests when it starts');
    assert.deepEqual(client.requestsDeleted, [{ name: 'req-p-n1-old', uid: 'u-old' }]);
    client.answer(pending, { conditions: [COMPLETE], addressBlockName: 'p-9' });
    await until(() => client.requestsDeleted.length > 1, 'the pending request deleted once answered');
    await settled();
    assert.deepEqual(client.requestsDeleted.map((d) => d.uid), ['u-old', 'u-pending']);
    assert.deepEqual(client.lists.length, 1, 'listed once');
    r.stop();
  });
});

describe('BlockRequester: where the answer comes from', () => {
  const complete = (block: string): BlockRequestStatus => ({ addressBlockName: block, conditions: [{ ...COMPLETE, message: `allocated a block ${block}` }] });

  it('watches no BlockRequest: a request whose labelled block arrives within a poll is not read at all', async () => {
    const cache = new FakeCoildCache();
    const client = new FakeBlockClient((br) => setImmediate(() => cache.emit(Kinds.AddressBlock, 'ADDED', fakeBlock('p', 0, '10.0.0.0/30', { uid: br.metadata!.uid! }))));
    const subscribed: string[] = [];
    const onEvent = cache.onEvent.bind(cache);
    cache.onEvent = ((kind: { kind: string }, h: never) => (subscribed.push(kind.kind), onEvent(kind as never, h))) as typeof cache.onEvent;
    const r = new BlockRequester({ cache: cache.asCache(), client: client.asClient(), nodeName: 'n1', logger: silentLogger(), pollMs: 200 });
    r.start();
    assert.deepEqual(await r.request('p', 2_000), { kind: 'allocated', blockName: 'p-0' });
    r.stop();
    assert.deepEqual(subscribed, ['AddressBlock']);
    assert.deepEqual(client.reads, []);
  });

  it('under a controller that does not label its blocks (status and block name only), reads the request and takes the named block', async () => {
    const cache = new FakeCoildCache();
    const client: FakeBlockClient = new FakeBlockClient((br) => setTimeout(() => {
      cache.emit(Kinds.AddressBlock, 'ADDED', fakeBlock('p', 3, '10.0.0.12/30'));
      client.answer(br, complete('p-3'));
    }, 30));
    const r = new BlockRequester({ cache: cache.asCache(), client: client.asClient(), nodeName: 'n1', logger: silentLogger(), pollMs: 20 });
    r.start();
    assert.deepEqual(await r.request('p', 2_000), { kind: 'allocated', blockName: 'p-3' });
    assert.ok(client.reads.length >= 1);
    await settled();
    assert.deepEqual(client.requestsDeleted.map((d) => d.uid), [client.created[0]!.metadata!.uid]);
    r.stop();
  });

  it('waits for the named block to reach the cache, and takes no older block of that name or another request\'s', async () => {
    const cache = new FakeCoildCache();
    const old = fakeBlock('p', 3, '10.0.0.12/30');
    old.metadata!.creationTimestamp = new Date('2020-01-01T00:00:00Z');
    cache.put(Kinds.AddressBlock, old);
    cache.put(Kinds.AddressBlock, fakeBlock('p', 4, '10.0.0.16/30', { uid: 'someone-else' }));
    const client: FakeBlockClient = new FakeBlockClient((br) => {
      br.metadata!.creationTimestamp = new Date('2026-01-01T00:00:00Z');
      client.answer(br, complete(br.spec.poolName === 'p' ? 'p-3' : 'p-4'));
    });
    const r = new BlockRequester({ cache: cache.asCache(), client: client.asClient(), nodeName: 'n1', logger: silentLogger(), pollMs: 10 });
    r.start();
    const other = r.request('q', 150);
    const waiting = r.request('p', 2_000);
    await new Promise((res) => setTimeout(res, 100));
    assert.ok(r.isPending('p'), 'the cache still shows the old p-3 (created before the request): not the answer');
    const fresh = fakeBlock('p', 3, '10.0.0.12/30');
    fresh.metadata!.creationTimestamp = new Date('2026-01-01T00:00:01Z');
    cache.emit(Kinds.AddressBlock, 'MODIFIED', fresh);
    assert.deepEqual(await waiting, { kind: 'allocated', blockName: 'p-3' });
    assert.equal((await other).kind, 'timeout', 'p-4 answers another request');
    r.stop();
  });

  it('learns a Failed answer by reading the request, and `lost` when it was deleted unanswered', async () => {
    const cache = new FakeCoildCache();
    let mode: 'fail' | 'delete' = 'fail';
    const client: FakeBlockClient = new FakeBlockClient((br) => setImmediate(() => {
      if (mode === 'fail') client.answer(br, { conditions: [COMPLETE, FAILED] });
      else client.apiOnly.delete(`BlockRequest/${br.metadata!.name!}`);
    }));
    const r = new BlockRequester({ cache: cache.asCache(), client: client.asClient(), nodeName: 'n1', logger: silentLogger(), pollMs: 10 });
    r.start();
    assert.deepEqual(await r.request('p', 2_000), { kind: 'failed', reason: 'out of blocks', message: 'pool p does not have free blocks' });
    mode = 'delete';
    assert.deepEqual(await r.request('p', 2_000), { kind: 'lost' });
    r.stop();
  });

  it('reads an unanswered request on a doubling backoff: a whole poll after its creation at least, then 2, 4, 8 … polls apart', async () => {
    const cache = new FakeCoildCache();
    const client = new FakeBlockClient();
    const r = new BlockRequester({ cache: cache.asCache(), client: client.asClient(), nodeName: 'n1', logger: silentLogger(), pollMs: 10 });
    r.start();
    assert.equal((await r.request('p', 320)).kind, 'timeout');
    r.stop();
    // About 32 polls: reads at polls 2, 4, 8, 16, 32 (a tick that overruns is dropped, never doubled).
    assert.ok(client.reads.length >= 3 && client.reads.length <= 6, `${client.reads.length} reads in 32 polls`);
  });

  it('follows a request made for someone else (a claim): tells its answer once, then deletes it', async () => {
    const cache = new FakeCoildCache();
    const client = new FakeBlockClient();
    const claim = await client.create(Kinds.BlockRequest, request('claim-p-n1-', ''));
    const r = new BlockRequester({ cache: cache.asCache(), client: client.asClient(), nodeName: 'n1', logger: silentLogger(), pollMs: 10 });
    r.start();
    const answers: string[] = [];
    r.follow(claim.metadata!.name!, claim.metadata!.uid!, (a) => answers.push(a.kind));
    await new Promise((res) => setTimeout(res, 50));
    assert.deepEqual([answers, client.requestsDeleted], [[], []], 'pending: nothing to tell yet');
    client.answer(claim, { conditions: [COMPLETE, FAILED] });
    await new Promise((res) => setTimeout(res, 200));
    assert.deepEqual(answers, ['failed']);
    assert.deepEqual(client.requestsDeleted, [{ name: claim.metadata!.name!, uid: claim.metadata!.uid! }]);
    r.stop();
  });
});

describe('BlockRequester after an API server outage', () => {
  it('cuts short the backoff of its AddressBlock informer while an ADD waits for a block the server already holds', async () => {
    // The controller answered at once, but this node's AddressBlock informer is waiting out the
    // backoff of an outage that has ended: without the hurry the ADD times out on a block that exists.
    const cache = new FakeCoildCache();
    const client = new FakeBlockClient((br) => cache.backOff(Kinds.AddressBlock, () => cache.emit(Kinds.AddressBlock, 'ADDED', fakeBlock('p', 0, '10.0.0.0/30', { uid: br.metadata!.uid! }))));
    const r = new BlockRequester({ cache: cache.asCache(), client: client.asClient(), nodeName: 'n1', logger: silentLogger(), pollMs: 20 });
    r.start();
    assert.deepEqual(await r.request('p', 1_000), { kind: 'allocated', blockName: 'p-0' });
    assert.deepEqual(cache.retried, ['AddressBlock']);
    r.stop();
  });

  it('backs off its own hurry while the server stays down: not a list every poll on every waiting node', async () => {
    // An ADD waits on a request created just before the outage. Each hurried list fails again (the
    // informer backs off anew); hurrying each poll would make every waiting node of the cluster
    // list every poll for the whole outage (hack/bench/scale.ts: 2 LISTs/s per node with two informers).
    const cache = new FakeCoildCache();
    const client = new FakeBlockClient();
    const down = (): void => cache.backOff(Kinds.AddressBlock, down);
    down();
    const r = new BlockRequester({ cache: cache.asCache(), client: client.asClient(), nodeName: 'n1', logger: silentLogger(), pollMs: 10 });
    r.start();
    assert.equal((await r.request('p', 640)).kind, 'timeout');
    r.stop();
    const perKind = cache.retried.filter((k) => k === 'AddressBlock').length;
    // 63 polls; hurries 10, 20, 40, 80, 160, 320 ms apart (±50 %) come to about 6.
    assert.ok(perKind >= 2 && perKind <= 12, `${perKind} hurried lists of AddressBlocks in 640 ms of 10 ms polls`);
  });

  it('hurries again at once after a recovered informer backs off in a later outage', async () => {
    const cache = new FakeCoildCache();
    const client = new FakeBlockClient();
    let outage = true;
    const down = (): void => (outage ? cache.backOff(Kinds.AddressBlock, down) : undefined);
    down();
    const r = new BlockRequester({ cache: cache.asCache(), client: client.asClient(), nodeName: 'n1', logger: silentLogger(), pollMs: 10 });
    r.start();
    const waiting = r.request('p', 10_000);
    await new Promise((res) => setTimeout(res, 300));
    outage = false; // the next hurried list succeeds: the informer watches again
    // That list comes when the hurry's own backoff says: a hurry at the very end of the outage
    // waits 160–480 ms for the next (a fixed 400 ms here once ended before it, so the informer was
    // still backing off and the "new" outage was the old one). Wait for the recovery itself, then
    // 50 ms: at least one 10 ms poll sees the informer healthy and resets the hurry.
    for (const deadline = Date.now() + 5_000; cache.informer(Kinds.AddressBlock).backingOff;) {
      assert.ok(Date.now() < deadline, 'the informer recovers at the first hurried list after the outage');
      await new Promise((res) => setTimeout(res, 10));
    }
    await new Promise((res) => setTimeout(res, 50));
    const before = cache.retried.length;
    cache.backOff(Kinds.AddressBlock, () => undefined); // a new outage
    await new Promise((res) => setTimeout(res, 60));
    assert.equal(cache.retried.length, before + 1, 'the first hurry of a new outage waits one poll, not the last outage\'s interval');
    r.stop();
    assert.equal((await waiting).kind, 'timeout');
  });

  it('leaves the backoff alone while nobody waits (a timed-out request stays outstanding)', async () => {
    const cache = new FakeCoildCache();
    const client = new FakeBlockClient();
    const r = new BlockRequester({ cache: cache.asCache(), client: client.asClient(), nodeName: 'n1', logger: silentLogger(), pollMs: 20 });
    r.start();
    assert.equal((await r.request('p', 10)).kind, 'timeout');
    cache.backOff(Kinds.AddressBlock, () => undefined);
    await new Promise((res) => setTimeout(res, 100));
    assert.deepEqual(cache.retried, []);
    assert.ok(r.isPending('p'));
    r.stop();
  });
});

describe('BlockRequester: an answer read before its block reaches the cache (a lagging watch)', () => {
  // At N=5,000 with 64 controller workers the apiserver's watch dispatch lagged behind its writes:
  // 1,316 nodes read `allocated` while their block was not in their cache 10 s later, counted the
  // request lost and failed the ADD (docs/performance.md#where-this-machine-stops). The answer is
  // lost only when the server does not hold the block as this node's and this request's.
  const POLL_MS = 1_000;
  const complete = (block: string): BlockRequestStatus => ({ addressBlockName: block, conditions: [{ ...COMPLETE, message: `allocated a block ${block}` }] });

  /** The block answering `br` as the controller creates it: p-0 of n1, labelled with the request's UID. */
  function answerBlock(br: BlockRequest): AddressBlock {
    const b = fakeBlock('p', 0, '10.0.0.0/30', { uid: br.metadata!.uid! });
    b.metadata!.creationTimestamp = new Date('2026-01-01T00:00:01Z');
    return b;
  }

  /**
   * A requester polling every second on a FakeClock, started at 0. The controller answers each
   * request at once by status (`p-0`); the API server then holds `block(br)` (default
   * {@link answerBlock}; undefined: nothing) as p-0, which this node's cache does not show.
   */
  function lagging(block: (br: BlockRequest) => AddressBlock | undefined = answerBlock) {
    const clock = new FakeClock();
    const cache = new FakeCoildCache();
    const ring = new bunyan.RingBuffer({ limit: 100 });
    const logger = bunyan.createLogger({ name: 'test', streams: [{ type: 'raw', stream: ring, level: 'info' }] });
    const client: FakeBlockClient = new FakeBlockClient((br) => {
      br.metadata!.creationTimestamp = new Date('2026-01-01T00:00:00Z');
      client.answer(br, complete('p-0'));
      const b = block(br);
      if (b) client.apiOnly.set('AddressBlock/p-0', b);
    });
    const now = (): number => clock.now();
    const requester = new BlockRequester({ cache: cache.asCache(), client: client.asClient(), nodeName: 'n1', logger, pollMs: POLL_MS, clock, now });
    requester.start();
    return {
      clock, cache, client, requester, now,
      /** Messages logged at warn or above. */
      warnings: (): string[] => ring.records.filter((r: { level: number }) => r.level >= bunyan.WARN).map((r: { msg: string }) => r.msg),
      /** Moves the clock to `ms`, one poll at a time, letting each poll's reads settle. */
      async advanceTo(ms: number): Promise<void> {
        while (clock.now() + POLL_MS <= ms) {
          clock.advance(POLL_MS);
          await new Promise((res) => setImmediate(res));
        }
      },
    };
  }

  /** `p` ends; `ended()` is its outcome once it has. */
  function track(p: Promise<BlockRequestOutcome>): () => BlockRequestOutcome | undefined {
    let ended: BlockRequestOutcome | undefined;
    void p.then((o) => (ended = o));
    return () => ended;
  }

  it('an answer whose block reaches the cache only after 30 s is allocated, not lost; the block is read twice meanwhile, the request once', async () => {
    const t = lagging();
    const waiting = t.requester.request('p', 600_000);
    const ended = track(waiting);
    // The answer is read at the second poll (2 s); the block 10 s later, then 10 s after that.
    await t.advanceTo(29_000);
    assert.equal(ended(), undefined, 'still waiting for the cache at 29 s: not lost 10 s after the answer');
    assert.deepEqual(t.client.blockReads, ['p-0', 'p-0'], 'the block read at 12 s and 22 s');
    assert.equal(t.client.reads.length, 1, 'the request is not read again once its answer is known');
    assert.deepEqual(t.client.requestsDeleted, [], 'not consumed while the answer waits for its block');
    const br = t.client.created[0]!;
    t.cache.emit(Kinds.AddressBlock, 'ADDED', answerBlock(br));
    assert.deepEqual(await waiting, { kind: 'allocated', blockName: 'p-0' });
    assert.equal(t.client.created.length, 1, 'no second request');
    assert.deepEqual(t.client.requestsDeleted, [{ name: br.metadata!.name!, uid: br.metadata!.uid! }]);
    assert.deepEqual(t.warnings(), []);
    t.requester.stop();
  });

  it('the ADD waiting on it gets an address of that block, with no second request', async () => {
    const t = lagging();
    const ipam = new NodeIpam({ cache: t.cache.asCache(), requester: t.requester, logger: silentLogger(), now: t.now, lowWaterMark: 0, coolingMs: 0, allocTimeoutMs: 600_000 });
    ipam.start();
    let got: string | undefined;
    const add = ipam.allocate({ pool: 'p', containerId: 'c1', ifname: 'eth0' }).then((a) => (got = a.ipv4));
    await t.advanceTo(29_000);
    assert.equal(got, undefined);
    assert.equal(t.client.created.length, 1, 'the ADD still waits on its first request');
    t.cache.emit(Kinds.AddressBlock, 'ADDED', answerBlock(t.client.created[0]!));
    await add;
    assert.match(got ?? '', /^10\.0\.0\.[0-3]$/);
    assert.equal(t.client.created.length, 1);
    ipam.stop();
    t.requester.stop();
  });

  for (const [what, block] of [
    ['the server does not hold the block', () => undefined],
    ['the block is another node\'s', (br: BlockRequest) => ({ ...answerBlock(br), metadata: { ...answerBlock(br).metadata, labels: { ...answerBlock(br).metadata!.labels, [LABEL_NODE]: 'n2' } } })],
    ['the block answers another request', (br: BlockRequest) => ({ ...answerBlock(br), metadata: { ...answerBlock(br).metadata, labels: { ...answerBlock(br).metadata!.labels, 'coil.cybozu.com/request': 'someone-else' } } })],
    ['the block is being deleted', (br: BlockRequest) => ({ ...answerBlock(br), metadata: { ...answerBlock(br).metadata, deletionTimestamp: new Date('2026-01-01T00:00:02Z') } })],
    ['the block is older than the request', (br: BlockRequest) => ({ ...answerBlock(br), metadata: { ...answerBlock(br).metadata, creationTimestamp: new Date('2020-01-01T00:00:00Z') } })],
  ] as const) {
    it(`an answer is lost at the first read of its block when ${what}`, async () => {
      const t = lagging(block);
      const waiting = t.requester.request('p', 600_000);
      const ended = track(waiting);
      await t.advanceTo(11_000);
      assert.equal(ended(), undefined, 'not read, not lost before 10 s');
      assert.deepEqual(t.client.blockReads, []);
      await t.advanceTo(13_000);
      assert.deepEqual(ended(), { kind: 'lost' });
      assert.deepEqual(t.client.blockReads, ['p-0']);
      assert.deepEqual(t.client.requestsDeleted.map((d) => d.uid), [t.client.created[0]!.metadata!.uid], 'the lost request consumed');
      t.requester.stop();
    });
  }

  it('a block deleted after a read saw it is lost at the next read', async () => {
    const t = lagging();
    const ended = track(t.requester.request('p', 600_000));
    await t.advanceTo(13_000);
    assert.deepEqual(t.client.blockReads, ['p-0']);
    t.client.apiOnly.delete('AddressBlock/p-0');
    await t.advanceTo(21_000);
    assert.equal(ended(), undefined, 'the deletion is not seen before the next read');
    await t.advanceTo(23_000);
    assert.deepEqual(ended(), { kind: 'lost' });
    assert.deepEqual(t.client.blockReads, ['p-0', 'p-0']);
    t.requester.stop();
  });

  it('a failed read of the block says nothing: read again on the backoff; a cache still behind after 60 s is warned about once', async () => {
    const t = lagging();
    const waiting = t.requester.request('p', 600_000);
    const ended = track(waiting);
    t.client.blockReadError = new Error('connect ECONNREFUSED');
    await t.advanceTo(21_000);
    assert.equal(ended(), undefined);
    assert.deepEqual(t.client.blockReads, ['p-0']);
    t.client.blockReadError = undefined;
    // Reads at 12 s (failed), 22 s, 42 s, 82 s, 142 s (60 s apart at most), 202 s.
    await t.advanceTo(210_000);
    assert.equal(ended(), undefined);
    assert.deepEqual(t.client.blockReads.length, 6);
    const lag = t.warnings().filter((m) => m.includes('cache still lacks it'));
    assert.equal(lag.length, 1, t.warnings().join('; '));
    t.cache.emit(Kinds.AddressBlock, 'ADDED', answerBlock(t.client.created[0]!));
    assert.deepEqual(await waiting, { kind: 'allocated', blockName: 'p-0' });
    t.requester.stop();
  });
});
