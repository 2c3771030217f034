// Races between coild's background readers of the host (GC, start-up recovery) and CNI calls, in
// real network namespaces: the real RtnetlinkPodNetwork with its LinkReaper, CniService, NodeIpam,
// NodeGc, recovery and the route exporter, in a "host" netns standing in for the node. The blocks
// come from an in-memory informer cache (the apiserver plays no part in these races).
//
// Every interleaving is driven by the test, never by timing: a GC pass's listing is held after it
// has read the kernel (HeldListing), the reaper's gathering delay is an hour so that its group
// delete runs only when the test calls reap(), and ADD waits inside its egress step on a promise.
// Needs root; skipped with the reason otherwise (under CI=true, a failure).
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { IpRunner } from '../../netlink/iproute2/ip-runner.js';
import { readLinks } from '../../netlink/link.js';
import { DEFAULT_RETIRED_LINK_GROUP } from '../../netlink/link-reaper.js';
import { TestNetnsSet, netnsSkipReason, type TestNetns } from '../../../test/netns/test-netns.js';
import { silentLogger } from '../../runtime/logging.js';
import type { EventRecorder } from '../../runtime/event-recorder.js';
import { BlockExport } from './block-export.js';
import { BlockReleaser } from './block-release.js';
import { BlockRequester } from './block-request.js';
import type { CniArgs } from '../rpc/cni-handler.js';
import { CniService, type EgressHook } from '../rpc/cni-service.js';
import { FakeBlockClient, FakeCoildCache, fakeBlock } from '../../../test/fakes/coild-cache.fake.js';
import { NodeGc } from './gc.js';
import { hostWiring } from '../podnet/pod-network-wiring.js';
import { validateSetup } from '../podnet/pod-network-validate.js';
import { KeyedMutex } from '../podnet/keyed-mutex.js';
import { Kinds } from '../../api/v2/kinds.js';
import { NodeIpam } from './node-ipam.js';
import { RtnetlinkPodNetwork } from '../podnet/pod-network-rtnetlink.js';
import { hostVethName, type PodNetwork, type PodNetworkEntry } from '../podnet/pod-network.js';
import { recoverAllocations } from './recovery.js';
import { IpRouteExporter } from './route-export.js';
import { prerequisite } from '../../../test/support/prerequisite.js';

const HOUR_MS = 3_600_000;
const RETIRED = String(DEFAULT_RETIRED_LINK_GROUP);

/** A promise with its resolve and reject in hand. */
function deferred<T = void>(): { promise: Promise<T>; resolve: (v: T) => void; reject: (e: unknown) => void } {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => { resolve = res; reject = rej; });
  return { promise, resolve, reject };
}

/**
 * The real PodNetwork, whose next list() (after `hold()`) returns what it read from the kernel
 * only once the test lets it: the pass then acts on a listing older than whatever the test did
 * in between.
 */
class HeldListing implements PodNetwork {
  private held: { listed: ReturnType<typeof deferred<void>>; go: ReturnType<typeof deferred<void>> } | undefined;

  constructor(private readonly pn: PodNetwork) {}

  /** Holds the next listing. @returns `listed` (resolves once the kernel was read) and `release()` */
  hold(): { listed: Promise<void>; release: () => void } {
    const h = { listed: deferred<void>(), go: deferred<void>() };
    this.held = h;
    return { listed: h.listed.promise, release: () => h.go.resolve() };
  }

  init = (): ReturnType<PodNetwork['init']> => this.pn.init();
  setup = (...a: Parameters<PodNetwork['setup']>): ReturnType<PodNetwork['setup']> => this.pn.setup(...a);
  check = (...a: Parameters<PodNetwork['check']>): ReturnType<PodNetwork['check']> => this.pn.check(...a);
  destroy = (...a: Parameters<PodNetwork['destroy']>): ReturnType<PodNetwork['destroy']> => this.pn.destroy(...a);
  reap = (): Promise<void> => this.pn.reap();
  inspect = (...a: Parameters<PodNetwork['inspect']>): ReturnType<PodNetwork['inspect']> => this.pn.inspect(...a);

