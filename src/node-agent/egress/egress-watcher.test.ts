import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { V1Pod, V1Service } from '@kubernetes/client-node';
import { Registry } from 'prom-client';
import type { Egress } from '../../api/v2/egress.js';
import type { Cache } from '../../runtime/cache.js';
import type { Client } from '../../runtime/client.js';
import type { EventRecorder } from '../../runtime/event-recorder.js';
import { silentLogger } from '../../runtime/logging.js';
import type { EgressClient, EgressClientPlan } from './egress-client.js';
import { EgressSetupError, EgressWatcher } from './egress-watcher.js';
import { KeyedMutex } from '../podnet/keyed-mutex.js';
import { NatSteering } from './nat-steering.js';
import { rendezvousChoice } from './nat-pod-choice.js';
import { fouPeerLinkName } from '../../netlink/fou.js';
import type { ProbeHealth } from './nat-prober.js';

const ALL = { veth: true, ipv6: true, vxlan: true, ipip: true, ip6tnl: true, fou: true };

/** In-memory stand-ins: objects by kind, events pushed by hand; the kernel side records calls. */
function world(features = ALL) {
  const objects = new Map<string, unknown>();
  const handlers = new Map<string, ((e: unknown) => void)[]>();
  const key = (kind: string, ns: string, name: string) => `${kind}/${ns}/${name}`;
  const cache = {
    get: (k: { kind: string }, r: { namespace: string; name: string }) => objects.get(key(k.kind, r.namespace, r.name)),
    list: (k: { kind: string }, o: { namespace?: string } = {}) => [...objects.entries()].filter(([x]) => x.startsWith(`${k.kind}/${o.namespace ?? ''}`)).map(([, v]) => v),
    onEvent: (k: { kind: string }, h: (e: unknown) => void) => { handlers.set(k.kind, [...(handlers.get(k.kind) ?? []), h]); return () => undefined; },
  } as unknown as Cache;
  const client = { get: async (k: { kind: string }, r: { namespace: string; name: string }) => objects.get(key(k.kind, r.namespace, r.name)) } as unknown as Client;
  const events: string[] = [];
  const recorder = { event: (_o: unknown, type: string, reason: string) => events.push(`${type} ${reason}`) } as unknown as EventRecorder;
  const calls: string[] = [];
  const pins: string[] = [];
  const drainsOf = (p: EgressClientPlan) => (p.drains.length > 0 ? ` draining ${p.drains.map((d) => d.remote).join()}` : '');
  const egressClient = {
    apply: async (netns: string, p: EgressClientPlan) => { calls.push(`apply ${netns} ${JSON.stringify(p.routes[4])}${drainsOf(p)}`); },
    syncFlowPins: async (netns: string, p: EgressClientPlan) => { pins.push(`pins ${netns} ${[...p.peers, ...p.drains].map((x) => x.remote).join()}`); },
    remove: async (netns: string) => { calls.push(`remove ${netns}`); },
    retarget: async (netns: string, from: EgressClientPlan, to: EgressClientPlan) => {
      calls.push(`retarget ${netns} ${from.peers.map((p) => p.remote).join()} → ${to.peers.map((p) => p.remote).join()}${drainsOf(to)}`);
      return true;
    },
  } as unknown as EgressClient;
  const put = (kind: string, o: { metadata?: { namespace?: string; name?: string } }) => {
    objects.set(key(kind, o.metadata!.namespace!, o.metadata!.name!), o);
    for (const h of handlers.get(kind) ?? []) h({ type: 'MODIFIED', object: o });
  };
  const del = (kind: string, o: { metadata?: { namespace?: string; name?: string } }) => {
    objects.delete(key(kind, o.metadata!.namespace!, o.metadata!.name!));
    for (const h of handlers.get(kind) ?? []) h({ type: 'DELETED', object: o });
  };
  return { cache, client, recorder, egressClient, events, calls, pins, put, del, features };
}

const egress = (destinations: string[]): Egress => ({ metadata: { namespace: 'internet', name: 'nat' }, spec: { destinations, replicas: 1, sessionAffinity: 'ClientIP' } });
const service: V1Service = { metadata: { namespace: 'internet', name: 'nat' }, spec: { clusterIPs: ['10.96.0.5'] } };
const pod = (annotations: Record<string, string>): V1Pod => ({ metadata: { namespace: 'app', name: 'p', annotations }, spec: { containers: [] } });
const attachment = { namespace: 'app', name: 'p', containerId: 'c1', ifname: 'eth0', netns: '/run/netns/p', ips: ['10.100.0.5'] };

