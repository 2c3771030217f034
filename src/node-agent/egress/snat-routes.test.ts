import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Registry } from 'prom-client';
import type { Egress } from '../../api/v2/egress.js';
import { Kinds } from '../../api/v2/kinds.js';
import { IpRunner } from '../../netlink/iproute2/ip-runner.js';
import { readSysctl, writeSysctl } from '../../netlink/sysctl.js';
import { NetlinkExecutor } from '../../netlink/netlink-executor.js';
import { readRoutesBothFamilies } from '../../netlink/route.js';
import { silentLogger } from '../../runtime/logging.js';
import { FakeCoildCache } from '../../../test/fakes/coild-cache.fake.js';
import { until } from '../../../test/fakes/timing.js';
import { TestNetnsSet, netnsSkipReason, type TestNetns } from '../../../test/netns/test-netns.js';
import { prerequisite } from '../../../test/support/prerequisite.js';
import { BlockExport } from '../ipam/block-export.js';
import { IpRouteExporter } from '../ipam/route-export.js';
import { desiredSnatRoutes, SnatRouter, type ActiveNatPodOf } from './snat-routes.js';

const egress = (namespace: string, name: string, snatAddresses: string[]): Egress => ({ metadata: { namespace, name }, spec: { destinations: ['0.0.0.0/0', '::/0'], replicas: 2, sessionAffinity: 'ClientIP', snatAddresses } });

describe('the shared SNAT addresses a node routes', () => {
  const actives = new Map<string, { address: string; nodeName?: string }>([
    ['internet/nat 4', { address: '10.64.0.1', nodeName: 'node-a' }],
    ['internet/nat 6', { address: 'fd00:64::1', nodeName: 'node-b' }],
    ['other/gw 4', { address: '10.64.1.1', nodeName: 'node-a' }],
  ]);
  const activeOf: ActiveNatPodOf = (ref, family) => actives.get(`${ref.namespace}/${ref.name} ${family}`);

  test('each address whose Egress has its active NAT pod of that family on this node, in canonical form', () => {
    const egresses = [egress('internet', 'nat', ['203.0.113.10', '2001:DB8::10']), egress('other', 'gw', ['203.0.113.20']), egress('plain', 'nat', [])];
    assert.deepEqual(desiredSnatRoutes(egresses, activeOf, 'node-a'), [
      { egress: 'internet/nat', address: '203.0.113.10', family: 4, natPod: '10.64.0.1' },
      { egress: 'other/gw', address: '203.0.113.20', family: 4, natPod: '10.64.1.1' },
    ]);
    assert.deepEqual(desiredSnatRoutes(egresses, activeOf, 'node-b'), [{ egress: 'internet/nat', address: '2001:db8::10', family: 6, natPod: 'fd00:64::1' }]);
    assert.deepEqual(desiredSnatRoutes(egresses, () => undefined, 'node-a'), [], 'no active NAT pod (none serves): nobody routes it');
  });

  test('an address two Egresses name is routed for neither; a malformed one is skipped', () => {
    const egresses = [egress('internet', 'nat', ['203.0.113.10', 'bogus']), egress('other', 'gw', ['203.0.113.10'])];
    assert.deepEqual(desiredSnatRoutes(egresses, activeOf, 'node-a'), []);
  });
});

