/**
 * coild after its AddressBlocks were lost while its pods run (issue 25: coil uninstalled,
 * `kubectl delete addressblocks --all`, coil installed again), with the fake PodNetwork and a fake
 * controller: recovery keeps every pod's wiring, reports each address on its Pod, claims the block
 * back once, and GC registers the addresses into it when it comes back, so they are never handed
 * out again (docs/ipam-recovery.md).
 */
import assert from 'node:assert/strict';
import { afterEach, describe, it } from 'node:test';
import type { V1Pod } from '@kubernetes/client-node';
import type { BlockRequest } from '../../api/v2/blockrequest.js';
import { ANN_CLAIM_INDEX } from '../../api/v2/keys.js';
import { Kinds } from '../../api/v2/kinds.js';
import { silentLogger } from '../../runtime/logging.js';
import { FakeBlockClient, FakeCoildCache, fakeBlock } from '../../../test/fakes/coild-cache.fake.js';
import { FakePodNetwork } from '../../../test/fakes/pod-network.fake.js';
import { until } from '../../../test/fakes/timing.js';
import type { RouteExporter } from './route-export.js';
import { KeyedMutex } from '../podnet/keyed-mutex.js';
import { BlockExport } from './block-export.js';
import { BlockReleaser } from './block-release.js';
import { BlockRequester } from './block-request.js';
import { NodeGc } from './gc.js';
import { ipamSnapshot } from './introspection.js';
import { NodeIpam } from './node-ipam.js';
import { OrphanAddresses } from './orphans.js';
import { recoverAllocations } from './recovery.js';

const pod = (name: string, ip: string, node = 'n1', ip6?: string): V1Pod => ({
  apiVersion: 'v1', kind: 'Pod', metadata: { name, namespace: 'demo', uid: `uid-${name}` },
  spec: { nodeName: node, containers: [] }, status: { phase: 'Running', podIP: ip, podIPs: [{ ip }, ...(ip6 ? [{ ip: ip6 }] : [])] },
});
/** The IPv6 half of a dual-stack pod's address of the lab (`dual`): fd00:8::<last octet>. */
const v6 = (ip: string): string => `fd00:8::${ip.split('.')[3]}`;

/** Requesters of the labs built, stopped after each test. */
const running: BlockRequester[] = [];
afterEach(() => {
  for (const r of running.splice(0)) r.stop();
});

/**
 * Pool p: 10.8.0.0/28 in blocks of 4; block 0 (10.8.0.0/30) was lost while web-a and web-b use it.
 * `dual`: the pods were wired when p was dual stack (fd00:8::/124 beside it), and p was re-created
 * IPv4-only since (the README's uninstall, blocks and pools deleted, its first install example).
 */
