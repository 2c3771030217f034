import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { AddressBlock } from '../api/v2/addressblock.js';
import type { Client } from '../runtime/client.js';
import type { KindDescriptor } from '../runtime/kind.js';
import { silentLogger } from '../runtime/logging.js';
import { BlockReleaser } from './block-release.js';
import { BlockRequester } from './block-request.js';
import { FakeBlockClient, FakeCoildCache, fakeBlock } from './coild-cache.fake.js';
import { CoildKinds } from './kinds.js';
import { NodeIpam } from './node-ipam.js';

/** The API as the releaser sees it: one current object under the name, and what was done to it. */
class ReleaseClient extends FakeBlockClient {
  readonly finalizersRemoved: string[] = [];
  readonly deleted: string[] = [];
  current: AddressBlock | undefined;

  override async get(): Promise<undefined> {
    return this.current as undefined;
  }
  async removeFinalizer(_kind: unknown, obj: AddressBlock): Promise<AddressBlock> {
    this.finalizersRemoved.push(obj.metadata!.uid!);
    return obj;
  }
  override async delete(kind: KindDescriptor, key: { name: string }, o: { uid?: string } = {}): Promise<boolean> {
    if (kind === CoildKinds.BlockRequest) return super.delete(kind, key, o);
    this.deleted.push(o.uid!);
    return true;
  }
}

const withUid = (uid: string): AddressBlock => {
  const b = fakeBlock('p', 0, '10.8.0.0/30');
  return { ...b, metadata: { ...b.metadata, uid } };
};

function lab() {
  const cache = new FakeCoildCache();
  const clock = { ms: 1_000_000 };
  const now = (): number => clock.ms;
  const logger = silentLogger();
  const client = new ReleaseClient();
  const requester = new BlockRequester({ cache: cache.asCache(), client: client.asClient(), nodeName: 'n1', logger });
  const ipam = new NodeIpam({ cache: cache.asCache(), requester, logger, coolingMs: 0, lowWaterMark: 0, now });
  ipam.start();
  const releaser = new BlockReleaser({ ipam, client: client.asClient() as Client, logger, graceMs: 1_000, now });
  return { cache, clock, client, releaser };
}

describe('BlockReleaser', () => {
  it('releases the empty block it tracks, by its UID', async () => {
    const t = lab();
    t.cache.emit(CoildKinds.AddressBlock, 'ADDED', withUid('uid-a'));
    t.client.current = withUid('uid-a');
    t.clock.ms += 2_000;
    assert.deepEqual(await t.releaser.release(), ['p-0']);
    assert.deepEqual([t.client.finalizersRemoved, t.client.deleted], [['uid-a'], ['uid-a']]);
  });

  it('never touches a newer block that took the name (a lost answer of an earlier try)', async () => {
    const t = lab();
    t.cache.emit(CoildKinds.AddressBlock, 'ADDED', withUid('uid-a'));
    t.client.current = withUid('uid-b'); // uid-a is gone; the controller reused p-0
    t.clock.ms += 2_000;
    await t.releaser.release();
    assert.deepEqual([t.client.finalizersRemoved, t.client.deleted], [[], []]);
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
    cache.emit(CoildKinds.AddressBlock, 'ADDED', withUid('uid-a'));
    assert.deepEqual(await releaser.release(), []);
    await new Promise((r) => setTimeout(r, 300));
    releaser.stop();
    assert.equal(gets, 1, 'the retry waits ≥ 500 ms after a failed pass');
  });
});