describe('SnatRouter in a real network namespace', { skip: prerequisite(netnsSkipReason()) }, () => {
  const ip = new IpRunner();
  const netns = new TestNetnsSet({ ip });
  const kernel = new NetlinkExecutor({ ip });
  let host: TestNetns;
  const cache = new FakeCoildCache();
  const actives = new Map<string, { address: string; nodeName?: string }>();
  /** This node's NAT pods of the shared-address Egress: pod a (pod b is some other pod). */
  const hosted = ['10.64.0.1', 'fd00:64::1'];
  let exportChanges = 0;
  let router: SnatRouter;
  let blockExport: BlockExport;
  const registry = new Registry();

  /** The pod table's and the export table's routes as `dst via proto` / `dst dev proto`. */
  const tables = async () => ({
    pod: (await readRoutesBothFamilies(kernel, { netns: host.path, table: 116 })).map((r) => `${r.dst} ${r.gateway ? `via ${r.gateway}` : `dev ${r.dev}`} ${r.protocol}`).sort(),
    exported: (await readRoutesBothFamilies(kernel, { netns: host.path, table: 119 })).map((r) => `${r.dst} ${r.dev} ${r.protocol}`).sort(),
  });
  const podRoutes = ['10.64.0.1 dev va 30', '10.64.0.2 dev vb 30', 'fd00:64::1 dev va 30', 'fd00:64::2 dev vb 30'];

  before(async () => {
    host = await netns.create('snat-host');
    // Two NAT pods wired as coild wires pods: a veth each, their /32 and /128 in the pod table.
    for (const [i, side] of ['a', 'b'].entries()) {
      const pod = await netns.create(`snat-pod${side}`);
      await ip.batch([['link', 'add', `v${side}`, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', pod.name], ['link', 'set', `v${side}`, 'up'],
        ['addr', 'add', `169.254.1.${i + 1}/32`, 'dev', `v${side}`],
        ['route', 'add', `10.64.0.${i + 1}/32`, 'dev', `v${side}`, 'scope', 'link', 'proto', '30', 'table', '116'],
        ['route', 'add', `fd00:64::${i + 1}/128`, 'dev', `v${side}`, 'proto', '30', 'table', '116']], { netns: host.path });
      await ip.batch([['link', 'set', 'eth0', 'up'], ['addr', 'add', `10.64.0.${i + 1}/32`, 'dev', 'eth0'], ['addr', 'add', `fd00:64::${i + 1}/128`, 'dev', 'eth0', 'nodad']], { netns: pod.path });
    }
    for (const f of ['-4', '-6']) await ip.exec([ip.ipPath, '-n', host.name, f, 'rule', 'add', 'pref', '2000', 'table', '116']);
    // A node with a strict reverse-path filter (the veths made after it inherit `default`'s 0; `all` makes it strict).
    await writeSysctl(ip, 'net.ipv4.conf.all.rp_filter', '1', { netns: host.path });
    cache.put(Kinds.Egress, egress('internet', 'nat', ['203.0.113.10', '2001:db8::10']));
    router = new SnatRouter({
      cache: cache.asCache(), activeOf: (ref, f) => actives.get(`${ref.namespace}/${ref.name} ${f}`), nodeName: 'node-a', kernel, ip, hostNetns: host.path,
      hostedNatPods: () => hosted, podTableId: 116, protocolId: 30, logger: silentLogger(), registry, onExportChange: () => { exportChanges++; blockExport.trigger(); },
    });
    blockExport = new BlockExport({ cache: cache.asCache(), exporter: new IpRouteExporter({ kernel, hostNetns: host.path }), logger: silentLogger(), extra: () => router.exported() });
  });
  after(() => netns.cleanup());

  test('the active NAT pod on this node: S routed to it in the pod table and exported in table 119; the pods\' routes untouched', async () => {
    actives.set('internet/nat 4', { address: '10.64.0.1', nodeName: 'node-a' });
    actives.set('internet/nat 6', { address: 'fd00:64::2', nodeName: 'node-a' });
    await router.sync();
    await until(() => exportChanges === 1, 'the export told');
    await blockExport.sync();
    const t = await tables();
    assert.deepEqual(t.pod, [...podRoutes, '2001:db8::10 via fd00:64::2 30', '203.0.113.10 via 10.64.0.1 30'].sort());
    assert.deepEqual(t.exported, ['2001:db8::10 lo 30', '203.0.113.10 lo 30']);
    const get = await ip.exec([ip.ipPath, '-n', host.name, 'route', 'get', '203.0.113.10']);
    assert.match(get.stdout, /via 10\.64\.0\.1 dev va/, 'answers to S go to the active NAT pod');
    assert.match(await registry.metrics(), /coil_coild_egress_snat_routed\{namespace="internet",egress="nat",address="203\.0\.113\.10"\} 1/);
  });

  test('the veth of this node\'s NAT pod of the Egress gets a loose reverse-path filter (its packets come from S); another pod\'s keeps the default', async () => {
    assert.equal(await readSysctl(ip, 'net.ipv4.conf.va.rp_filter', { netns: host.path }), '2');
    assert.equal(await readSysctl(ip, 'net.ipv4.conf.vb.rp_filter', { netns: host.path }), '0');
  });

  test('the active one moves to another NAT pod of this node: the route is replaced, the export stays', async () => {
    actives.set('internet/nat 4', { address: '10.64.0.2', nodeName: 'node-a' });
    await router.sync();
    assert.equal(exportChanges, 1, 'the exported set did not change');
    assert.deepEqual((await tables()).pod, [...podRoutes, '2001:db8::10 via fd00:64::2 30', '203.0.113.10 via 10.64.0.2 30'].sort());
  });

  test('the active one moves to another node: the route and the export go; a sync with nothing to do changes nothing', async () => {
    actives.set('internet/nat 4', { address: '10.64.0.9', nodeName: 'node-b' });
    await router.sync();
    await until(() => exportChanges === 2, 'the export told');
    await blockExport.sync();
    assert.deepEqual(await tables(), { pod: [...podRoutes, '2001:db8::10 via fd00:64::2 30'].sort(), exported: ['2001:db8::10 lo 30'] });
    await router.sync();
    assert.equal(exportChanges, 2);
  });

  test('a restarted coild finds its routes; those of an Egress deleted meanwhile go', async () => {
    const again = new SnatRouter({
      cache: cache.asCache(), activeOf: (ref, f) => actives.get(`${ref.namespace}/${ref.name} ${f}`), nodeName: 'node-a', kernel, ip, hostNetns: host.path,
      hostedNatPods: () => hosted, podTableId: 116, protocolId: 30, logger: silentLogger(), registry: new Registry(), onExportChange: () => undefined,
    });
    await again.sync();
    assert.deepEqual(again.exported(), ['2001:db8::10/128']);
    cache.emit(Kinds.Egress, 'DELETED', egress('internet', 'nat', []));
    await again.sync();
    assert.deepEqual((await tables()).pod, podRoutes);
  });
});

describe('SnatRouter without coil\'s IPAM (another CNI routes the pods in the main table)', { skip: prerequisite(netnsSkipReason()) }, () => {
  const ip = new IpRunner();
  const netns = new TestNetnsSet({ ip });
  const kernel = new NetlinkExecutor({ ip });
  after(() => netns.cleanup());

  test('S is routed via the NAT pod in the main table, next to the other CNI\'s route, and the export told', async () => {
    const host = await netns.create('snat-main');
    const pod = await netns.create('snat-main-pod');
    await ip.batch([['link', 'add', 'cali1', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', pod.name], ['link', 'set', 'cali1', 'up'],
      ['route', 'add', '10.64.0.1/32', 'dev', 'cali1', 'scope', 'link']], { netns: host.path });
    const cache = new FakeCoildCache();
    cache.put(Kinds.Egress, egress('internet', 'nat', ['203.0.113.10']));
    let exported: string[] = [];
    const router: SnatRouter = new SnatRouter({
      cache: cache.asCache(), activeOf: () => ({ address: '10.64.0.1', nodeName: 'node-a' }), hostedNatPods: () => ['10.64.0.1'], nodeName: 'node-a', kernel, ip, hostNetns: host.path,
      podTableId: 254, protocolId: 30, logger: silentLogger(), registry: new Registry(), onExportChange: () => { exported = router.exported(); },
    });
    await router.sync();
    const main = (await readRoutesBothFamilies(kernel, { netns: host.path, table: 254 })).filter((r) => r.dst === '203.0.113.10' || r.dst === '10.64.0.1');
    assert.deepEqual(main.map((r) => `${r.dst} ${r.gateway ? `via ${r.gateway}` : `dev ${r.dev}`} ${r.protocol ?? ''}`).sort(), ['10.64.0.1 dev cali1 ', '203.0.113.10 via 10.64.0.1 30']);
    assert.deepEqual(exported, ['203.0.113.10/32']);
    assert.equal(await readSysctl(ip, 'net.ipv4.conf.cali1.rp_filter', { netns: host.path }), '2');
  });
});
