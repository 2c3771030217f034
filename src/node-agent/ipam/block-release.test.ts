import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { AddressBlock } from '../../api/v2/addressblock.js';
import { FIN_COIL } from '../../api/v2/keys.js';
import type { Client } from '../../runtime/client.js';
import { ApiError } from '../../runtime/errors.js';
import type { KindDescriptor } from '../../runtime/kind.js';
import { silentLogger } from '../../runtime/logging.js';
import { BlockReleaser } from './block-release.js';
import { BlockRequester } from './block-request.js';
import { FakeBlockClient, FakeCoildCache, fakeBlock } from '../../../test/fakes/coild-cache.fake.js';
import { Kinds } from '../../api/v2/kinds.js';
import { NodeIpam } from './node-ipam.js';
import { FakeClock } from '../../../test/fakes/clock.fake.js';

/**
 * The API as the releaser sees it: one current object under the name, and what was done to it.
 * `holdWrites` delays the finalizer patch (a release on its way); `failNext` makes the next call of
 * a verb throw after applying it or not, as an apiserver that restarts mid-request may.
 */
class ReleaseClient extends FakeBlockClient {
  readonly finalizersRemoved: string[] = [];
  readonly deleted: string[] = [];
  current: AddressBlock | undefined;
  holdWrites: Promise<void> | undefined;
  readonly failNext: { get?: Error; removeFinalizer?: Error; delete?: { err: Error; applied: boolean } } = {};

  override async get(): Promise<undefined> {
    const err = this.failNext.get;
    this.failNext.get = undefined;
    if (err) throw err;
    return this.current as undefined;
  }
  async removeFinalizer(_kind: unknown, obj: AddressBlock): Promise<AddressBlock> {
    await this.holdWrites;
    const err = this.failNext.removeFinalizer;
    this.failNext.removeFinalizer = undefined;
    if (err) throw err;
    this.finalizersRemoved.push(obj.metadata!.uid!);
    if (this.current) this.current = { ...this.current, metadata: { ...this.current.metadata, finalizers: [] } };
    return obj;
  }
  override async delete(kind: KindDescriptor, key: { name: string }, o: { uid?: string } = {}): Promise<boolean> {
    if (kind === Kinds.BlockRequest) return super.delete(kind, key, o);
    const f = this.failNext.delete;
    this.failNext.delete = undefined;
    if (!f || f.applied) {
      this.deleted.push(o.uid!);
      this.current = undefined;
    }
    if (f) throw f.err;
    return true;
  }
}

const withUid = (uid: string, index = 0): AddressBlock => {
  const b = fakeBlock('p', index, `10.8.0.${index * 4}/30`);
  return { ...b, metadata: { ...b.metadata, uid, finalizers: [FIN_COIL] } };
};

function lab(timers?: FakeClock) {
  const cache = new FakeCoildCache();
  const clock = { ms: 1_000_000 };
  const now = (): number => clock.ms;
  const logger = silentLogger();
  const client = new ReleaseClient();
  const requester = new BlockRequester({ cache: cache.asCache(), client: client.asClient(), nodeName: 'n1', logger });
  const ipam = new NodeIpam({ cache: cache.asCache(), requester, logger, coolingMs: 0, lowWaterMark: 0, now });
  ipam.start();
  const releaser = new BlockReleaser({ ipam, client: client.asClient() as Client, logger, graceMs: 1_000, now, ...(timers && { timers }) });
  return { cache, clock, client, releaser, ipam };
}

/** p-0 empty past the grace period, p-1 holding one pod; the API shows p-0. */
function twoBlocks() {
  const t = lab();
  t.cache.emit(Kinds.AddressBlock, 'ADDED', withUid('uid-a'));
  t.cache.emit(Kinds.AddressBlock, 'ADDED', withUid('uid-b', 1));
  assert.deepEqual(t.ipam.register({ pool: 'p', containerId: 'x', ifname: 'eth0', ipv4: '10.8.0.4' }), { ok: true, blockName: 'p-1' });
  t.client.current = withUid('uid-a');
  t.clock.ms += 2_000;
  return t;
}
const inService = (t: ReturnType<typeof lab>, name: string) => !t.ipam.nodeBlocks().find((b) => b.name === name)!.releasing;
const lostAnswer = () => new TypeError('fetch failed');