async function lab(controller: 'grant' | 'refuse' | 'coil', o: { now?: () => number; dual?: boolean } = {}) {
  const cache = new FakeCoildCache();
  const six = (ip: string): string | undefined => (o.dual ? v6(ip) : undefined);
  cache.put(Kinds.Node, { metadata: { name: 'n1', uid: 'node-uid' } });
  cache.put(Kinds.AddressPool, { metadata: { name: 'p' }, spec: { blockSizeBits: 2, subnets: [{ ipv4: '10.8.0.0/28' }] } } as never);
  cache.put(Kinds.Pod, pod('web-a', '10.8.0.1', 'n1', six('10.8.0.1')));
  cache.put(Kinds.Pod, pod('web-b', '10.8.0.2', 'n1', six('10.8.0.2')));
  cache.put(Kinds.Pod, pod('elsewhere', '10.8.0.3', 'n2'));
  const client = new FakeBlockClient((br) => {
    if (br.metadata?.annotations?.[ANN_CLAIM_INDEX] === undefined) return;
    if (controller === 'coil') {
      // Coil's controller: the annotation means nothing to it; it allocates the lowest free block.
      const status = { addressBlockName: 'p-1', conditions: [{ type: 'Complete', status: 'True', reason: 'allocated', message: 'allocated a block p-1', lastTransitionTime: '' }] };
      setImmediate(() => {
        client.answer(br, status);
        cache.emit(Kinds.AddressBlock, 'ADDED', fakeBlock('p', 1, '10.8.0.4/30', { uid: br.metadata!.uid! }));
      });
      return;
    }
    const status = controller === 'grant'
      ? { addressBlockName: 'p-0', conditions: [{ type: 'Complete', status: 'True', reason: 'allocated', message: 'allocated a block p-0', lastTransitionTime: '' }] }
      : { conditions: [{ type: 'Complete', status: 'True', reason: 'completed with failure', message: '', lastTransitionTime: '' }, { type: 'Failed', status: 'True', reason: 'claim refused', message: 'live Pods of other nodes hold addresses of block p-0', lastTransitionTime: '' }] };
    setImmediate(() => {
      client.answer(br, status);
      if (controller === 'grant') cache.emit(Kinds.AddressBlock, 'ADDED', fakeBlock('p', 0, '10.8.0.0/30', { uid: br.metadata!.uid! }));
    });
  });
  const logger = silentLogger();
  // Polls every 2 ms: it reads each claim's answer by name one poll after the claim.
  const requester = new BlockRequester({ cache: cache.asCache(), client: client.asClient(), nodeName: 'n1', logger, pollMs: 2 });
  requester.start();
  running.push(requester);
  let orphans: OrphanAddresses | undefined;
  // Wired as coild wires them (coild.ts).
  const ipam = new NodeIpam({
    cache: cache.asCache(), requester, logger, coolingMs: 0, lowWaterMark: 0, allocTimeoutMs: 100,
    onExpectedRegistered: (key, blockName, withoutBlock) => (withoutBlock ? orphans?.note({ ...withoutBlock, registeredIn: blockName }) : orphans?.forget(key)),
    onFreed: (key) => orphans?.forget(key),
  });
  ipam.start();
  const podNetwork = new FakePodNetwork();
  for (const [c, ip] of [['ca', '10.8.0.1'], ['cb', '10.8.0.2'], ['cc', '10.8.0.9']] as const) {
    const ipv6 = six(ip);
    await podNetwork.setup(`/run/netns/${c}`, { containerId: c, ifname: 'eth0', pool: 'p', ipv4: ip, hostIPv4: '10.250.0.1', ...(ipv6 && { ipv6 }) });
  }
  /** What table 119 holds: the last sync's desired routes. */
  const table119: string[] = [];
  const exporter: RouteExporter = {
    sync: async (desired) => {
      table119.splice(0, table119.length, ...[...desired].sort());
      return { added: [], deleted: [] };
    },
    clear: async () => ({ added: [], deleted: [] }),
  };
  let blockExport: BlockExport | undefined;
  const releaser = new BlockReleaser({ ipam, client: client.asClient(), logger, graceMs: 1_000 });
  const reported: string[] = [];
  let backs = 0;
  orphans = new OrphanAddresses({
    cache: cache.asCache(), client: client.asClient(), requester, nodeName: 'n1', logger,
    unreadable: () => ipam.unreadableBlocks().map((b) => b.name),
    hold: { expect: (e) => ipam.expect(e), unexpect: (key) => ipam.unexpect(key) },
    reportOnPod: (p, message) => reported.push(`${p.metadata?.name}: ${message}`),
    onBlockBack: () => backs++,
    onExportChange: () => blockExport?.trigger(),
    ...(o.now && { now: o.now }),
  });
  orphans.start();
  const o2 = orphans;
  blockExport = new BlockExport({ cache: cache.asCache(), exporter, logger, extra: () => o2.exported() });
  const gc = new NodeGc({ ipam, podNetwork, releaser, exporter: blockExport, locks: new KeyedMutex(), logger, orphans });
  return { cache, client, ipam, podNetwork, releaser, orphans, gc, reported, backs: () => backs, logger, requester, table119, blockExport };
}

const tick = () => new Promise((r) => setTimeout(r, 10));

