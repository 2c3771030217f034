import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { V1Pod } from '@kubernetes/client-node';
import { silentLogger } from '../../runtime/logging.js';
import { BlockRequester } from './block-request.js';
import { FakeBlockClient, FakeCoildCache, fakeBlock } from '../../../test/fakes/coild-cache.fake.js';
import { Kinds } from '../../api/v2/kinds.js';
import { KeyedMutex } from '../podnet/keyed-mutex.js';
import { NodeIpam } from './node-ipam.js';
import { FakePodNetwork } from '../../../test/fakes/pod-network.fake.js';
import { LeakReleaser } from './leak-release.js';
import { LEAK_RELEASE_RATE, LeakReleaseRequests } from './leak-release-requests.js';
import { FakeClock } from '../../../test/fakes/clock.fake.js';
import { ANN_RELEASE_PREFIX, leakReleaseKey, parseLeakReleaseRequest } from '../../api/v2/leak-release-request.js';

function lab() {
  const cache = new FakeCoildCache();
  cache.emit(Kinds.AddressBlock, 'ADDED', fakeBlock('p', 0, '10.8.0.0/30'));
  const logger = silentLogger();
  const requester = new BlockRequester({ cache: cache.asCache(), client: new FakeBlockClient().asClient(), nodeName: 'n1', logger });
  const ipam = new NodeIpam({ cache: cache.asCache(), requester, logger, coolingMs: 0, lowWaterMark: 0 });
  ipam.start();
  const podNetwork = new FakePodNetwork();
  const pods: V1Pod[] = [];
  const listed: string[] = [];
  const client = { list: async (_k: unknown, o?: { fieldSelector?: string }) => (listed.push(o?.fieldSelector ?? ''), pods) } as never;
  const releaser = new LeakReleaser({ ipam, podNetwork, locks: new KeyedMutex(), client, nodeName: 'n1', logger });
  const wire = async (c: string, pod?: { namespace: string; name: string }) => {
    const a = await ipam.allocate({ pool: 'p', containerId: c, ifname: 'eth0', ...(pod && { podNamespace: pod.namespace, podName: pod.name }) });
    await podNetwork.setup(`/run/netns/${c}`, { containerId: c, ifname: 'eth0', pool: 'p', ipv4: a.ipv4!, hostIPv4: '10.250.0.1' });
    return a.ipv4!;
  };
  const pod = (name: string, ip: string, hostNetwork = false): V1Pod => ({ metadata: { name, namespace: 'demo' }, spec: { nodeName: 'n1', hostNetwork, containers: [] }, status: { podIPs: [{ ip }] } });
  return { cache, ipam, podNetwork, pods, listed, releaser, wire, pod };
}

describe('LeakReleaser', () => {
  it('releases an allocation no Pod of the node is behind: veth torn down, address freed, on a live read of the node\'s Pods', async () => {
    const t = lab();
    const ip = await t.wire('leak', { namespace: 'demo', name: 'gone' });
    assert.deepEqual(await t.releaser.release({ containerId: 'leak', ifname: 'eth0', ipv4: ip }), { released: true, reason: 'released' });
    assert.equal(t.ipam.lookup('leak', 'eth0'), undefined);
    assert.equal(await t.podNetwork.inspect('leak', 'eth0'), undefined);
    assert.deepEqual(t.listed, ['spec.nodeName=n1']);
  });

  it('keeps an allocation whose address a Pod has, whose named Pod exists, or that holds other addresses than named', async () => {
    const t = lab();
    const held = await t.wire('held');
    const named = await t.wire('named', { namespace: 'demo', name: 'starting' });
    t.pods.push(t.pod('has-it', held), { metadata: { name: 'starting', namespace: 'demo' }, spec: { nodeName: 'n1', containers: [] }, status: {} });
    assert.deepEqual(await t.releaser.release({ containerId: 'held', ifname: 'eth0', ipv4: held }), { released: false, reason: 'Pod demo/has-it has the address' });
    assert.match((await t.releaser.release({ containerId: 'named', ifname: 'eth0', ipv4: named })).reason, /Pod demo\/starting, which the allocation names, exists/);
    assert.match((await t.releaser.release({ containerId: 'held', ifname: 'eth0', ipv4: '10.8.0.3' })).reason, /holds 10\.8\.0\.\d now, not the addresses named/);
    assert.deepEqual((await t.releaser.release({ containerId: 'nothing', ifname: 'eth0', ipv4: held })), { released: false, reason: 'no such allocation on this node' });
    assert.ok(t.ipam.lookup('held', 'eth0') && t.ipam.lookup('named', 'eth0'));
  });

  it('a host-network Pod with the node\'s address does not hold a pod address', async () => {
    const t = lab();
    const ip = await t.wire('leak');
    t.pods.push(t.pod('host', ip, true));
    assert.equal((await t.releaser.release({ containerId: 'leak', ifname: 'eth0', ipv4: ip })).released, true);
  });

  it('keeps an allocation of another block than the request was made on', async () => {
    const t = lab();
    const ip = await t.wire('leak');
    assert.deepEqual(await t.releaser.release({ containerId: 'leak', ifname: 'eth0', ipv4: ip }, 'p-9'), { released: false, reason: 'the allocation is in AddressBlock p-0, not p-9' });
    assert.ok(t.ipam.lookup('leak', 'eth0'));
    assert.deepEqual(t.listed, [], 'refused before any API read');
  });

  it('parses only a well-formed request annotation', () => {
    assert.deepEqual(parseLeakReleaseRequest(JSON.stringify({ containerId: 'c', ifname: 'eth0', ipv6: 'fd00::1' })), { containerId: 'c', ifname: 'eth0', ipv6: 'fd00::1' });
    for (const bad of [undefined, 'null', '"x"', 'x', '{}', { containerId: 'c', ifname: 'eth0' }, { containerId: '', ifname: 'eth0', ipv4: '1.2.3.4' }, { containerId: 'c', ifname: 3, ipv4: '1.2.3.4' }]) {
      const text = typeof bad === 'object' ? JSON.stringify(bad) : bad;
      assert.equal(parseLeakReleaseRequest(text), undefined, String(text));
    }
    assert.match(leakReleaseKey('c'.repeat(64), 'eth0'), /^release\.coil\.cybozu\.com\/[0-9a-f]{16}$/);
    assert.notEqual(leakReleaseKey('c', 'eth0'), leakReleaseKey('c', 'eth1'));
  });
});

