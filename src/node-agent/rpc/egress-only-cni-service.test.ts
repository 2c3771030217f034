import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { V1Pod } from '@kubernetes/client-node';
import { silentLogger } from '../../runtime/logging.js';
import { CniError } from './cni-error.js';
import type { CniArgs } from './cni-handler.js';
import { FakeBlockClient, FakeCoildCache } from '../../../test/fakes/coild-cache.fake.js';
import { EgressOnlyCniService } from './egress-only-cni-service.js';
import { KeyedMutex } from '../podnet/keyed-mutex.js';
import { Kinds } from '../../api/v2/kinds.js';

/** EgressOnlyCniService over a fake cache and a recording egress hook; pod web in ns lab. */
function lab(o: { failEgress?: boolean; notReady?: string } = {}) {
  const cache = new FakeCoildCache();
  cache.put(Kinds.Pod, { metadata: { namespace: 'lab', name: 'web', uid: 'pod-uid' } } as never);
  const calls: string[] = [];
  const clients = new Map<string, { containerId: string; ifname: string }>();
  const egress = {
    onAdd: async (pod: Readonly<V1Pod>, a: { containerId: string; ifname: string; netns: string; ips: string[] }) => {
      calls.push(`add ${pod.metadata?.name} ${a.containerId} ${a.netns} ${a.ips.join(',')}`);
      if (o.failEgress) throw new Error('this kernel lacks FoU');
      clients.set(`${a.containerId}:${a.ifname}`, a);
    },
    onDel: async (containerId: string, ifname: string) => {
      calls.push(`del ${containerId}`);
      clients.delete(`${containerId}:${ifname}`);
    },
    clients: () => [...clients.values()],
  };
  const observed: string[] = [];
  const service = new EgressOnlyCniService({
    cache: cache.asCache(), client: new FakeBlockClient(() => undefined).asClient(), locks: new KeyedMutex(),
    logger: silentLogger(), egress, notReadyReason: () => o.notReady, observe: (c, _ms, ok) => observed.push(`${c} ${ok}`),
  });
  /** A chained ADD's arguments: prevResult gave 10.77.0.5 and fd77::5. */
  const args = (containerId: string, extra: Partial<CniArgs> = {}): CniArgs => ({
    containerId, netns: `/run/netns/${containerId}`, ifname: 'eth0', path: '', stdinData: Buffer.from('{}'),
    ips: ['10.77.0.5', 'fd77::5'], interfaces: { veth1: false, eth0: true }, validAttachments: [],
    args: { K8S_POD_NAMESPACE: 'lab', K8S_POD_NAME: 'web', IS_CHAINED: 'true' }, ...extra,
  });
  return { service, calls, clients, observed, args };
}

const cniCode = (code: number, msg?: RegExp) => (e: unknown) => e instanceof CniError && e.code === code && (msg === undefined || msg.test(e.message));

describe('EgressOnlyCniService (coild --enable-ipam=false)', () => {
  it('a chained ADD hands prevResult\'s addresses to the egress client and answers an empty result', async () => {
    const t = lab();
    assert.deepEqual(await t.service.add(t.args('c1')), { cniVersion: '1.1.0' });
    assert.deepEqual(t.calls, ['add web c1 /run/netns/c1 10.77.0.5,fd77::5']);
    assert.deepEqual(t.observed, ['ADD true']);
  });

  it('refuses an ADD that is not chained, or whose prevResult has no address, with code 7', async () => {
    const t = lab();
    await assert.rejects(t.service.add(t.args('c1', { args: { K8S_POD_NAMESPACE: 'lab', K8S_POD_NAME: 'web' } })), cniCode(7, /egress-only mode/));
    await assert.rejects(t.service.add(t.args('c2', { ips: [] })), cniCode(7));
    assert.deepEqual(t.calls, []);
  });

  it('names the pod problems as IPAM mode does: 4 without name/namespace, 3 for an unknown pod', async () => {
    const t = lab();
    await assert.rejects(t.service.add(t.args('c1', { args: { IS_CHAINED: 'true' } })), cniCode(4));
    await assert.rejects(t.service.add(t.args('c1', { args: { K8S_POD_NAMESPACE: 'lab', K8S_POD_NAME: 'ghost', IS_CHAINED: 'true' } })), cniCode(3, /ghost/));
  });

  it('a failed egress setup fails ADD with code 999 and the reason', async () => {
    const t = lab({ failEgress: true });
    await assert.rejects(t.service.add(t.args('c1')), cniCode(999, /failed to set up egress: this kernel lacks FoU/));
    assert.deepEqual(t.observed, ['ADD false']);
  });

  it('DEL forgets the client and succeeds when there is none; CHECK has nothing to check', async () => {
    const t = lab();
    await t.service.add(t.args('c1'));
    await t.service.del(t.args('c1'));
    await t.service.del(t.args('c1'));
    await t.service.check();
    assert.deepEqual(t.calls.slice(1), ['del c1', 'del c1']);
    assert.equal(t.clients.size, 0);
  });

  it('GC forgets the clients of attachments the runtime no longer lists', async () => {
    const t = lab();
    await t.service.add(t.args('keep'));
    await t.service.add(t.args('gone'));
    await t.service.gc(t.args('', { validAttachments: [{ containerId: 'keep', ifname: 'eth0' }] }));
    assert.deepEqual([...t.clients.keys()], ['keep:eth0']);
  });

  it('STATUS is code 50 while coild is not ready', async () => {
    await assert.rejects(lab({ notReady: 'informer cache not synced' }).service.status(), cniCode(50, /not synced/));
    await lab().service.status();
  });
});
