import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { BlockRequest } from '../../api/v2/blockrequest.js';
import { silentLogger } from '../../runtime/logging.js';
import type { EventRecorder } from '../../runtime/event-recorder.js';
import { BlockRequester } from '../ipam/block-request.js';
import { CniError } from './cni-error.js';
import type { CniArgs } from './cni-handler.js';
import { CniService } from './cni-service.js';
import { FakeBlockClient, FakeCoildCache, fakeBlock } from '../../../test/fakes/coild-cache.fake.js';
import { KeyedMutex } from '../podnet/keyed-mutex.js';
import { Kinds } from '../../api/v2/kinds.js';
import { NodeIpam } from '../ipam/node-ipam.js';
import { FakePodNetwork } from '../../../test/fakes/pod-network.fake.js';

/** CniService over fakes: node n1 (InternalIP 10.250.0.1), pool `default` with one /30 block, pod web in ns lab. */
function lab(o: { failRequests?: boolean; notReady?: string } = {}) {
  const cache = new FakeCoildCache();
  cache.put(Kinds.Node, { metadata: { name: 'n1', uid: 'node-uid' }, status: { addresses: [{ type: 'InternalIP', address: '10.250.0.1' }] } } as never);
  cache.put(Kinds.AddressPool, { metadata: { name: 'default' }, spec: { blockSizeBits: 2, subnets: [{ ipv4: '10.8.0.0/24' }] } } as never);
  cache.put(Kinds.Namespace, { metadata: { name: 'lab' } });
  cache.put(Kinds.Namespace, { metadata: { name: 'lost', annotations: { 'coil.cybozu.com/pool': 'nope' } } });
  cache.put(Kinds.AddressBlock, fakeBlock('default', 0, '10.8.0.0/30'));
  for (const [ns, name] of [['lab', 'web'], ['lost', 'web']]) cache.put(Kinds.Pod, { metadata: { namespace: ns, name } } as never);
  const client = new FakeBlockClient((br) => {
    if (!o.failRequests) return;
    const status = { conditions: [{ type: 'Failed', status: 'True', reason: 'out of blocks', message: 'pool default does not have free blocks', lastTransitionTime: '' }] };
    setImmediate(() => client.answer(br, status));
  });
  const logger = silentLogger();
  const requester = new BlockRequester({ cache: cache.asCache(), client: client.asClient(), nodeName: 'n1', logger, pollMs: 20 });
  const ipam = new NodeIpam({ cache: cache.asCache(), requester, logger, lowWaterMark: 0, coolingMs: 0, allocTimeoutMs: 1_000 });
  requester.start();
  ipam.start();
  const podNetwork = new FakePodNetwork();
  const events: string[] = [];
  const recorder = { event: (_o: unknown, type: string, reason: string) => events.push(`${type} ${reason}`) } as unknown as EventRecorder;
  const service = new CniService({
    ipam, podNetwork, cache: cache.asCache(), client: client.asClient(), recorder, locks: new KeyedMutex(), nodeName: 'n1', logger,
    notReadyReason: () => o.notReady,
  });
  const args = (containerId: string, extra: Partial<CniArgs> = {}): CniArgs => ({
    containerId, netns: `/run/netns/${containerId}`, ifname: 'eth0', path: '', stdinData: Buffer.from('{}'), ips: [], interfaces: {}, validAttachments: [],
    args: { K8S_POD_NAMESPACE: 'lab', K8S_POD_NAME: 'web' }, ...extra,
  });
  return { service, ipam, podNetwork, events, args, cache, client, done: () => requester.stop() };
}

const cniCode = (code: number, msg?: RegExp) => (e: unknown) => e instanceof CniError && e.code === code && (msg === undefined || msg.test(e.message));

