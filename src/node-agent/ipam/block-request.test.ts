/**
 * BlockRequester's clean-up: coild deletes each BlockRequest it consumed, by UID, because Coil's
 * controller never does (docs/compatibility.md "BlockRequests").
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { BlockRequest } from '../../api/v2/blockrequest.js';
import type { Condition } from '../../api/v2/conditions.js';
import { LABEL_NODE, LABEL_POOL } from '../../api/v2/keys.js';
import { silentLogger } from '../../runtime/logging.js';
import { BlockRequester } from './block-request.js';
import { FakeBlockClient, FakeCoildCache, fakeBlock } from '../../../test/fakes/coild-cache.fake.js';
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
    const client = new FakeBlockClient((br) => setImmediate(() => cache.emit(Kinds.BlockRequest, 'ADDED', { ...br, status: { conditions: [COMPLETE, FAILED] } } as BlockRequest)));
    const r = new BlockRequester({ cache: cache.asCache(), client: client.asClient(), nodeName: 'n1', logger: silentLogger(), pollMs: 20 });
    r.start();
    assert.equal((await r.request('p', 2_000)).kind, 'failed');
    await settled();
    assert.deepEqual(client.requestsDeleted.map((d) => d.uid), [client.created[0]!.metadata!.uid]);
    r.stop();
  });

  it('keeps a timed-out request while it is outstanding, and deletes it once answered', async () => {
    const cache = new FakeCoildCache();
    const client = new FakeBlockClient((br) => setImmediate(() => cache.emit(Kinds.BlockRequest, 'ADDED', br)));
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

  it('deletes answered requests an earlier run left, but neither pending ones nor other nodes\'', async () => {
    const cache = new FakeCoildCache();
    cache.put(Kinds.BlockRequest, request('req-p-n1-old', 'u-old', { status: { conditions: [COMPLETE], addressBlockName: 'p-7' } }));
    cache.put(Kinds.BlockRequest, request('req-p-n1-pending', 'u-pending'));
    cache.put(Kinds.BlockRequest, request('req-p-n2-old', 'u-n2', { node: 'n2', status: { conditions: [COMPLETE], addressBlockName: 'p-8' } }));
    const client = new FakeBlockClient();
    const r = new BlockRequester({ cache: cache.asCache(), client: client.asClient(), nodeName: 'n1', logger: silentLogger(), pollMs: 20 });
    r.start();
    await settled();
    assert.deepEqual(client.requestsDeleted, [{ name: 'req-p-n1-old', uid: 'u-old' }]);
    r.stop();
  });
});

describe('BlockRequester after an API server outage', () => {
  it('cuts short the backoff of its informers while an ADD waits for a block the server already holds', async () => {
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

  it('backs off its own hurry while the server stays down: not a list of both informers every poll on every waiting node', async () => {
    // An ADD waits on a request created just before the outage. Each hurried list fails again (the
    // informer backs off anew); hurrying each poll would make every waiting node of the cluster
    // list twice a poll for the whole outage (hack/bench/scale.ts: 2 LISTs/s per node).
    const cache = new FakeCoildCache();
    const client = new FakeBlockClient();
    for (const kind of [Kinds.AddressBlock, Kinds.BlockRequest]) {
      const down = (): void => cache.backOff(kind, down);
      down();
    }
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
    const waiting = r.request('p', 2_000);
    await new Promise((res) => setTimeout(res, 300));
    outage = false; // the next hurried list succeeds: the informer watches again
    await new Promise((res) => setTimeout(res, 400));
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
    cache.backOff(Kinds.BlockRequest, () => undefined);
    await new Promise((res) => setTimeout(res, 100));
    assert.deepEqual(cache.retried, []);
    assert.ok(r.isPending('p'));
    r.stop();
  });
});
