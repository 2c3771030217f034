/**
 * The egress data plane in real network namespaces (root; skipped with the reason otherwise):
 * - a client pod netns gets exactly the rules 1800/1900/2000–2002/2100 (IPv6: 1800/1900/2000/2100)
 *   and the routes of tables 117/118, updates shrink them, and removal leaves nothing;
 * - an egress pod netns gets exactly the `iif eth0 lookup 118` rule and our nftables tables;
 * - NAT works for a directly routed client: client → egress (masquerade out eth0) → target, and
 *   the target sees the egress address; counters advance.
 * FoU itself is missing from this machine's kernel: where a step needs it, the test says so and
 * skips; egress-fou-vm.test.ts runs the tunnels in a VM with a stock kernel.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { EgressMetrics } from '../../src/egress-agent/egress-metrics.js';
import { FouServer } from '../../src/egress-agent/fou-server.js';
import { NftablesNat } from '../../src/egress-agent/nat-nftables.js';
import { probeFeatures } from '../../src/netlink/features.js';
import { fouPeerLinkName } from '../../src/netlink/fou.js';
import { IpRunner } from '../../src/netlink/iproute2/ip-runner.js';
import { TestNetnsSet, netnsSkipReason, type TestNetns } from './test-netns.js';
import { EgressClient, planEgressClient } from '../../src/node-agent/egress/egress-client.js';
import { peerSeenBy, wire } from './egress-peer.js';
import { kernelLacks, prerequisite } from '../support/prerequisite.js';

const ip = new IpRunner();

async function rules(ns: TestNetns, family: 4 | 6): Promise<string[]> {
  const raw = await ip.json<Array<{ priority: number; iif?: string; dst?: string; dstlen?: number; table: string }>>(['rule', 'show'], { netns: ns.path, family });
  return raw.map((r) => `${r.priority}${r.iif ? ` iif ${r.iif}` : ''}${r.dst ? ` to ${r.dst}/${r.dstlen}` : ''} lookup ${r.table}`);
}

async function table(ns: TestNetns, family: 4 | 6, id: number): Promise<string[]> {
  const raw = await ip.json<Array<{ dst: string; dev: string; protocol?: string }>>(['route', 'show', 'table', String(id)], { netns: ns.path, family })
    .catch(() => []);
  return raw.map((r) => `${r.dst} dev ${r.dev} proto ${r.protocol ?? '?'}`).sort();
}

describe('egress data plane in network namespaces', { skip: prerequisite(netnsSkipReason()) }, () => {
  const netns = new TestNetnsSet({ ip });
  let fouSkip: string | undefined;
  before(async () => {
    const f = await probeFeatures(ip);
    const missing = (['fou', 'ipip', 'ip6tnl'] as const).filter((k) => !f[k]);
    fouSkip = kernelLacks(missing, 'test/netns/egress-fou-vm.test.ts');
    if (fouSkip) console.log(`# ${fouSkip}`);
  });
  after(() => netns.cleanup());

  describe('client pod', () => {
    let c: TestNetns;
    const client = new EgressClient({ ip, port: 5555, modprobePath: null });
    const gateways = [
      { egress: 'internet/nat', clusterIp: '10.96.0.100', destinations: ['0.0.0.0/0', '::/0'], isSourcePortAuto: false },
      { egress: 'domestic/nat', clusterIp: '10.96.0.200', destinations: ['192.168.10.0/24', '203.0.113.0/24'], isSourcePortAuto: true },
      { egress: 'internet/nat6', clusterIp: 'fd00:96::100', destinations: ['::/0', 'fd10::/64'], isSourcePortAuto: false },
    ];
    const plan = planEgressClient({ podIps: ['10.100.0.5', 'fd00:100::5'], port: 5555, linkMtuBytes: 1500, gateways });
    const [l1, l2, l6] = gateways.map((g) => fouPeerLinkName(g.clusterIp)) as [string, string, string];

    before(async () => {
      c = await netns.create('eg-client');
      const h = await netns.create('eg-host');
      await wire(ip, c, 'eth0', h, 'veth-h');
      await ip.batch([['addr', 'add', '10.100.0.5/32', 'dev', 'eth0'], ['addr', 'add', 'fd00:100::5/128', 'dev', 'eth0', 'nodad']], { netns: c.path });
      if (fouSkip) {
        // Stand-ins named like the peer links, so the routing half can be checked exactly here.
        for (const [i, name] of [l1, l2, l6].entries()) await ip.batch([['link', 'add', name, 'type', 'veth', 'peer', 'name', `standin${i}`]], { netns: c.path });
      }
    });

    test('FoU peer links to each Egress ClusterIP', async (t) => {
      if (fouSkip) return t.skip(fouSkip);
      await client.applyTunnels(c.path, plan);
    });

    test('rules and tables 117/118 are exactly as specified', async () => {
      for (let i = 0; i < 2; i++) await client.applyRouting(c.path, plan);
      assert.deepEqual(await rules(c, 4), ['0 lookup local', '1800 to 169.254.0.0/16 lookup main', '1900 lookup 117',
        '2000 to 10.0.0.0/8 lookup main', '2001 to 172.16.0.0/12 lookup main', '2002 to 192.168.0.0/16 lookup main',
        '2100 lookup 118', '32766 lookup main', '32767 lookup default']);
      assert.deepEqual(await rules(c, 6), ['0 lookup local', '1800 to fe80::/10 lookup main', '1900 lookup 117',
        '2000 to fc00::/7 lookup main', '2100 lookup 118', '32766 lookup main']);
      assert.deepEqual(await table(c, 4, 117), [`192.168.10.0/24 dev ${l2} proto 30`]);
      assert.deepEqual(await table(c, 4, 118), [`203.0.113.0/24 dev ${l2} proto 30`, `default dev ${l1} proto 30`]);
      assert.deepEqual(await table(c, 6, 117), [`fd10::/64 dev ${l6} proto 30`]);
      assert.deepEqual(await table(c, 6, 118), [`default dev ${l6} proto 30`]);
    });

    test('a changed Egress shrinks the tables to its new destinations', async () => {
      const smaller = planEgressClient({ podIps: ['10.100.0.5', 'fd00:100::5'], port: 5555, gateways: [gateways[0]!, { ...gateways[1]!, destinations: ['203.0.113.0/24'] }] });
      await client.applyRouting(c.path, smaller);
      assert.deepEqual(await table(c, 4, 117), []);
      assert.deepEqual(await table(c, 4, 118), [`203.0.113.0/24 dev ${l2} proto 30`, `default dev ${l1} proto 30`]);
      assert.deepEqual(await rules(c, 6), ['0 lookup local', '32766 lookup main'], 'no IPv6 gateway left: no IPv6 rules');
    });

    test('removal (Egress or annotation gone) leaves no rule, route or peer link', async () => {
      await client.remove(c.path);
      assert.deepEqual(await rules(c, 4), ['0 lookup local', '32766 lookup main', '32767 lookup default']);
      assert.deepEqual([...await table(c, 4, 117), ...await table(c, 4, 118), ...await table(c, 6, 117), ...await table(c, 6, 118)], []);
      const links = await ip.json<{ ifname: string }[]>(['link', 'show'], { netns: c.path });
      assert.ok(!links.some((l) => /^fou[46]_/.test(l.ifname)), links.map((l) => l.ifname).join(' '));
    });
  });

  describe('egress pod', () => {
    let e: TestNetns;
    const addrs = ['198.51.100.1', 'fd00:198::1'];
    let nat: NftablesNat;
    let server: FouServer;
    before(async () => {
      e = await netns.create('eg-egress');
      const x = await netns.create('eg-x');
      await wire(ip, e, 'eth0', x, 'veth-x');
      nat = new NftablesNat({ ip, podAddresses: addrs, outInterface: 'eth0', netns: e.path });
      server = new FouServer({ ip, podAddresses: addrs, port: 5555, isSourcePortAuto: false, outInterface: 'eth0', netns: e.path, modprobePath: null });
    });

    test('the return rule is exactly `iif eth0 lookup 118` at 2000, idempotently', async () => {
      for (let i = 0; i < 2; i++) await server.initReturnRule();
      assert.deepEqual(await rules(e, 4), ['0 lookup local', '2000 iif eth0 lookup 118', '32766 lookup main', '32767 lookup default']);
      assert.deepEqual(await rules(e, 6), ['0 lookup local', '2000 iif eth0 lookup 118', '32766 lookup main']);
    });

    test('nftables holds exactly our two tables with masquerade and invalid-drop, idempotently', async () => {
      for (let i = 0; i < 2; i++) await nat.init();
      const { stdout } = await ip.exec(['nft', '-j', 'list', 'ruleset'], { netns: e.path });
      const items = (JSON.parse(stdout) as { nftables: Array<Record<string, Record<string, unknown>>> }).nftables;
      const summary = items.flatMap((i) => {
        if (i.table) return [`table ${String(i.table.family)} ${String(i.table.name)}`];
        if (i.chain) return [`chain ${String(i.chain.family)} ${String(i.chain.table)} ${String(i.chain.name)} ${String(i.chain.type)} ${String(i.chain.hook)} ${String(i.chain.prio)}`];
        if (i.rule) return [`rule ${String(i.rule.family)} ${String(i.rule.chain)} ${JSON.stringify(i.rule.expr)}`];
        return [];
      });
      const masq = (fam: string, own: string) => `rule ${fam} postrouting [{"match":{"op":"==","left":{"meta":{"key":"oifname"}},"right":"eth0"}},{"match":{"op":"!=","left":{"payload":{"protocol":"${fam}","field":"saddr"}},"right":"${own}"}},{"counter":{"packets":0,"bytes":0}},{"masquerade":null}]`;
      const drop = (fam: string) => `rule ${fam} forward [{"match":{"op":"==","left":{"meta":{"key":"oifname"}},"right":"eth0"}},{"match":{"op":"in","left":{"ct":{"key":"state"}},"right":"invalid"}},{"counter":{"packets":0,"bytes":0}},{"drop":null}]`;
      assert.deepEqual(summary, [
        'table ip coil-egress', 'chain ip coil-egress postrouting nat postrouting 100', 'chain ip coil-egress forward filter forward 0',
        masq('ip', '198.51.100.1'), drop('ip'),
        'table ip6 coil-egress', 'chain ip6 coil-egress postrouting nat postrouting 100', 'chain ip6 coil-egress forward filter forward 0',
        masq('ip6', 'fd00:198::1'), drop('ip6'),
      ]);
    });

    test('tunnels back to clients', async (t) => {
      if (fouSkip) return t.skip(fouSkip);
      await server.init();
      const res = await server.sync(new Set(['10.100.0.5']));
      assert.equal(res.links.get('10.100.0.5'), 'fou4_0a640005');
      assert.deepEqual(await table(e, 4, 118), ['10.100.0.5 dev fou4_0a640005 proto 30']);
      await server.sync(new Set());
      assert.deepEqual(await table(e, 4, 118), []);
    });
  });
});