describe('coild: addresses whose block was lost while their pods run', () => {
  it('recovery keeps the wiring, claims the block back once, and GC registers the addresses into it', async () => {
    const t = await lab('grant');
    const report = await recoverAllocations({ podNetwork: t.podNetwork, ipam: t.ipam, releaser: t.releaser, logger: t.logger, orphans: t.orphans });
    assert.deepEqual([report.registered, report.removed], [[], []]);
    assert.deepEqual([...t.podNetwork.pods.keys()].sort(), ['ca:eth0', 'cb:eth0', 'cc:eth0'], 'every veth and route kept');
    const claims = t.client.created.filter((br) => br.metadata?.annotations?.[ANN_CLAIM_INDEX] !== undefined);
    assert.equal(claims.length, 1, 'one claim for block 0, which holds both addresses');
    assert.deepEqual([claims[0]!.metadata?.annotations?.[ANN_CLAIM_INDEX], claims[0]!.spec, claims[0]!.metadata?.ownerReferences?.[0]?.uid], ['0', { nodeName: 'n1', poolName: 'p' }, 'node-uid']);
    assert.deepEqual(t.reported.map((r) => r.split(':')[0]).sort(), ['web-a', 'web-b'], 'an Event on each Pod; none for an address no Pod shows');
    await until(() => t.ipam.lookup('ca', 'eth0') !== undefined, 'the claimed block back and its addresses registered');
    // Registered the moment the block arrived, before any ADD could be served from it.
    assert.deepEqual([t.ipam.lookup('ca', 'eth0')?.blockName, t.ipam.lookup('cb', 'eth0')?.ipv4], ['p-0', '10.8.0.2']);
    assert.deepEqual(t.orphans.list().map((o) => [o.containerId, o.state]), [['cc', 'no-pod']], 'the address no Pod shows stays kept and shown');
    const pass = await t.gc.run();
    assert.deepEqual(pass.adopted, []);
    assert.equal(t.podNetwork.pods.size, 3);
    const snap = ipamSnapshot(t.ipam, 'n1', [], Date.now(), t.orphans.list());
    assert.deepEqual(snap.orphans.map((o) => [o.ipv4, o.state]), [['10.8.0.9', 'no-pod']]);
    const next = await t.ipam.allocate({ pool: 'p', containerId: 'new', ifname: 'eth0' });
    assert.ok(!['10.8.0.1', '10.8.0.2'].includes(next.ipv4!), `a new pod got ${next.ipv4}, not a running pod's address`);
  });

  it('a refused claim leaves the wiring, shows why, and is asked again later', async () => {
    const t = await lab('refuse');
    await recoverAllocations({ podNetwork: t.podNetwork, ipam: t.ipam, releaser: t.releaser, logger: t.logger, orphans: t.orphans });
    const stateOfCa = () => {
      t.orphans.check();
      return t.orphans.list().find((o) => o.containerId === 'ca')?.state;
    };
    await until(() => stateOfCa() === 'refused', 'the claim refused');
    const a = t.orphans.list().find((o) => o.containerId === 'ca')!;
    assert.equal(a.state, 'refused');
    assert.match(a.message!, /claim refused: live Pods of other nodes/);
    assert.equal(t.podNetwork.pods.size, 3);
    await t.gc.run();
    assert.equal(t.podNetwork.pods.size, 3, 'GC keeps the wiring too');
    assert.equal(t.client.created.length, 1, 'not asked again within the retry period');
    // Block 0 reaches this node another way (an ordinary request): the running pods' addresses
    // are taken before the next ADD is served from it.
    t.cache.emit(Kinds.AddressBlock, 'ADDED', fakeBlock('p', 0, '10.8.0.0/30'));
    const got = [(await t.ipam.allocate({ pool: 'p', containerId: 'n1', ifname: 'eth0' })).ipv4, (await t.ipam.allocate({ pool: 'p', containerId: 'n2', ifname: 'eth0' })).ipv4];
    assert.deepEqual(got.sort(), ['10.8.0.0', '10.8.0.3']);
  });

  it('under a controller that does not know claims (Coil\'s), the extra block is harmless and the claim is asked again only rarely', async () => {
    const clock = { ms: 1_000_000 };
    const t = await lab('coil', { now: () => clock.ms });
    await recoverAllocations({ podNetwork: t.podNetwork, ipam: t.ipam, releaser: t.releaser, logger: t.logger, orphans: t.orphans });
    // The answer, another block than the one claimed, reaches the claim: refused (each check asks
    // at most once per retry period, so checking until then asks nothing more).
    await until(() => {
      t.orphans.check();
      return t.orphans.list().find((x) => x.containerId === 'ca')?.state === 'refused';
    }, 'the claim answered with another block');
    assert.equal(t.orphans.list().find((x) => x.containerId === 'ca')!.state, 'refused');
    assert.deepEqual(t.ipam.nodeBlocks().map((b) => [b.name, b.allocator.usedCount]), [['p-1', 0]], 'an empty extra block, released after its grace');
    clock.ms += 5 * 60_000;
    t.orphans.check();
    assert.equal(t.client.created.length, 1, 'not asked again after 5 minutes');
    clock.ms += 30 * 60_000;
    t.orphans.check();
    assert.equal(t.client.created.length, 2, 'asked again after 30 minutes');
  });

  it('an address of a family the pool no longer has stays in the allocation, exported alone and shown while its Pod runs; its DEL takes the route', async () => {
    const t = await lab('grant', { dual: true });
    await recoverAllocations({ podNetwork: t.podNetwork, ipam: t.ipam, releaser: t.releaser, logger: t.logger, orphans: t.orphans });
    await until(() => t.ipam.lookup('ca', 'eth0') !== undefined, 'the claimed IPv4-only block back and its addresses registered');
    // Both halves stay the pod's: an ADD retried or a CHECK sees what is wired, and a leak release matches it.
    assert.deepEqual(t.ipam.lookup('ca', 'eth0'), {
      key: 'ca:eth0', offset: 1, pool: 'p', blockName: 'p-0', containerId: 'ca', ifname: 'eth0', ipv4: '10.8.0.1', ipv6: 'fd00:8::1', withoutBlock: { ipv6: 'fd00:8::1' },
    });
    const half = t.orphans.list().find((x) => x.containerId === 'ca')!;
    assert.deepEqual([half.ipv4, half.ipv6, half.registeredIn, half.state, half.podName], [undefined, 'fd00:8::1', 'p-0', 'no-pool', 'web-a']);
    assert.match(half.message!, /pool p does not hold fd00:8::1: no block can hold it; exported alone while the Pod runs/);
    assert.ok(t.reported.some((r) => /^web-a: .*fd00:8::1 wired for this Pod .*no AddressPool holds it/.test(r)), t.reported.join('\n'));
    await t.blockExport.sync();
    assert.deepEqual(t.table119, ['10.8.0.0/30', 'fd00:8::1/128', 'fd00:8::2/128'], 'the block and each running Pod\'s IPv6 alone; not cc\'s (no Pod shows it)');
    // A GC pass (adoption's path) and a restart's recovery (register again) keep both halves too.
    await t.gc.run();
    assert.deepEqual(t.ipam.lookup('cb', 'eth0')?.ipv6, 'fd00:8::2');
    const snap = ipamSnapshot(t.ipam, 'n1', [], Date.now(), t.orphans.list());
    assert.deepEqual(snap.allocations.map((a) => [a.ipv4, a.ipv6]), [['10.8.0.1', 'fd00:8::1'], ['10.8.0.2', 'fd00:8::2']]);
    assert.deepEqual(snap.orphans.map((x) => [x.ipv4 ?? x.ipv6, x.state]), [['fd00:8::1', 'no-pool'], ['fd00:8::2', 'no-pool'], ['10.8.0.9', 'no-pod']]);
    // DEL of web-a (CniService: destroy, then free): its /128 leaves table 119.
    t.ipam.free('ca', 'eth0');
    await until(() => !t.table119.includes('fd00:8::1/128'), 'the DEL\'s route gone from table 119');
    assert.deepEqual(t.table119, ['10.8.0.0/30', 'fd00:8::2/128']);
    assert.deepEqual(t.orphans.list().map((x) => x.containerId), ['cb', 'cc']);
    // web-b's Pod finishes before its DEL: no live Pod shows the address, so it is not exported.
    t.cache.emit(Kinds.Pod, 'DELETED', t.cache.get(Kinds.Pod, 'web-b')!);
    await until(() => !t.table119.includes('fd00:8::2/128'), 'a finished Pod\'s address gone from table 119');
  });

  it('the half its block lacks is told apart when the pool holds it again: outside-block, still exported', async () => {
    const t = await lab('grant', { dual: true });
    await recoverAllocations({ podNetwork: t.podNetwork, ipam: t.ipam, releaser: t.releaser, logger: t.logger, orphans: t.orphans });
    await until(() => t.ipam.lookup('ca', 'eth0') !== undefined, 'registered into the IPv4-only block');
    t.cache.emit(Kinds.AddressPool, 'MODIFIED', { metadata: { name: 'p' }, spec: { blockSizeBits: 2, subnets: [{ ipv4: '10.8.0.0/28', ipv6: 'fd00:8::/124' }] } } as never);
    const half = t.orphans.list().find((x) => x.containerId === 'ca')!;
    assert.deepEqual([half.ipv6, half.state], ['fd00:8::1', 'outside-block']);
    assert.match(half.message!, /block p-0, which holds the Pod's other address, does not hold fd00:8::1/);
    assert.ok(t.orphans.exported().includes('fd00:8::1/128'));
    assert.equal(t.client.created.filter((br) => br.metadata?.annotations?.[ANN_CLAIM_INDEX] !== undefined).length, 1, 'no claim for a block this node holds already');
  });

  it('claims once the pool exists again (a reinstall re-creates the default pool after coild starts)', async () => {
    const t = await lab('grant');
    const pool = t.cache.get(Kinds.AddressPool, 'p')!;
    t.cache.emit(Kinds.AddressPool, 'DELETED', pool);
    await recoverAllocations({ podNetwork: t.podNetwork, ipam: t.ipam, releaser: t.releaser, logger: t.logger, orphans: t.orphans });
    assert.equal(t.orphans.list().find((x) => x.containerId === 'ca')!.state, 'no-pool');
    assert.equal(t.client.created.length, 0);
    t.cache.emit(Kinds.AddressPool, 'ADDED', pool);
    assert.equal(t.client.created.length, 1);
    await until(() => t.ipam.lookup('ca', 'eth0') !== undefined, 'the claimed block back and its addresses registered');
    assert.equal(t.ipam.lookup('ca', 'eth0')?.blockName, 'p-0');
  });
});
