import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { IpRunner } from '../iproute2/ip-runner.js';
import { NFT_EGRESS_TABLE, applyNatRules, deleteNatRules, natRuleset, parseNatCounters, readNatCounters } from './nftables.js';
import { TestNetnsSet, netnsSkipReason, type TestNetns } from '../../../test/netns/test-netns.js';
import { prerequisite } from '../../../test/support/prerequisite.js';

describe('nftables NAT rules (pure)', () => {
  test('the IPv4 script replaces only our own table, atomically', () => {
    const s = natRuleset({ family: 4, outInterface: 'eth0', ownAddress: '10.1.0.5' });
    assert.match(s, /^table ip coil-egress \{\}\ndelete table ip coil-egress\ntable ip coil-egress \{/);
    assert.match(s, /type nat hook postrouting priority srcnat;.*\n.*oifname "eth0" ip saddr != 10\.1\.0\.5 counter masquerade/);
    assert.match(s, /type filter hook forward priority filter;.*\n.*oifname "eth0" ct state invalid counter drop/);
  });

  test('IPv6 uses the ip6 family and ip6 saddr', () => {
    assert.match(natRuleset({ family: 6, outInterface: 'eth0', ownAddress: 'fd00::5' }), /table ip6 coil-egress[^]*ip6 saddr != fd00::5 counter masquerade/);
  });

  test('with a shared SNAT address: snat to it without a port range (the client port is kept), and stray new packets to it are dropped', () => {
    const s = natRuleset({ family: 4, outInterface: 'eth0', ownAddress: '10.1.0.5', snatAddress: '203.0.113.10' });
    assert.match(s, /oifname "eth0" ip saddr != 10\.1\.0\.5 counter snat to 203\.0\.113\.10 comment/);
    assert.doesNotMatch(s, /masquerade counter|snat to 203\.0\.113\.10:/);
    assert.match(s, /type filter hook forward priority filter;[^]*iifname "eth0" ip daddr 203\.0\.113\.10 ct state new counter drop/);
    assert.match(natRuleset({ family: 6, outInterface: 'eth0', ownAddress: 'fd00::5', snatAddress: '2001:DB8::a' }), /snat to 2001:db8::a[^]*ip6 daddr 2001:db8::a ct state new/);
    assert.throws(() => natRuleset({ family: 4, outInterface: 'eth0', ownAddress: '10.1.0.5', snatAddress: '2001:db8::a' }), /SNAT address 2001:db8::a is not an IPv4 address/);
    assert.doesNotMatch(natRuleset({ family: 4, outInterface: 'eth0', ownAddress: '10.1.0.5' }), /snat|daddr/);
  });

  test('a wrong-family own address or an unsafe interface name is refused', () => {
    assert.throws(() => natRuleset({ family: 4, outInterface: 'eth0', ownAddress: 'fd00::5' }), TypeError);
    assert.throws(() => natRuleset({ family: 4, outInterface: 'eth0"; flush ruleset', ownAddress: '10.0.0.1' }), TypeError);
  });

  test('counters are found by rule comment; absent rules read as zero', () => {
    const json = JSON.stringify({ nftables: [{ metainfo: {} }, { rule: { comment: 'coil-egress-masquerade', expr: [{ match: {} }, { counter: { packets: 3, bytes: 252 } }, { masquerade: null }] } }] });
    assert.deepEqual(parseNatCounters(json), { masqueraded: { packets: 3, bytes: 252 }, invalid: { packets: 0, bytes: 0 } });
  });
});

describe('nftables NAT rules in a real network namespace', { skip: prerequisite(netnsSkipReason()) }, () => {
  const ip = new IpRunner();
  const netns = new TestNetnsSet({ ip });
  let ns: TestNetns;
  before(async () => { ns = await netns.create('nft'); });
  after(() => netns.cleanup());

  test('applying twice leaves exactly one table per family with the two counted rules, and others untouched', async () => {
    await ip.exec(['nft', '-f', '-'], { netns: ns.path, input: 'table ip other { chain c { type filter hook input priority 0; }; }\n' });
    for (let i = 0; i < 2; i++) {
      await applyNatRules(ip, { family: 4, outInterface: 'eth0', ownAddress: '10.1.0.5' }, { netns: ns.path });
      await applyNatRules(ip, { family: 6, outInterface: 'eth0', ownAddress: 'fd00::5' }, { netns: ns.path });
    }
    const { stdout } = await ip.exec(['nft', '-j', 'list', 'ruleset'], { netns: ns.path });
    const items = (JSON.parse(stdout) as { nftables: Array<Record<string, { family: string; name?: string; table?: string; chain?: string; comment?: string }>> }).nftables;
    const tables = items.filter((i) => i.table).map((i) => `${i.table!.family} ${i.table!.name}`).sort();
    assert.deepEqual(tables, ['ip coil-egress', 'ip other', 'ip6 coil-egress']);
    const rules = items.filter((i) => i.rule).map((i) => `${i.rule!.family} ${i.rule!.chain} ${i.rule!.comment}`).sort();
    assert.deepEqual(rules, ['ip forward coil-egress-invalid', 'ip postrouting coil-egress-masquerade',
      'ip6 forward coil-egress-invalid', 'ip6 postrouting coil-egress-masquerade']);
    const text = (await ip.exec(['nft', 'list', 'table', 'ip', NFT_EGRESS_TABLE], { netns: ns.path })).stdout;
    assert.match(text, /oifname "eth0" ip saddr != 10\.1\.0\.5 counter packets 0 bytes 0 masquerade/);
    assert.match(text, /oifname "eth0" ct state invalid counter packets 0 bytes 0 drop/);
  });

  test('counters read back; delete removes our tables only, and repeats', async () => {
    assert.deepEqual(await readNatCounters(ip, 4, { netns: ns.path }), { masqueraded: { packets: 0, bytes: 0 }, invalid: { packets: 0, bytes: 0 } });
    for (let i = 0; i < 2; i++) { await deleteNatRules(ip, 4, { netns: ns.path }); await deleteNatRules(ip, 6, { netns: ns.path }); }
    assert.equal(await readNatCounters(ip, 4, { netns: ns.path }), undefined);
    const { stdout } = await ip.exec(['nft', 'list', 'tables'], { netns: ns.path });
    assert.equal(stdout.trim(), 'table ip other');
  });
});