describe('CniService', () => {
  it('ADD wires the pod with its address and the node IP as gateway; a repeated ADD keeps the address', async () => {
    const t = lab();
    const r = await t.service.add(t.args('c1'));
    assert.deepEqual(r.ips, [{ address: '10.8.0.0/32', gateway: '10.250.0.1', interface: 0 }]);
    assert.equal(r.interfaces?.[0]?.sandbox, '/run/netns/c1');
    assert.deepEqual((await t.service.add(t.args('c1'))).ips, r.ips);
    assert.equal(t.podNetwork.pods.get('c1:eth0')?.pool, 'default');
    t.done();
  });

  it('ADD refuses chaining, a missing pod name, an unknown pod and a pool that does not exist', async () => {
    const t = lab();
    await assert.rejects(t.service.add(t.args('c1', { args: { IS_CHAINED: 'true', K8S_POD_NAMESPACE: 'lab', K8S_POD_NAME: 'web' } })), cniCode(2, /first plugin/));
    await assert.rejects(t.service.add(t.args('c1', { args: { K8S_POD_NAMESPACE: 'lab' } })), cniCode(4, /missing pod name/));
    await assert.rejects(t.service.add(t.args('c1', { args: { K8S_POD_NAMESPACE: 'lab', K8S_POD_NAME: 'ghost' } })), cniCode(3, /pod not found/));
    await assert.rejects(t.service.add(t.args('c1', { args: { K8S_POD_NAMESPACE: 'lost', K8S_POD_NAME: 'web' } })), cniCode(7, /AddressPool "nope" does not exist/));
    assert.deepEqual(t.ipam.allocations(), []);
    t.done();
  });

  it("ADD in a namespace the cache has not seen yet takes the pool of the namespace's annotation, read from the API server", async () => {
    const t = lab();
    t.cache.put(Kinds.AddressPool, { metadata: { name: 'fresh' }, spec: { blockSizeBits: 2, subnets: [{ ipv4: '10.9.0.0/24' }] } } as never);
    t.cache.put(Kinds.Pod, { metadata: { namespace: 'new', name: 'web' } } as never);
    t.client.apiOnly.set('Namespace/new', { metadata: { name: 'new', annotations: { 'coil.cybozu.com/pool': 'fresh' } } });
    // No block of `fresh` is ever granted here: the ADD times out, after asking for one.
    await assert.rejects(t.service.add(t.args('c1', { args: { K8S_POD_NAMESPACE: 'new', K8S_POD_NAME: 'web' } })), CniError);
    assert.deepEqual(t.client.created.map((br) => br.spec?.poolName), ['fresh']);
    assert.deepEqual(t.ipam.allocations(), [], 'no address of the default pool was taken');
    t.done();
  });

  it('a failed wiring frees the address again', async () => {
    const t = lab();
    t.podNetwork.failNextSetup(new Error('EPERM'));
    await assert.rejects(t.service.add(t.args('c1')), cniCode(999, /failed to setup pod network/));
    assert.deepEqual(t.ipam.allocations(), []);
    t.done();
  });

  it('out of blocks is a CNI error naming the pool, with a Warning Event on the pod', async () => {
    const t = lab({ failRequests: true });
    for (const c of ['c1', 'c2', 'c3', 'c4']) await t.service.add(t.args(c));
    await assert.rejects(t.service.add(t.args('c5')), cniCode(999, /pool default has no free block.*out of blocks/));
    assert.deepEqual(t.events, ['Warning AddressPoolExhausted']);
    assert.equal(t.ipam.allocations().length, 4);
    t.done();
  });

  it('DEL releases wiring and address, and succeeds again when nothing is left', async () => {
    const t = lab();
    await t.service.add(t.args('c1'));
    await t.service.del(t.args('c1'));
    await t.service.del(t.args('c1'));
    assert.equal(t.podNetwork.pods.size, 0);
    assert.deepEqual(t.ipam.allocations(), []);
    t.done();
  });

  it('CHECK fails for an unknown container and for a pod whose wiring is gone', async () => {
    const t = lab();
    await assert.rejects(t.service.check(t.args('c1')), cniCode(3));
    await t.service.add(t.args('c1'));
    await t.service.check(t.args('c1'));
    await t.podNetwork.destroy('c1', 'eth0');
    await assert.rejects(t.service.check(t.args('c1')), cniCode(999, /not found/));
    t.done();
  });

  it('GC (CNI 1.1) frees every attachment the runtime did not list as valid', async () => {
    const t = lab();
    for (const c of ['c1', 'c2', 'c3']) await t.service.add(t.args(c));
    await t.service.gc(t.args('', { validAttachments: [{ containerId: 'c2', ifname: 'eth0' }] }));
    assert.deepEqual(t.ipam.allocations().map((a) => a.containerId), ['c2']);
    assert.deepEqual([...t.podNetwork.pods.keys()], ['c2:eth0']);
    t.done();
  });

  it('GC (CNI 1.1) keeps an attachment the runtime left out whose address a live Pod of this node shows (docs/ipam-recovery.md)', async () => {
    const t = lab();
    const kept = await t.service.add(t.args('c1'));
    await t.service.add(t.args('c2'));
    const ip = kept.ips![0]!.address.split('/')[0]!;
    t.cache.put(Kinds.Pod, { metadata: { namespace: 'lab', name: 'running' }, spec: { nodeName: 'n1', containers: [] }, status: { phase: 'Running', podIPs: [{ ip }] } } as never);
    await t.service.gc(t.args('', { validAttachments: [] }));
    assert.deepEqual(t.ipam.allocations().map((a) => a.containerId), ['c1']);
    assert.deepEqual([...t.podNetwork.pods.keys()], ['c1:eth0']);
    t.done();
  });

  it('STATUS is CNI error 50 with the reason while coild is not ready', async () => {
    await lab().service.status();
    const t = lab({ notReady: 'informer cache not synced' });
    await assert.rejects(t.service.status(), cniCode(50, /not synced/));
    t.done();
  });
});
