/**
 * NAT through an egress pod netns for a directly routed client (no tunnel: the kernel here has
 * NAT but no FoU): client → egress (masquerade out eth0) → target, with each backend:
 * nftables (our `coil-egress` tables), and iptables (Coil's two rules in the built-in chains) run
 * through both variants Debian ships, iptables-nft and iptables-legacy.
 * The target has a route to the egress pod only, so a reply can arrive only if the source was
 * rewritten; the target reports the peer it saw. Root only; skipped with the reason otherwise.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { EgressMetrics } from '../../src/egress-agent/egress-metrics.js';
import type { NatBackend } from '../../src/egress-agent/nat.js';
import { IptablesNat } from '../../src/egress-agent/nat-iptables.js';
import { NftablesNat } from '../../src/egress-agent/nat-nftables.js';
import { IpRunner } from '../../src/netlink/iproute2/ip-runner.js';
import { readIptablesRules, type IptablesCommands } from '../../src/netlink/netfilter/iptables.js';
import { writeSysctl } from '../../src/netlink/sysctl.js';
import { TestNetnsSet, netnsSkipReason, type TestNetns } from './test-netns.js';
import { peerSeenBy, wire } from './egress-peer.js';
import { prerequisite } from '../support/prerequisite.js';

const VARIANTS: ReadonlyArray<{ name: string; commands?: IptablesCommands }> = [
  { name: 'nftables' },
  { name: 'iptables (iptables-nft)', commands: { 4: 'iptables-nft', 6: 'ip6tables-nft' } },
  { name: 'iptables (iptables-legacy)', commands: { 4: 'iptables-legacy', 6: 'ip6tables-legacy' } },
];

for (const variant of VARIANTS) describe(`NAT through an egress netns: ${variant.name}`, { skip: prerequisite(netnsSkipReason()) }, () => {
  const ip = new IpRunner();
  const netns = new TestNetnsSet({ ip });
  let c: TestNetns;
  let e: TestNetns;
  let x: TestNetns;
  let nat: NatBackend;

  before(async () => {
    [c, e, x] = [await netns.create('nat-c'), await netns.create('nat-e'), await netns.create('nat-x')];
    await wire(ip, c, 'eth0', e, 'c0');
    await wire(ip, e, 'eth0', x, 'eth0');
    await ip.batch([['addr', 'add', '10.50.0.2/24', 'dev', 'eth0'], ['addr', 'add', 'fd50::2/64', 'dev', 'eth0', 'nodad'],
      ['route', 'add', 'default', 'via', '10.50.0.1'], ['route', 'add', '::/0', 'via', 'fd50::1']], { netns: c.path });
    await ip.batch([['addr', 'add', '10.50.0.1/24', 'dev', 'c0'], ['addr', 'add', 'fd50::1/64', 'dev', 'c0', 'nodad'],
      ['addr', 'add', '198.51.100.1/24', 'dev', 'eth0'], ['addr', 'add', 'fd98::1/64', 'dev', 'eth0', 'nodad']], { netns: e.path });
    await ip.batch([['addr', 'add', '198.51.100.2/24', 'dev', 'eth0'], ['addr', 'add', 'fd98::2/64', 'dev', 'eth0', 'nodad']], { netns: x.path });
    await writeSysctl(ip, 'net.ipv4.ip_forward', '1', { netns: e.path });
    await writeSysctl(ip, 'net.ipv6.conf.all.forwarding', '1', { netns: e.path });
    const o = { ip, podAddresses: ['198.51.100.1', 'fd98::1'], outInterface: 'eth0', netns: e.path };
    nat = variant.commands ? new IptablesNat({ ...o, commands: variant.commands }) : new NftablesNat(o);
  });
  after(() => netns.cleanup());

  test('without the NAT rules the target cannot answer (control)', async () => {
    assert.equal(await peerSeenBy(x, '198.51.100.2', 8080, c), 'timeout');
  });

  if (variant.commands) {
    test("exactly Coil's two rules per family, appended once however often init runs", async () => {
      for (let i = 0; i < 2; i++) await nat.init();
      for (const family of [4, 6] as const) {
        const t = { family, netns: e.path, commands: variant.commands! };
        const lines = [...await readIptablesRules(ip, 'nat', t), ...await readIptablesRules(ip, 'filter', t)].map((r) => `-A ${r.chain} ${r.text}`);
        assert.deepEqual(lines, [
          `-A POSTROUTING ! -s ${family === 4 ? '198.51.100.1/32' : 'fd98::1/128'} -o eth0 -j MASQUERADE`,
          '-A FORWARD -o eth0 -m state --state INVALID -j DROP',
        ]);
      }
      await nat.remove();
    });
  }

  test('IPv4: the target sees the egress address, and the masquerade counter advances', async () => {
    await nat.init();
    assert.equal(await peerSeenBy(x, '198.51.100.2', 8081, c), '198.51.100.1');
    const counters = await nat.counters();
    assert.equal(counters[4]?.masqueraded.packets, 1, 'one new connection, one masqueraded packet (nat chains see only the first)');
    const metrics = new EgressMetrics({ namespace: 'egress', egress: 'nat', pod: 'nat-0' }, { defaultMetrics: false });
    metrics.setNat(counters);
    assert.match(await metrics.registry.metrics(), /coil_egress_nftables_masqueraded_packets_total\{namespace="egress",pod="nat-0",egress="nat",protocol="ipv4"\} 1/);
  });

  test('IPv6 (NAT66): the target sees the egress address', async () => {
    assert.equal(await peerSeenBy(x, 'fd98::2', 8082, c), 'fd98::1');
  });

  test('the egress pod\'s own connections keep their address (saddr != own is not masqueraded)', async () => {
    assert.equal(await peerSeenBy(x, '198.51.100.2', 8083, e), '198.51.100.1');
    assert.equal((await nat.counters())[4]?.masqueraded.packets, 1);
  });

  test('removing the NAT rules stops the translation again', async () => {
    await nat.remove();
    assert.equal(await peerSeenBy(x, '198.51.100.2', 8084, c), 'timeout');
    assert.deepEqual(await nat.counters(), { 4: undefined, 6: undefined });
  });
});
