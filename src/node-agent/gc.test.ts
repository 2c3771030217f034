import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { silentLogger } from '../runtime/logging.js';
import { BlockExport } from './block-export.js';
import { BlockReleaser } from './block-release.js';
import { BlockRequester } from './block-request.js';
import { FakeBlockClient, FakeCoildCache, fakeBlock } from '../../test/fakes/coild-cache.fake.js';
import { NodeGc } from './gc.js';
import { KeyedMutex } from './keyed-mutex.js';
import { Kinds } from '../api/v2/kinds.js';
import { NodeIpam } from './node-ipam.js';
import { FakePodNetwork } from '../../test/fakes/pod-network.fake.js';
import type { RouteExporter } from './route-export.js';

function lab() {
  const cache = new FakeCoildCache();
  cache.emit(Kinds.AddressBlock, 'ADDED', fakeBlock('p', 0, '10.8.0.0/30'));
  cache.emit(Kinds.AddressBlock, 'ADDED', fakeBlock('p', 1, '10.8.0.4/30'));
  const clock = { ms: 1_000_000 };
  const now = (): number => clock.ms;
  const logger = silentLogger();
  const client = new FakeBlockClient();
  const requester = new BlockRequester({ cache: cache.asCache(), client: client.asClient(), nodeName: 'n1', logger });
  const ipam = new NodeIpam({ cache: cache.asCache(), requester, logger, coolingMs: 0, lowWaterMark: 0, now });
  ipam.start();
  const podNetwork = new FakePodNetwork();
  const synced: string[][] = [];
  const exporter: RouteExporter = { sync: async (d) => { synced.push([...d]); return { added: [], deleted: [] }; }, clear: async () => ({ added: [], deleted: [] }) };
  const releaser = new BlockReleaser({ ipam, client: client.asClient(), logger, graceMs: 1_000, now });
  const blockExport = new BlockExport({ cache: cache.asCache(), exporter, logger });
  const locks = new KeyedMutex();
  const gc = new NodeGc({ ipam, podNetwork, releaser, exporter: blockExport, locks, logger });
  const wire = async (c: string) => {
    const a = await ipam.allocate({ pool: 'p', containerId: c, ifname: 'eth0' });
    await podNetwork.setup(`/run/netns/${c}`, { containerId: c, ifname: 'eth0', pool: 'p', ipv4: a.ipv4!, hostIPv4: '10.250.0.1' });
  };
  return { ipam, podNetwork, gc, locks, clock, synced, wire, releaser };
}

describe('NodeGc', () => {
  it('frees allocations whose veth is gone, keeps live ones, and re-syncs table 119', async () => {
    const t = lab();
    await t.wire('live');
    await t.wire('gone');
    await t.podNetwork.destroy('gone', 'eth0');
    t.clock.ms += 10;
    assert.deepEqual((await t.gc.run()).freed, ['gone:eth0']);
    assert.deepEqual(t.ipam.allocations().map((a) => a.containerId), ['live']);
    assert.deepEqual(t.synced.at(-1), ['10.8.0.0/30', '10.8.0.4/30']);
  });

  it('adopts a coil veth that holds no allocation, so its address is not handed out again', async () => {
    const t = lab();
    await t.podNetwork.setup('/run/netns/orphan', { containerId: 'orphan', ifname: 'eth0', pool: 'p', ipv4: '10.8.0.0', hostIPv4: '10.250.0.1' });
    assert.deepEqual((await t.gc.run()).adopted, ['orphan:eth0']);
    assert.notEqual((await t.ipam.allocate({ pool: 'p', containerId: 'next', ifname: 'eth0' })).ipv4, '10.8.0.0');
  });

  it('leaves an allocation alone while its ADD is in flight, and keeps it once the ADD has wired the pod', async () => {
    const t = lab();
    let wire!: () => void;
    const add = t.locks.run('fresh:eth0', async () => {
      await t.ipam.allocate({ pool: 'p', containerId: 'fresh', ifname: 'eth0' });
      await new Promise<void>((r) => (wire = r));
      await t.podNetwork.setup('/run/netns/fresh', { containerId: 'fresh', ifname: 'eth0', pool: 'p', ipv4: t.ipam.lookup('fresh', 'eth0')!.ipv4!, hostIPv4: '10.250.0.1' });
    });
    assert.deepEqual((await t.gc.run()).freed, []);
    wire();
    await add;
    assert.deepEqual((await t.gc.run()).freed, []);
    assert.ok(t.ipam.lookup('fresh', 'eth0'));
  });

  it('frees an allocation that no ADD holds and no veth carries', async () => {
    const t = lab();
    await t.ipam.allocate({ pool: 'p', containerId: 'lost', ifname: 'eth0' });
    assert.deepEqual((await t.gc.run()).freed, ['lost:eth0']);
  });

  it('releases a block that has been empty past the grace period', async () => {
    const t = lab();
    await t.wire('a'); // p-0 in use; p-1 empty since it appeared
    t.clock.ms += 600;
    await t.podNetwork.destroy('a', 'eth0');
    t.ipam.free('a', 'eth0');
    assert.deepEqual((await t.gc.run()).released, []);
    t.clock.ms += 400;
    assert.deepEqual((await t.gc.run()).released, ['p-1']);
    t.clock.ms += 600;
    assert.deepEqual((await t.gc.run()).released, ['p-0']);
    t.releaser.stop();
  });
});