describe('LeakReleaseRequests (a release request annotated on an AddressBlock)', () => {
  const setup = (clock?: FakeClock) => {
    const t = lab();
    const patches: { name: string; patch: { metadata: { annotations: Record<string, string> } } }[] = [];
    const client = { mergePatch: async (_k: unknown, key: { name: string }, patch: never) => void patches.push({ name: key.name, patch }) } as never;
    let ready = false;
    const requests = new LeakReleaseRequests({ cache: t.cache.asCache(), client, releaser: t.releaser, nodeName: 'n1', logger: silentLogger(), ready: () => ready, now: () => '2026-12-07T00:00:00.000Z', clock });
    requests.start();
    const annotate = (annotations: Record<string, string>) => t.cache.emit(Kinds.AddressBlock, 'MODIFIED', { ...fakeBlock('p', 0, '10.8.0.0/30'), metadata: { ...fakeBlock('p', 0, '10.8.0.0/30').metadata, annotations } });
    return { ...t, patches, requests, annotate, setReady: () => void (ready = true) };
  };

  it('releases the leak a request names once recovered, and answers in the annotation; an answered request is left alone', async () => {
    const t = setup();
    const ip = await t.wire('leak', { namespace: 'demo', name: 'gone' });
    const key = leakReleaseKey('leak', 'eth0');
    const value = JSON.stringify({ containerId: 'leak', ifname: 'eth0', ipv4: ip });
    t.annotate({ [key]: value });
    await t.requests.idle();
    assert.equal(t.patches.length, 0, 'not before the allocations are recovered');
    t.setReady();
    t.requests.scanAll();
    await t.requests.idle();
    assert.equal(t.ipam.lookup('leak', 'eth0'), undefined);
    assert.equal(t.patches.length, 1);
    assert.equal(t.patches[0]!.name, 'p-0');
    const answer = JSON.parse(t.patches[0]!.patch.metadata.annotations[key]!);
    assert.deepEqual(answer, { containerId: 'leak', ifname: 'eth0', ipv4: ip, outcome: { released: true, reason: 'released', node: 'n1', time: '2026-12-07T00:00:00.000Z' } });
    t.annotate({ [key]: JSON.stringify(answer) });
    await t.requests.idle();
    assert.equal(t.patches.length, 1, 'an answered request is not handled again');
  });

  it('refuses a running pod\'s allocation and a malformed request, each answered', async () => {
    const t = setup();
    t.setReady();
    const ip = await t.wire('held');
    t.pods.push(t.pod('has-it', ip));
    t.annotate({ [leakReleaseKey('held', 'eth0')]: JSON.stringify({ containerId: 'held', ifname: 'eth0', ipv4: ip }), [`${ANN_RELEASE_PREFIX}junk`]: 'not json' });
    await t.requests.idle();
    assert.ok(t.ipam.lookup('held', 'eth0'));
    const outcomes = t.patches.map((p) => Object.values(p.patch.metadata.annotations).map((v) => JSON.parse(v).outcome)[0]);
    assert.deepEqual(outcomes.map((o) => [o.released, o.reason]).sort(), [[false, 'Pod demo/has-it has the address'], [false, 'not a release request: expected JSON {"containerId", "ifname", "ipv4" and/or "ipv6"}']]);
  });

  it(`handles at most the rate's burst at once, then ${LEAK_RELEASE_RATE.perSecond} a second: a flood of requests costs a bounded rate of API calls`, async () => {
    const clock = new FakeClock();
    const t = setup(clock);
    t.setReady();
    const flood = LEAK_RELEASE_RATE.burst + 3;
    t.annotate(Object.fromEntries(Array.from({ length: flood }, (_, i) => [`${ANN_RELEASE_PREFIX}junk-${i}`, 'not json'])));
    const settle = async () => { for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r)); };
    await settle();
    assert.equal(t.patches.length, LEAK_RELEASE_RATE.burst, 'the burst is answered at once');
    clock.advance(1000 / LEAK_RELEASE_RATE.perSecond);
    await settle();
    assert.equal(t.patches.length, LEAK_RELEASE_RATE.burst + 1, 'then one per refill');
    for (let i = 0; i < 2; i++) { clock.advance(1000 / LEAK_RELEASE_RATE.perSecond); await settle(); }
    assert.equal(t.patches.length, flood);
    await t.requests.idle();
  });
});