describe('BlockReleaser', () => {
  it('releases the empty block it tracks, by its UID', async () => {
    const t = lab();
    t.cache.emit(Kinds.AddressBlock, 'ADDED', withUid('uid-a'));
    t.client.current = withUid('uid-a');
    t.clock.ms += 2_000;
    assert.deepEqual(await t.releaser.release(), ['p-0']);
    assert.deepEqual([t.client.finalizersRemoved, t.client.deleted], [['uid-a'], ['uid-a']]);
  });

  it('never touches a newer block that took the name (a lost answer of an earlier try)', async () => {
    const t = lab();
    t.cache.emit(Kinds.AddressBlock, 'ADDED', withUid('uid-a'));
    t.client.current = withUid('uid-b'); // uid-a is gone; the controller reused p-0
    t.clock.ms += 2_000;
    await t.releaser.release();
    assert.deepEqual([t.client.finalizersRemoved, t.client.deleted], [[], []]);
  });

  it('an ADD while a release is on its way to the apiserver never takes an address of that block; nor does GC adopt into it', async () => {
    const t = twoBlocks();
    let write!: () => void;
    t.client.holdWrites = new Promise((r) => (write = r));
    const releasing = t.releaser.release();
    const a = await t.ipam.allocate({ pool: 'p', containerId: 'c', ifname: 'eth0' });
    assert.equal(a.blockName, 'p-1');
    assert.deepEqual(t.ipam.register({ pool: 'p', containerId: 'o', ifname: 'eth0', ipv4: '10.8.0.1' }), { ok: false, reason: 'p-0 is being released' });
    write();
    assert.deepEqual(await releasing, ['p-0']);
  });

  it('a release whose delete was applied but whose answer was lost counts as done; the block never returns to service', async () => {
    const t = twoBlocks();
    t.client.failNext.delete = { err: lostAnswer(), applied: true };
    assert.deepEqual(await t.releaser.release(), ['p-0']);
    assert.equal(inService(t, 'p-0'), false);
    assert.equal(t.ipam.freeCount('p'), 3, 'only p-1 serves');
  });

  it('a release whose outcome cannot be read keeps the block out of service and settles it on a later pass', async () => {
    const t = twoBlocks();
    t.client.failNext.delete = { err: lostAnswer(), applied: true };
    const get = t.client.get.bind(t.client);
    let gets = 0;
    // The read after the failure fails too: the apiserver went down.
    t.client.get = async () => (++gets === 2 ? Promise.reject(lostAnswer()) : get());
    assert.deepEqual(await t.releaser.release(), []);
    assert.equal(inService(t, 'p-0'), false);
    t.clock.ms += 1_000; // past the retry backoff
    assert.deepEqual(await t.releaser.release(), ['p-0']);
    assert.equal(inService(t, 'p-0'), false);
    t.releaser.stop();
  });

  it('a release the apiserver refused before touching the block puts the block back into service', async () => {
    const t = twoBlocks();
    t.client.failNext.removeFinalizer = new ApiError(403, 'Forbidden', 'forbidden');
    assert.deepEqual(await t.releaser.release(), []);
    assert.equal(inService(t, 'p-0'), true);
    t.releaser.stop();
  });

  it('backs off while the apiserver is unreachable instead of retrying every few ms', async () => {
    const cache = new FakeCoildCache();
    const logger = silentLogger();
    let gets = 0;
    const client = new ReleaseClient();
    client.get = async () => {
      gets++;
      throw new TypeError('fetch failed');
    };
    const requester = new BlockRequester({ cache: cache.asCache(), client: client.asClient(), nodeName: 'n1', logger });
    const ipam = new NodeIpam({ cache: cache.asCache(), requester, logger, coolingMs: 0, lowWaterMark: 0 });
    ipam.start();
    const releaser = new BlockReleaser({ ipam, client: client.asClient() as Client, logger, graceMs: 0 });
    cache.emit(Kinds.AddressBlock, 'ADDED', withUid('uid-a'));
    assert.deepEqual(await releaser.release(), []);
    await new Promise((r) => setTimeout(r, 300));
    releaser.stop();
    assert.equal(gets, 1, 'the retry waits ≥ 500 ms after a failed pass');
  });
});

describe('BlockReleaser as a Manager runnable', () => {
  it('its stop disarms the timer and waits for the release in flight; no timer fires after it', async () => {
    const timers = new FakeClock();
    const t = lab(timers);
    t.cache.emit(Kinds.AddressBlock, 'ADDED', withUid('uid-a'));
    t.client.current = withUid('uid-a');
    let write!: () => void;
    t.client.holdWrites = new Promise((r) => (write = r));
    const stop = new AbortController();
    const running = t.releaser.run(stop.signal);
    t.releaser.schedule();
    assert.equal(timers.pending().length, 1, 'armed for the end of the grace period');
    t.clock.ms += 2_000;
    timers.advance(timers.pending()[0]!);
    await new Promise((r) => setImmediate(r));
    let returned = false;
    void running.then(() => (returned = true));
    stop.abort();
    for (let i = 0; i < 10; i++) await new Promise((r) => setImmediate(r));
    assert.equal(returned, false, 'waits for the release on its way to the apiserver');
    write();
    await running;
    assert.deepEqual(t.client.deleted, ['uid-a']);
    t.cache.emit(Kinds.AddressBlock, 'ADDED', withUid('uid-c', 2));
    t.clock.ms += 2_000;
    t.releaser.schedule();
    assert.deepEqual(timers.pending(), [], 'nothing is armed after the stop');
  });
});
