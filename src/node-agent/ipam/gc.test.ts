import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { silentLogger } from '../../runtime/logging.js';
import { BlockExport } from './block-export.js';
import { BlockReleaser } from './block-release.js';
import { BlockRequester } from './block-request.js';
import { FakeBlockClient, FakeCoildCache, fakeBlock } from '../../../test/fakes/coild-cache.fake.js';
import { NodeGc } from './gc.js';
import { FakeClock } from '../../../test/fakes/clock.fake.js';
import { Manager } from '../../runtime/manager.js';
import { Registry } from '../../runtime/registry.js';
import { KubeConfig } from '@kubernetes/client-node';
import { KeyedMutex } from '../podnet/keyed-mutex.js';
import { Kinds } from '../../api/v2/kinds.js';
import { NodeIpam } from './node-ipam.js';
import { FakePodNetwork } from '../../../test/fakes/pod-network.fake.js';
import type { RouteExporter } from './route-export.js';

function lab(loop: { clock?: FakeClock; intervalMs?: number } = {}) {
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
  const gc = new NodeGc({ ipam, podNetwork, releaser, exporter: blockExport, locks, logger, ...loop });
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

/** Lets every settled promise run its callbacks (no time passes on any clock). */
async function settle(): Promise<void> {
  for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r));
}

/** A Manager without kinds, reconcilers or leader election: it makes no API call. */
function manager(): Manager {
  const kc = new KubeConfig();
  kc.loadFromOptions({ clusters: [{ name: 'c', server: 'https://127.0.0.1:1' }], users: [{ name: 'u' }], contexts: [{ name: 'x', cluster: 'c', user: 'u' }], currentContext: 'x' });
  return new Manager({ kubeConfig: kc, registry: new Registry(), logger: silentLogger(), defaultMetrics: false, gracefulShutdownTimeoutMs: 60_000 });
}

describe('NodeGc as a Manager runnable', () => {
  /** The lab with a GC whose host listing waits for `hold` to be released; counts the listings. */
  function held() {
    const clock = new FakeClock();
    const t = lab({ clock, intervalMs: 300_000 });
    const hold = { passes: 0, release: (): void => undefined };
    const list = t.podNetwork.list.bind(t.podNetwork);
    t.podNetwork.list = async () => {
      hold.passes++;
      await new Promise<void>((r) => (hold.release = r));
      return list();
    };
    return { ...t, clock, hold };
  }

  it('passes every --addressblock-gc-interval on its clock; stopping the Manager waits for the pass in flight, and no pass starts after', async (ctx) => {
    const t = held();
    const mgr = manager();
    await mgr.start();
    ctx.after(async () => {
      t.hold.release();
      await mgr.stop(); // a failed assertion must not leave the Manager keeping the process alive
    });
    mgr.add({ name: 'gc', leaderOnly: false }, t.gc.runnable());
    t.clock.advance(299_999);
    await settle();
    assert.equal(t.hold.passes, 0, 'the first pass comes one interval after the start');
    t.clock.advance(1);
    await settle();
    assert.equal(t.hold.passes, 1);
    let stopped = false;
    const stopping = mgr.stop().then(() => (stopped = true));
    await settle();
    assert.equal(stopped, false, 'the Manager waits for the GC pass in flight');
    const synced = t.synced.length;
    t.hold.release();
    await stopping;
    assert.equal(t.synced.length, synced + 1, 'the pass ran to its end (table 119 re-synced) before the stop returned');
    t.clock.advance(3_600_000);
    await settle();
    assert.equal(t.hold.passes, 1, 'no pass after stop');
    assert.deepEqual(t.clock.pending(), [], 'no timer of the loop left armed');
  });

  it('a SIGHUP pass (run() called directly) in flight is waited for too', async (ctx) => {
    const t = held();
    const mgr = manager();
    await mgr.start();
    ctx.after(async () => {
      t.hold.release();
      await mgr.stop();
    });
    mgr.add({ name: 'gc', leaderOnly: false }, t.gc.runnable());
    const pass = t.gc.run();
    await settle();
    let stopped = false;
    const stopping = mgr.stop().then(() => (stopped = true));
    await settle();
    assert.equal(stopped, false);
    t.hold.release();
    await pass;
    await stopping;
  });
});