async function until(cond: () => boolean): Promise<void> {
  for (let i = 0; i < 200 && !cond(); i++) await new Promise((r) => setTimeout(r, 5));
  assert.ok(cond());
}

describe('EgressWatcher', () => {
  const dirs: string[] = [];
  after(async () => { for (const d of dirs) await rm(d, { recursive: true, force: true }); });

  async function watcher(w: ReturnType<typeof world>, steering?: NatSteering) {
    const dir = await mkdtemp(join(tmpdir(), 'egress-watcher-'));
    dirs.push(dir);
    const locks = new KeyedMutex();
    const ew = new EgressWatcher({
      cache: w.cache, client: w.client, recorder: w.recorder, egressClient: w.egressClient, locks,
      lockKey: (c, i) => `${c}:${i}`, logger: silentLogger(), stateDir: dir, port: 5555, probe: async () => w.features, registry: new Registry(),
      ...(steering ? { steering } : {}),
    });
    await ew.init();
    return { ew, dir, locks };
  }

  /** Lets every pending promise continuation run (the update loop reaches its lock wait). */
  const settle = () => new Promise<void>((r) => setImmediate(r));

  /** A watcher whose pod p names Egress internet/nat, which exists with its Service. */
  async function withClient() {
    const w = world();
    w.put('Egress', egress(['0.0.0.0/0']));
    w.put('Service', service);
    w.put('Pod', pod({ 'egress.coil.cybozu.com/internet': 'nat' }));
    return { w, ...(await watcher(w)) };
  }

  test('an update waiting for the lock while a DEL and a new ADD of the key run applies the new record, and nothing after a DEL alone', async () => {
    const { w, ew, locks } = await withClient();
    const annotated = pod({ 'egress.coil.cybozu.com/internet': 'nat' });
    await ew.onAdd(annotated, attachment);
    const stop = new AbortController();
    const running = ew.run(stop.signal);
    await locks.run('c1:eth0', async () => {
      w.put('Egress', egress(['192.168.0.0/24'])); // the loop takes the key and waits for this lock
      await settle();
      await ew.onDel('c1', 'eth0'); // DEL, then the runtime's ADD again, in another netns
      await ew.onAdd(annotated, { ...attachment, netns: '/run/netns/q' });
    });
    await until(() => w.calls.length === 3);
    assert.match(w.calls[2]!, /^apply \/run\/netns\/q /, `the update went to ${w.calls[2]}`);
    await locks.run('c1:eth0', async () => {
      w.put('Egress', egress(['0.0.0.0/0']));
      await settle();
      await ew.onDel('c1', 'eth0');
    });
    await settle();
    assert.equal(w.calls.length, 3, 'an update ran for a deleted attachment');
    stop.abort();
    await running;
  });

  test('ADD of a client applies the plan and records the netns; Egress edits re-apply; deletion removes everything', async () => {
    const { w, ew, dir } = await withClient();
    await ew.onAdd(pod({ 'egress.coil.cybozu.com/internet': 'nat' }), attachment);
    assert.deepEqual(w.calls, ['apply /run/netns/p {"118":[{"dst":"0.0.0.0/0","dev":"fou4_0a600005"}]}']);
    assert.deepEqual(await readdir(dir), ['c1_eth0.json']);
    const stop = new AbortController();
    const running = ew.run(stop.signal);
    w.put('Egress', egress(['192.168.0.0/24']));
    await until(() => w.calls.length === 2);
    assert.equal(w.calls[1], 'apply /run/netns/p {"117":[{"dst":"192.168.0.0/24","dev":"fou4_0a600005"}]}');
    w.del('Egress', egress([]));
    await until(() => w.calls.length === 3);
    assert.equal(w.calls[2], 'remove /run/netns/p');
    stop.abort();
    await running;
  });

  test('removing the annotation from a running pod removes its tunnels', async () => {
    const w = world();
    w.put('Egress', egress(['0.0.0.0/0']));
    w.put('Service', service);
    const { ew } = await watcher(w);
    await ew.onAdd(pod({ 'egress.coil.cybozu.com/internet': 'nat' }), attachment);
    const stop = new AbortController();
    const running = ew.run(stop.signal);
    w.put('Pod', pod({}));
    await until(() => w.calls.length === 2);
    assert.equal(w.calls[1], 'remove /run/netns/p');
    stop.abort();
    await running;
  });

  test('without FoU, ADD of a client fails with the reason and a Warning Event; other pods pass', async () => {
    const w = world({ ...ALL, fou: false });
    const { ew } = await watcher(w);
    await ew.onAdd(pod({}), attachment);
    await assert.rejects(ew.onAdd(pod({ 'egress.coil.cybozu.com/internet': 'nat' }), attachment), (e: unknown) => e instanceof EgressSetupError && /lacks fou/.test(e.message));
    assert.deepEqual(w.events, ['Warning EgressUnavailable']);
    assert.deepEqual(w.calls, []);
  });

  test('a missing Egress fails ADD naming it (as in Coil); records survive a restart and DEL forgets them', async () => {
    const w = world();
    const { ew, dir } = await watcher(w);
    await assert.rejects(ew.onAdd(pod({ 'egress.coil.cybozu.com/internet': 'nat' }), attachment), /Egress internet\/nat named by annotation/);
    w.put('Egress', egress(['0.0.0.0/0']));
    w.put('Service', service);
    await ew.onAdd(pod({ 'egress.coil.cybozu.com/internet': 'nat' }), attachment);
    const again = new EgressWatcher({
      cache: w.cache, client: w.client, recorder: w.recorder, egressClient: w.egressClient, locks: new KeyedMutex(),
      lockKey: (c, i) => `${c}:${i}`, logger: silentLogger(), stateDir: dir, port: 5555, probe: async () => ALL, registry: new Registry(),
    });
    await again.init();
    await again.onDel('c1', 'eth0');
    assert.deepEqual(await readdir(dir), []);
  });

  test('steering: tunnels point at the NAT pod rendezvous picks; a NAT pod failing its probe moves only its clients, in one retarget without reading the Service; none healthy → the ClusterIP', async () => {
    const w = world();
    w.put('Egress', egress(['0.0.0.0/0']));
    w.put('Service', service);
    const slice = (eps: Array<[string, { serving?: boolean; terminating?: boolean }]>) => ({ metadata: { namespace: 'internet', name: 'nat-x', labels: { 'kubernetes.io/service-name': 'nat' } }, addressType: 'IPv4',
      endpoints: eps.map(([a, conditions]) => ({ addresses: [a], conditions })) });
    w.put('EndpointSlice', slice([['10.64.0.1', {}], ['10.64.0.2', {}], ['10.64.0.3', {}]]));
    const health = new Map<string, ProbeHealth>();
    let targets: string[] = [];
    const prober = { setTargets: (a: Iterable<string>) => { targets = [...a]; }, health: (a: string) => health.get(a) ?? 'unknown', run: async () => undefined };
    let ew: EgressWatcher | undefined;
    const registry = new Registry();
    const steering = new NatSteering({ cache: w.cache, port: 5555, logger: silentLogger(), registry, prober, onChange: (e) => ew?.onSteeringChange(e) });
    ({ ew } = await watcher(w, steering));
    const podOf = (name: string) => ({ ...pod({ 'egress.coil.cybozu.com/internet': 'nat' }), metadata: { namespace: 'app', name, annotations: { 'egress.coil.cybozu.com/internet': 'nat' } } });
    const clients = Array.from({ length: 12 }, (_, i) => ({ ...attachment, name: `p${i}`, containerId: `c${i}`, netns: `/run/netns/p${i}`, ips: [`10.100.0.${i + 10}`] }));
    for (const a of clients) { w.put('Pod', podOf(a.name)); await ew.onAdd(podOf(a.name), a); }
    assert.deepEqual(targets.sort(), ['10.64.0.1', '10.64.0.2', '10.64.0.3']);
    const remoteOf = (call: string) => /"dev":"fou4_([0-9a-f]{8})"/.exec(call)![1];
    const first = new Map(w.calls.map((c) => [c.split(' ')[1]!, remoteOf(c)]));
    assert.ok(!first.has('0a600005') && new Set(first.values()).size === 3, `spread over the 3 NAT pods: ${JSON.stringify([...first])}`);
    for (const a of ['10.64.0.1', '10.64.0.2', '10.64.0.3']) health.set(a, 'up');
    const stop = new AbortController();
    const running = ew.run(stop.signal);
    w.calls.length = 0;
    let serviceReads = 0;
    const get = w.client.get;
    (w.client as { get: unknown }).get = async (...args: Parameters<typeof get>) => { serviceReads++; return get(...args); };
    health.set('10.64.0.2', 'down');
    ew.onSteeringChange('internet/nat');
    const onLost = [...first].filter(([, r]) => r === '0a400002').map(([ns]) => ns);
    await until(() => w.calls.length === onLost.length);
    for (const c of w.calls) assert.match(c, /^retarget \/run\/netns\/p\d+ 10\.64\.0\.2 → 10\.64\.0\.[13]$/);
    assert.deepEqual(w.calls.map((c) => c.split(' ')[1]).sort(), onLost.sort(), 'only the lost NAT pod\'s clients moved');
    assert.equal(serviceReads, 0, 'a failover reads nothing from the API server');
    assert.match(await registry.metrics(), /coil_coild_egress_nat_pods_healthy\{namespace="internet",egress="nat"\} 2/);

    w.calls.length = 0;
    for (const a of ['10.64.0.1', '10.64.0.3']) health.set(a, 'down');
    ew.onSteeringChange('internet/nat');
    await until(() => w.calls.length === clients.length);
    for (const c of w.calls) assert.match(c, /→ 10\.96\.0\.5$/, 'no NAT pod answers: the ClusterIP');
    stop.abort();
    await running;
  });

  test('steering: a NAT pod turning terminating drains per flow: the tunnel moves at once, the old link stays until the pod stops serving; the pins follow each move', async () => {
    const w = world();
    w.put('Egress', egress(['0.0.0.0/0']));
    w.put('Service', service);
    const slice = (t: boolean, serving = true) => ({ metadata: { namespace: 'internet', name: 'nat-x', labels: { 'kubernetes.io/service-name': 'nat' } }, addressType: 'IPv4',
      endpoints: [{ addresses: ['10.64.0.1'], conditions: { serving, terminating: t } }, { addresses: ['10.64.0.2'], conditions: {} }] });
    w.put('EndpointSlice', slice(false));
    const prober = { setTargets: () => undefined, health: (): ProbeHealth => 'up', run: async () => undefined };
    let ew: EgressWatcher | undefined;
    const steering = new NatSteering({ cache: w.cache, port: 5555, logger: silentLogger(), registry: new Registry(), prober, onChange: (e) => ew?.onSteeringChange(e) });
    ({ ew } = await watcher(w, steering));
    // Find a client address that ranks 10.64.0.1 first.
    let on1: typeof attachment | undefined;
    for (let i = 10; !on1; i++) {
      const a = { ...attachment, ips: [`10.100.0.${i}`] };
      if (steering.natPod({ namespace: 'internet', name: 'nat' }, a.ips[0]!) === '10.64.0.1') on1 = a;
    }
    w.put('Pod', pod({ 'egress.coil.cybozu.com/internet': 'nat' }));
    await ew.onAdd(pod({ 'egress.coil.cybozu.com/internet': 'nat' }), on1);
    assert.match(w.calls[0]!, /fou4_0a400001/);
    const stop = new AbortController();
    const running = ew.run(stop.signal);
    w.calls.length = 0;
    w.put('EndpointSlice', slice(true));
    ew.onSteeringChange('internet/nat');
    await until(() => w.pins.length === 1);
    assert.deepEqual(w.calls, ['retarget /run/netns/p 10.64.0.1 → 10.64.0.2 draining 10.64.0.1'], 'new flows go to 10.64.0.2 at once; 10.64.0.1 drains');
    assert.deepEqual(w.pins, ['pins /run/netns/p 10.64.0.2,10.64.0.1'], 'both links pinned after the move');
    w.calls.length = 0;
    ew.onSteeringChange('internet/nat');
    await settle();
    assert.deepEqual(w.calls, [], 'nothing moves while the old NAT pod serves');
    w.put('EndpointSlice', slice(true, false));
    ew.onSteeringChange('internet/nat');
    await until(() => w.pins.length === 2);
    assert.deepEqual(w.calls, ['retarget /run/netns/p 10.64.0.2 → 10.64.0.2'], 'the drain ends: its link goes');
    assert.equal(w.pins[1], 'pins /run/netns/p 10.64.0.2');
    stop.abort();
    await running;
  });

  test('steering: a coild restart mid-drain finds the tunnel and the draining link in the netns and keeps both; the drain then ends as before', async () => {
    const w = world();
    w.put('Egress', egress(['0.0.0.0/0']));
    w.put('Service', service);
    const slice = (serving: boolean) => ({ metadata: { namespace: 'internet', name: 'nat-x', labels: { 'kubernetes.io/service-name': 'nat' } }, addressType: 'IPv4',
      endpoints: [{ addresses: ['10.64.0.1'], conditions: { serving, terminating: true } }, { addresses: ['10.64.0.2'], conditions: {} }] });
    w.put('EndpointSlice', slice(true));
    w.put('Pod', pod({ 'egress.coil.cybozu.com/internet': 'nat' }));
    const prober = { setTargets: () => undefined, health: (): ProbeHealth => 'up', run: async () => undefined };
    const first = await watcher(w);
    await first.ew.onAdd(pod({ 'egress.coil.cybozu.com/internet': 'nat' }), attachment);
    w.calls.length = 0;
    // The kernel's record: the old link listed first, as a dump may list it.
    (w.egressClient as { peerRemotes?: unknown }).peerRemotes = async () => ['10.64.0.1', '10.64.0.2'];
    let ew: EgressWatcher | undefined;
    const steering = new NatSteering({ cache: w.cache, port: 5555, logger: silentLogger(), registry: new Registry(), prober, onChange: (e) => ew?.onSteeringChange(e) });
    ew = new EgressWatcher({
      cache: w.cache, client: w.client, recorder: w.recorder, egressClient: w.egressClient, locks: new KeyedMutex(),
      lockKey: (c, i) => `${c}:${i}`, logger: silentLogger(), stateDir: first.dir, port: 5555, probe: async () => ALL, registry: new Registry(), steering,
    });
    await ew.init();
    const stop = new AbortController();
    const running = ew.run(stop.signal);
    await until(() => w.calls.length === 1);
    assert.equal(w.calls[0], 'apply /run/netns/p {"118":[{"dst":"0.0.0.0/0","dev":"fou4_0a400002"}]} draining 10.64.0.1');
    w.put('EndpointSlice', slice(false));
    ew.onSteeringChange('internet/nat');
    await until(() => w.calls.length === 2);
    assert.equal(w.calls[1], 'retarget /run/netns/p 10.64.0.2 → 10.64.0.2');
    stop.abort();
    await running;
  });

  test('steering: a NAT pod added moves no client, not even across a coild restart (the tunnel\'s remote in the netns is the record)', async () => {
    const w = world();
    w.put('Egress', egress(['0.0.0.0/0']));
    w.put('Service', service);
    const slice = (addresses: string[]) => ({ metadata: { namespace: 'internet', name: 'nat-x', labels: { 'kubernetes.io/service-name': 'nat' } }, addressType: 'IPv4',
      endpoints: addresses.map((a) => ({ addresses: [a], conditions: {} })) });
    const prober = { setTargets: () => undefined, health: (): ProbeHealth => 'up', run: async () => undefined };
    // A client that ranks the NAT pod to be added first.
    const client = Array.from({ length: 200 }, (_, i) => `10.100.1.${i + 1}`).find((c) => rendezvousChoice(c, ['10.64.0.1', '10.64.0.2', '10.64.0.3']) === '10.64.0.3')!;
    const a = { ...attachment, ips: [client] };
    w.put('EndpointSlice', slice(['10.64.0.1', '10.64.0.2']));
    w.put('Pod', pod({ 'egress.coil.cybozu.com/internet': 'nat' }));
    let ew: EgressWatcher | undefined;
    const steering = new NatSteering({ cache: w.cache, port: 5555, logger: silentLogger(), registry: new Registry(), prober, onChange: (e) => ew?.onSteeringChange(e) });
    const first = await watcher(w, steering);
    ew = first.ew;
    await ew.onAdd(pod({ 'egress.coil.cybozu.com/internet': 'nat' }), a);
    const before = rendezvousChoice(client, ['10.64.0.1', '10.64.0.2'])!;
    assert.match(w.calls[0]!, new RegExp(fouPeerLinkName(before)));
    w.put('EndpointSlice', slice(['10.64.0.1', '10.64.0.2', '10.64.0.3']));
    ew.onSteeringChange('internet/nat');
    assert.equal(steering.natPod({ namespace: 'internet', name: 'nat' }, client), '10.64.0.3', 'a new client would go to the added pod');

    // coild restarts: a new watcher from the same records, the kernel's peer link as the record.
    w.calls.length = 0;
    (w.egressClient as { peerRemotes?: unknown }).peerRemotes = async () => [before];
    const steering2 = new NatSteering({ cache: w.cache, port: 5555, logger: silentLogger(), registry: new Registry(), prober, onChange: () => undefined });
    const again = new EgressWatcher({
      cache: w.cache, client: w.client, recorder: w.recorder, egressClient: w.egressClient, locks: new KeyedMutex(),
      lockKey: (c, i) => `${c}:${i}`, logger: silentLogger(), stateDir: first.dir, port: 5555, probe: async () => ALL, registry: new Registry(), steering: steering2,
    });
    await again.init();
    const stop = new AbortController();
    const running = again.run(stop.signal);
    await until(() => w.calls.length === 1);
    assert.match(w.calls[0]!, new RegExp(fouPeerLinkName(before)), `the restart moved the client: ${w.calls[0]}`);
    stop.abort();
    await running;
  });

  describe('an Egress with a shared SNAT address', () => {
    const shared = (): Egress => ({ ...egress(['0.0.0.0/0']), spec: { ...egress(['0.0.0.0/0']).spec, snatAddresses: ['203.0.113.10'] } });
    const natSlice = (eps: Array<[string, { serving?: boolean; terminating?: boolean }, string?]>) => ({ metadata: { namespace: 'internet', name: 'nat-x', labels: { 'kubernetes.io/service-name': 'nat' } }, addressType: 'IPv4',
      endpoints: eps.map(([a, conditions, nodeName]) => ({ addresses: [a], conditions, ...(nodeName ? { nodeName } : {}) })) });

    test('every client goes to the one active NAT pod and none drains; at its loss or its termination all move to the same next one', async () => {
      const w = world();
      w.put('Egress', shared());
      w.put('Service', service);
      w.put('EndpointSlice', natSlice([['10.64.0.1', {}], ['10.64.0.2', {}], ['10.64.0.3', {}]]));
      const health = new Map<string, ProbeHealth>([['10.64.0.1', 'up'], ['10.64.0.2', 'up'], ['10.64.0.3', 'up']]);
      const prober = { setTargets: () => undefined, health: (a: string) => health.get(a) ?? 'unknown', run: async () => undefined };
      let ew: EgressWatcher | undefined;
      const steering = new NatSteering({ cache: w.cache, port: 5555, logger: silentLogger(), registry: new Registry(), prober, onChange: (e) => ew?.onSteeringChange(e) });
      ({ ew } = await watcher(w, steering));
      const podOf = (name: string) => ({ ...pod({}), metadata: { namespace: 'app', name, annotations: { 'egress.coil.cybozu.com/internet': 'nat' } } });
      const clients = Array.from({ length: 12 }, (_, i) => ({ ...attachment, name: `p${i}`, containerId: `c${i}`, netns: `/run/netns/p${i}`, ips: [`10.100.0.${i + 10}`] }));
      for (const a of clients) { w.put('Pod', podOf(a.name)); await ew.onAdd(podOf(a.name), a); }
      const active = rendezvousChoice('internet/nat', ['10.64.0.1', '10.64.0.2', '10.64.0.3'])!;
      assert.equal(steering.active({ namespace: 'internet', name: 'nat' }, 4)?.address, active);
      assert.deepEqual(new Set(w.calls.map((c) => /"dev":"(fou4_[0-9a-f]{8})"/.exec(c)![1])), new Set([fouPeerLinkName(active)]), 'all 12 clients on the active NAT pod, not spread by client');
      const stop = new AbortController();
      const running = ew.run(stop.signal);
      // The active one is lost: all move together, to the Egress's next choice.
      w.calls.length = 0;
      health.set(active, 'down');
      ew.onSteeringChange('internet/nat');
      await until(() => w.calls.length === clients.length);
      const rest = ['10.64.0.1', '10.64.0.2', '10.64.0.3'].filter((a) => a !== active);
      const next = rendezvousChoice('internet/nat', rest)!;
      for (const c of w.calls) assert.equal(c.replace(/^retarget \/run\/netns\/p\d+ /, ''), `${active} → ${next}`, 'no drain, one destination');
      // The next one turns terminating: all move again at once, none drains through it.
      w.calls.length = 0;
      w.put('EndpointSlice', natSlice(['10.64.0.1', '10.64.0.2', '10.64.0.3'].map((a) => [a, a === next ? { terminating: true } : {}])));
      ew.onSteeringChange('internet/nat');
      await until(() => w.calls.length === clients.length);
      const third = rest.find((a) => a !== next)!;
      for (const c of w.calls) assert.equal(c.replace(/^retarget \/run\/netns\/p\d+ /, ''), `${next} → ${third}`);
      stop.abort();
      await running;
    });

    test('without coild\'s steering, ADD of its client fails with a Warning Event naming the flag (a tunnel to the ClusterIP would reach inactive NAT pods)', async () => {
      const w = world();
      w.put('Egress', shared());
      w.put('Service', service);
      const { ew } = await watcher(w);
      await assert.rejects(ew.onAdd(pod({ 'egress.coil.cybozu.com/internet': 'nat' }), attachment), (e: Error) => e instanceof EgressSetupError && /snatAddresses.*--egress-nat-steering=false/.test(e.message));
      assert.deepEqual(w.events, ['Warning EgressUnavailable']);
      assert.deepEqual(w.calls, []);
    });

    test('without coild\'s steering, a running client whose Egress gains a shared address keeps its tunnel and gets one Warning Event', async () => {
      const w = world();
      w.put('Egress', egress(['0.0.0.0/0']));
      w.put('Service', service);
      w.put('Pod', pod({ 'egress.coil.cybozu.com/internet': 'nat' }));
      const { ew } = await watcher(w);
      await ew.onAdd(pod({ 'egress.coil.cybozu.com/internet': 'nat' }), attachment);
      const stop = new AbortController();
      const running = ew.run(stop.signal);
      w.calls.length = 0;
      w.put('Egress', shared());
      await until(() => w.calls.length === 1);
      assert.match(w.calls[0]!, /^apply \/run\/netns\/p .*fou4_0a600005/, 'still tunnelled to the ClusterIP, not cut off');
      assert.deepEqual(w.events, ['Warning EgressUnavailable']);
      w.put('Egress', shared());
      await until(() => w.calls.length === 2);
      assert.deepEqual(w.events, ['Warning EgressUnavailable'], 'told once');
      stop.abort();
      await running;
    });

    test('a node hosting one of its NAT pods probes all of them without a client, and knows when the active one is its own', async () => {
      const w = world();
      w.put('Egress', shared());
      w.put('Service', service);
      let targets: string[] = [];
      const prober = { setTargets: (a: Iterable<string>) => { targets = [...a].sort(); }, health: (): ProbeHealth => 'up', run: async () => undefined };
      const changes: string[] = [];
      const steering = new NatSteering({ cache: w.cache, port: 5555, logger: silentLogger(), registry: new Registry(), prober, nodeName: 'node-b', onChange: (e) => changes.push(e) });
      const stop = new AbortController();
      const running = steering.run(stop.signal);
      assert.deepEqual(targets, [], 'nothing hosted yet');
      w.put('EndpointSlice', natSlice([['10.64.0.1', {}, 'node-a'], ['10.64.0.2', {}, 'node-b']]));
      assert.deepEqual(targets, ['10.64.0.1', '10.64.0.2'], 'both probed: this node must see the other fail');
      assert.deepEqual(changes, ['internet/nat']);
      const active = steering.active({ namespace: 'internet', name: 'nat' }, 4)!;
      assert.equal(active.nodeName, active.address === '10.64.0.1' ? 'node-a' : 'node-b');
      // The Egress loses its shared address: not probed any more (no client here).
      w.put('Egress', egress(['0.0.0.0/0']));
      assert.deepEqual(targets, []);
      assert.deepEqual(changes, ['internet/nat', 'internet/nat']);
      stop.abort();
      await running;
    });
  });
});