  async list(): Promise<PodNetworkEntry[]> {
    const entries = await this.pn.list();
    const h = this.held;
    this.held = undefined;
    if (h) {
      h.listed.resolve();
      await h.go.promise;
    }
    return entries;
  }
}

const skip = prerequisite(netnsSkipReason());

describe('coild background readers racing CNI calls (real netns)', { skip }, () => {
  const ip = new IpRunner();
  const netns = new TestNetnsSet({ ip });
  let seq = 0;
  after(() => netns.cleanup());

  /**
   * One coild's parts over `host` (each test makes its own, so a failed test leaves nothing in the
   * next one's way); `egress` lets a test hold or fail ADD's last step.
   */
  function coild(host: TestNetns, o: { egress?: EgressHook; clockOffsetMs?: { ms: number } } = {}) {
    const cache = new FakeCoildCache();
    cache.put(Kinds.Node, { metadata: { name: 'n1', uid: 'node-uid' }, status: { addresses: [{ type: 'InternalIP', address: '10.250.0.1' }] } } as never);
    cache.put(Kinds.AddressPool, { metadata: { name: 'p' }, spec: { blockSizeBits: 2, subnets: [{ ipv4: '10.8.0.0/24' }] } } as never);
    cache.put(Kinds.Namespace, { metadata: { name: 'lab', annotations: { 'coil.cybozu.com/pool': 'p' } } });
    cache.put(Kinds.AddressBlock, fakeBlock('p', 0, '10.8.0.0/30'));
    cache.put(Kinds.AddressBlock, fakeBlock('p', 1, '10.8.0.4/30'));
    const offset = o.clockOffsetMs ?? { ms: 0 };
    const now = (): number => Date.now() + offset.ms;
    const logger = silentLogger();
    const client = new FakeBlockClient();
    const requester = new BlockRequester({ cache: cache.asCache(), client: client.asClient(), nodeName: 'n1', logger });
    const ipam = new NodeIpam({ cache: cache.asCache(), requester, logger, coolingMs: 0, lowWaterMark: 0, allocTimeoutMs: 1_000, now });
    ipam.start();
    const pn = new RtnetlinkPodNetwork({ ip, hostNetns: host.path, reapDelayMs: HOUR_MS });
    const held = new HeldListing(pn);
    const locks = new KeyedMutex();
    const recorder = { event: () => undefined } as unknown as EventRecorder;
    const service = new CniService({
      ipam, podNetwork: pn, cache: cache.asCache(), client: client.asClient(), recorder, locks, nodeName: 'n1', logger,
      notReadyReason: () => undefined, ...(o.egress ? { egress: o.egress } : {}),
    });
    const releaser = new BlockReleaser({ ipam, client: client.asClient(), logger, graceMs: HOUR_MS });
    const exporter = new BlockExport({ cache: cache.asCache(), exporter: new IpRouteExporter({ ip, hostNetns: host.path }), logger });
    const gc = new NodeGc({ ipam, podNetwork: held, releaser, exporter, locks, logger });
    return { host, cache, ipam, pn, held, service, gc, releaser, logger };
  }

  /** A pod: its own netns and the CNI arguments of its one interface. */
  async function pod(c: ReturnType<typeof coild>): Promise<CniArgs> {
    const ns = await netns.create('gcpod');
    const name = `pod${++seq}`;
    c.cache.put(Kinds.Pod, { metadata: { namespace: 'lab', name } } as never);
    return {
      containerId: `gcrace${process.pid}x${seq}`, netns: ns.path, ifname: 'eth0', path: '', stdinData: Buffer.from('{}'),
      ips: [], interfaces: {}, validAttachments: [], args: { K8S_POD_NAMESPACE: 'lab', K8S_POD_NAME: name },
    };
  }

  const hostLink = async (c: { host: TestNetns }, a: CniArgs) =>
    (await readLinks(ip, { netns: c.host.path })).find((l) => l.ifname === hostVethName(a.containerId, a.ifname));
  const newHost = (): Promise<TestNetns> => netns.create('gchost');

  /** Every test ends with the reaper run and nothing of coild left on the host. */
  async function settle(c: ReturnType<typeof coild>): Promise<void> {
    await c.pn.reap();
    c.releaser.stop();
    c.ipam.stop();
  }

  test('a GC pass whose listing predates a DEL does not adopt the veth that DEL retired', async () => {
    const c = coild(await newHost());
    const a = await pod(c);
    await c.service.add(a);
    const { listed, release } = c.held.hold();
    const pass = c.gc.run();
    await listed; // the pass has read the host: a's veth is live and holds an allocation
    await c.service.del(a); // retires the veth to the reaper, frees the address, lets go of the lock
    assert.equal((await hostLink(c, a))?.group, RETIRED, 'the veth waits in the reaper');
    release();
    const report = await pass;
    assert.deepEqual(report.adopted, [], 'adopted a veth that a DEL had retired');
    assert.equal(c.ipam.lookup(a.containerId, a.ifname), undefined);
    await c.pn.reap();
    assert.equal(await hostLink(c, a), undefined);
    assert.deepEqual(c.ipam.allocations(), [], 'an address outlives its veth');
    await settle(c);
  });

  test('a GC pass whose listing saw an ADD in flight does not adopt the veth that ADD rolled back', async () => {
    const wired = deferred();
    const proceed = deferred();
    const c = coild(await newHost(), {
      egress: {
        // ADD's last step: the veth is wired and the lock held; then the step fails and ADD undoes everything.
        onAdd: async () => { wired.resolve(); await proceed.promise; throw new Error('egress setup failed'); },
        onDel: async () => undefined,
      },
    });
    const a = await pod(c);
    const add = c.service.add(a);
    await wired.promise;
    const { listed, release } = c.held.hold();
    const pass = c.gc.run();
    await listed;
    proceed.resolve();
    await assert.rejects(add, /failed to setup pod network/);
    release();
    assert.deepEqual((await pass).adopted, [], 'adopted the veth of a failed ADD');
    assert.equal(c.ipam.lookup(a.containerId, a.ifname), undefined);
    await settle(c);
  });

  test('a GC pass listing while a DEL\'s veth waits in the reaper neither adopts nor frees anything', async () => {
    const c = coild(await newHost());
    const [a, b] = [await pod(c), await pod(c)];
    await c.service.add(a);
    await c.service.add(b);
    await c.service.del(a);
    assert.equal((await hostLink(c, a))?.group, RETIRED);
    const report = await c.gc.run();
    assert.deepEqual([report.adopted, report.freed], [[], []]);
    assert.deepEqual(c.ipam.allocations().map((x) => x.containerId), [b.containerId]);
    await c.service.del(b);
    await settle(c);
  });

  test('a GC pass whose listing predates an ADD never frees that pod\'s address, even after the clock stepped back', async () => {
    const clock = { ms: 0 };
    const c = coild(await newHost(), { clockOffsetMs: clock });
    const a = await pod(c);
    const { listed, release } = c.held.hold();
    const pass = c.gc.run();
    await listed; // the host has no veth of a yet
    clock.ms = -1_000; // NTP steps the wall clock back a second
    await c.service.add(a);
    release();
    assert.deepEqual((await pass).freed, [], 'freed the address of a live pod');
    assert.ok(c.ipam.lookup(a.containerId, a.ifname));
    assert.deepEqual(await c.pn.check({ containerId: a.containerId, ifname: a.ifname, ipv4: c.ipam.lookup(a.containerId, a.ifname)!.ipv4! }), []);
    await c.service.del(a);
    await settle(c);
  });

  test('a coild restarted while veths wait in the reaper recovers only live pods, and its init deletes the rest', async () => {
    const old = coild(await newHost());
    const [live, gone] = [await pod(old), await pod(old)];
    await old.service.add(live);
    await old.service.add(gone);
    await old.service.del(gone); // retired; the old coild dies before its reaper runs
    old.releaser.stop();
    old.ipam.stop();

    const next = coild(old.host);
    // Recovery before init's reap (the order does not matter: a retired veth is no pod's).
    const recovered = await recoverAllocations({ podNetwork: next.pn, ipam: next.ipam, releaser: next.releaser, logger: next.logger });
    assert.deepEqual(recovered.registered, [`${live.containerId}:eth0`]);
    assert.deepEqual((await next.gc.run()).adopted, []);
    await next.pn.init();
    assert.equal(await hostLink(next, gone), undefined, 'init deleted the veth the old coild had retired');
    assert.ok(await hostLink(next, live));
    await next.service.del(live);
    await settle(next);
  });

  test('an allocation recovered from a veth that a late DEL of the previous coild then retired is freed by the next GC pass', async () => {
    const old = coild(await newHost());
    const a = await pod(old);
    await old.service.add(a);
    old.releaser.stop();
    old.ipam.stop();
    const next = coild(old.host);
    await recoverAllocations({ podNetwork: next.pn, ipam: next.ipam, releaser: next.releaser, logger: next.logger });
    assert.ok(next.ipam.lookup(a.containerId, a.ifname));
    await old.pn.destroy(a.containerId, a.ifname); // the dead coild's last batch lands after recovery read the host
    assert.deepEqual((await next.gc.run()).freed, [`${a.containerId}:eth0`]);
    await old.pn.reap();
    await settle(next);
  });
  /**
   * What an ADD leaves when coild is killed between its host requests 2 and 3: the veth with the
   * pod's peer and coil's alias, no address on the host side and no pod-table route.
   */
  async function halfWire(c: ReturnType<typeof coild>, a: CniArgs): Promise<void> {
    const v = validateSetup(a.netns, { containerId: a.containerId, ifname: a.ifname, pool: 'p', ipv4: '10.8.0.1', hostIPv4: '10.250.0.1' });
    const wiring = hostWiring(v, { hostIfname: hostVethName(a.containerId, a.ifname), netnsPath: a.netns, mac: '02:00:00:00:00:01', podMac: '02:00:00:00:00:02', podTableId: 116, protocolId: 30 });
    await ip.apply(wiring.slice(0, 2), { netns: c.host.path });
  }

  test('start-up recovery deletes a veth that a killed ADD left half-wired (alias, no pod route), and registers the rest', async () => {
    const old = coild(await newHost());
    const [live, cut] = [await pod(old), await pod(old)];
    await old.service.add(live);
    await halfWire(old, cut);
    assert.deepEqual(new Map((await old.pn.list()).map((e) => [e.containerId, e.ipv4])), new Map([[live.containerId, '10.8.0.0'], [cut.containerId, undefined]]));
    old.releaser.stop();
    old.ipam.stop();
    const next = coild(old.host);
    const report = await recoverAllocations({ podNetwork: next.pn, ipam: next.ipam, releaser: next.releaser, logger: next.logger });
    assert.deepEqual([report.registered, report.removed], [[`${live.containerId}:eth0`], [`${cut.containerId}:eth0`]]);
    assert.equal(await hostLink(next, cut), undefined, 'the half-wired veth is gone');
    assert.deepEqual((await next.pn.list()).map((e) => e.containerId), [live.containerId]);
    // The runtime's retried ADD of the interrupted pod then wires it from scratch.
    for (const a of [live, cut]) next.cache.put(Kinds.Pod, { metadata: { namespace: 'lab', name: a.args.K8S_POD_NAME } } as never);
    await next.service.add(cut);
    assert.equal((await next.pn.list()).length, 2);
    await next.service.del(live);
    await next.service.del(cut);
    await settle(next);
  });

  test('a GC pass deletes a half-wired veth that appeared after recovery (no allocation, no pod route)', async () => {
    const c = coild(await newHost());
    const cut = await pod(c);
    await halfWire(c, cut);
    const report = await c.gc.run();
    assert.deepEqual([report.adopted, report.removed], [[], [`${cut.containerId}:eth0`]]);
    await c.pn.reap();
    assert.equal(await hostLink(c, cut), undefined);
    assert.deepEqual(c.ipam.allocations(), []);
    await settle(c);
  });
});
