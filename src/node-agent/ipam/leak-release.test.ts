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
import { LeakReleaser, parseLeakReleaseRequest } from './leak-release.js';

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
  return { ipam, podNetwork, pods, listed, releaser, wire, pod };
}

describe('LeakReleaser (POST /ipam/release)', () => {
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

  it('parses only a well-formed request', () => {
    assert.deepEqual(parseLeakReleaseRequest({ containerId: 'c', ifname: 'eth0', ipv6: 'fd00::1' }), { containerId: 'c', ifname: 'eth0', ipv6: 'fd00::1' });
    for (const bad of [undefined, null, 'x', {}, { containerId: 'c', ifname: 'eth0' }, { containerId: '', ifname: 'eth0', ipv4: '1.2.3.4' }, { containerId: 'c', ifname: 3, ipv4: '1.2.3.4' }]) {
      assert.equal(parseLeakReleaseRequest(bad), undefined, JSON.stringify(bad));
    }
  });
});
