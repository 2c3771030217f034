/**
 * Originating-only egress in real network namespaces, with each backend (nftables; iptables through
 * iptables-nft and through iptables-legacy). A client pod C with an Egress for everything (rules
 * 1800–2100, table 118 → the tunnel) serves TCP; a host X outside the cluster connects to it
 * through the node N. With the mode off the pod's replies follow rule 2100 into the tunnel and the
 * connection fails; with it on they leave through eth0 and X is answered — while C's own
 * connections still go to the tunnel.
 *
 * This kernel has no FoU, so the tunnel here is a stand-in: a veth carrying the peer link's name,
 * whose other end goes nowhere (never answered); what a connection sends into it is counted per
 * port at that other end (TunnelFarEnd), not by the link's counter, which the link's own IPv6
 * traffic moves at random times. egress-fou-vm.test.ts runs the same check through real FoU
 * tunnels in a VM. Root only; skipped with the reason otherwise.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { NetfilterBackend } from '../../src/api/v2/keys.js';
import { fouPeerLinkName } from '../../src/netlink/fou.js';
import { IpRunner } from '../../src/netlink/iproute2/ip-runner.js';
import { NetlinkAgent } from '../../src/netlink/netlink-agent.js';
import { NetlinkExecutor } from '../../src/netlink/netlink-executor.js';
import { readIptablesRules, type IptablesCommands } from '../../src/netlink/netfilter/iptables.js';
import { writeSysctl } from '../../src/netlink/sysctl.js';
import { TestNetnsSet, netnsSkipReason, type TestNetns } from './test-netns.js';
import { prerequisite } from '../support/prerequisite.js';
import { SpawnCounter } from '../support/spawn-count.js';
import { EgressClient, planEgressClient } from '../../src/node-agent/egress/egress-client.js';
import { OriginatingOnly } from '../../src/node-agent/egress/originating-only.js';
import { TunnelFarEnd, peerSeenBy, wire } from './egress-peer.js';

const VARIANTS: ReadonlyArray<{ name: string; backend: NetfilterBackend; iptables?: IptablesCommands; viaAgent?: boolean }> = [
  { name: 'nftables', backend: 'nftables' },
  // coild's path: the reads and writes of the tables and rules as typed requests through the netlink agent.
  { name: 'nftables, rtnetlink (the netlink agent)', backend: 'nftables', viaAgent: true },
  { name: 'iptables (iptables-nft)', backend: 'iptables', iptables: { 4: 'iptables-nft', 6: 'ip6tables-nft' } },
  { name: 'iptables (iptables-legacy)', backend: 'iptables', iptables: { 4: 'iptables-legacy', 6: 'ip6tables-legacy' } },
];

const GATEWAYS = [
  { egress: 'internet/nat', clusterIp: '10.96.0.100', destinations: ['0.0.0.0/0'], isSourcePortAuto: false },
  { egress: 'internet/nat', clusterIp: 'fd96::100', destinations: ['::/0'], isSourcePortAuto: false },
];
const TUNNEL4 = fouPeerLinkName('10.96.0.100');
const TUNNEL6 = fouPeerLinkName('fd96::100');

const agent = new NetlinkAgent();
const agentMissing = agent.isUsable ? undefined : `${agent.runtimePath} or ${agent.scriptPath} missing: run hack/build-cni.sh`;

for (const variant of VARIANTS) describe(`originating-only egress: ${variant.name}`, { skip: prerequisite(netnsSkipReason() ?? (variant.viaAgent ? agentMissing : undefined)) }, () => {
  const ip = new IpRunner();
  const netns = new TestNetnsSet({ ip });
  // Processes the typed path starts (there must be no `ip` among them).
  const spawns = new SpawnCounter();
  const counted = spawns.ip;
  const kernel = variant.viaAgent ? { kernel: new NetlinkExecutor({ rtnetlink: agent, ip: counted }) } : {};
  const oo = new OriginatingOnly({ ip: variant.viaAgent ? counted : ip, ...kernel, backend: variant.backend, ...(variant.iptables ? { iptables: variant.iptables } : {}) });
  const client = new EgressClient({ ip, ...kernel, port: 5555, modprobePath: null, originatingOnly: { enabled: true, applier: oo } });
  const plan = planEgressClient({ podIps: ['10.1.0.2', 'fd01::2'], port: 5555, gateways: GATEWAYS });
  let c: TestNetns;
  let x: TestNetns;
  let far: TunnelFarEnd;
  let eth0Index = 0;
  let port = 9100;

  const txOf = async (dev: string): Promise<number> => {
    const [l] = await ip.json<Array<{ stats64?: { tx: { packets: number } } }>>(['-s', 'link', 'show', 'dev', dev], { netns: c.path });
    return l?.stats64?.tx.packets ?? 0;
  };
  const rules = async (family: 4 | 6): Promise<string[]> =>
    (await ip.json<Array<{ priority: number; fwmark?: string; table: string }>>(['rule', 'show'], { netns: c.path, family }))
      .filter((r) => r.priority === 1000).map((r) => `1000 fwmark ${r.fwmark} lookup ${r.table}`);
  const table = async (family: 4 | 6, id: number): Promise<string[]> =>
    (await ip.json<Array<{ dst: string; gateway?: string; dev: string }>>(['route', 'show', 'table', String(id)], { netns: c.path, family }).catch(() => []))
      .map((r) => `${r.dst}${r.gateway ? ` via ${r.gateway}` : ''} dev ${r.dev}`).sort();
  const mangle = async (family: 4 | 6): Promise<string[]> => {
    if (variant.backend === 'iptables') {
      return (await readIptablesRules(ip, 'mangle', { family, netns: c.path, commands: variant.iptables! })).map((r) => `-A ${r.chain} ${r.text}`);
    }
    const { stdout } = await ip.exec(['nft', 'list', 'ruleset', family === 4 ? 'ip' : 'ip6'], { netns: c.path });
    return stdout.split('\n').map((l) => l.trim()).filter(Boolean);
  };

  before(async () => {
    const n = await netns.create('oo-node');
    c = await netns.create('oo-pod');
    x = await netns.create('oo-out');
    const sink = await netns.create('oo-sink');
    await wire(ip, c, 'eth0', n, 'n-c');
    await wire(ip, x, 'eth0', n, 'n-x');
    await wire(ip, c, TUNNEL4, sink, 't4');
    await wire(ip, c, TUNNEL6, sink, 't6');
    far = new TunnelFarEnd(ip, sink, ['t4', 't6']);
    await far.init();
    // The stand-ins transmit to a MAC nobody has: every packet is counted, none answered.
    await ip.batch([['neigh', 'add', '198.51.100.2', 'lladdr', '02:00:00:00:00:01', 'dev', TUNNEL4, 'nud', 'permanent'],
      ['neigh', 'add', '2001:db8:98::2', 'lladdr', '02:00:00:00:00:01', 'dev', TUNNEL6, 'nud', 'permanent']], { netns: c.path });
    // The pod as coild wires it: /32 and /128, the node's address as a link route and the gateway.
    await ip.batch([['addr', 'add', '10.1.0.2/32', 'dev', 'eth0'], ['addr', 'add', 'fd01::2/128', 'dev', 'eth0', 'nodad'],
      ['route', 'add', '10.1.0.1/32', 'dev', 'eth0', 'scope', 'link'], ['route', 'add', 'default', 'via', '10.1.0.1', 'dev', 'eth0'],
      ['route', 'add', 'fd01::1/128', 'dev', 'eth0'], ['route', 'add', '::/0', 'via', 'fd01::1', 'dev', 'eth0']], { netns: c.path });
    await ip.batch([['addr', 'add', '10.1.0.1/32', 'dev', 'n-c'], ['addr', 'add', 'fd01::1/128', 'dev', 'n-c', 'nodad'],
      ['route', 'add', '10.1.0.2/32', 'dev', 'n-c'], ['route', 'add', 'fd01::2/128', 'dev', 'n-c'],
      ['addr', 'add', '198.51.100.1/24', 'dev', 'n-x'], ['addr', 'add', '2001:db8:98::1/64', 'dev', 'n-x', 'nodad']], { netns: n.path });
    await ip.batch([['addr', 'add', '198.51.100.2/24', 'dev', 'eth0'], ['addr', 'add', '2001:db8:98::2/64', 'dev', 'eth0', 'nodad'],
      ['route', 'add', 'default', 'via', '198.51.100.1'], ['route', 'add', '::/0', 'via', '2001:db8:98::1']], { netns: x.path });
    await writeSysctl(ip, 'net.ipv4.ip_forward', '1', { netns: n.path });
    await writeSysctl(ip, 'net.ipv6.conf.all.forwarding', '1', { netns: n.path });
    await client.applyRouting(c.path, plan);
    eth0Index = (await ip.json<Array<{ ifindex: number }>>(['link', 'show', 'dev', 'eth0'], { netns: c.path }))[0]!.ifindex;
  });
  after(async () => {
    if (variant.viaAgent) {
      agent.stop();
      assert.deepEqual(spawns.of('ip'), [], 'no ip process on the typed path');
      assert.ok(spawns.of('nft').length > 0, `the counter sees the nft processes: ${spawns.programs().join(', ')}`);
    }
    await netns.cleanup();
  });

  /** Opens a connection with `peerSeenBy` on a fresh port whose packets into the tunnels are counted. */
  const connect = async (server: TestNetns, host: string, client: TestNetns): Promise<{ seen: string; p: number }> => {
    const p = port++;
    await far.watch(p);
    return { seen: await peerSeenBy(server, host, p, client), p };
  };

  test('the tunnel counters count the connection under test only: not the link\'s own traffic, not another connection', async () => {
    // The interleaving that made this suite flaky, forced: a connection is watched, and other
    // packets enter the tunnel meanwhile — a UDP datagram (as the link's own IPv6 DAD, MLD and
    // router solicitations, sent at random times after the link comes up) and a SYN of another
    // connection (as a late SYN-ACK retransmitted by an earlier test's half-open connection).
    const watched = port++;
    const other = port++;
    await far.watch(watched);
    await far.watch(other);
    const link = await txOf(TUNNEL4);
    const NOISE = `const d=require('dgram').createSocket('udp4');d.send('x',9,'198.51.100.2',()=>{
require('net').connect(+process.argv[1],'198.51.100.2').on('error',()=>{});setImmediate(()=>process.exit(0))})`;
    await ip.exec(['ip', 'netns', 'exec', c.name, process.execPath, '-e', NOISE, String(other)]);
    assert.ok((await txOf(TUNNEL4)) >= link + 2, 'the link counter moved (as it did under the watched connection when this suite flaked)');
    assert.equal(await far.packets('t4', other), 1, 'the other connection\'s SYN was counted as its own');
    assert.equal(await far.packets('t4', watched), 0, 'nothing was counted for the watched connection');
  });

  test('mode off: the reply to a connection from outside goes into the tunnel, and the connection fails', async () => {
    const { seen, p } = await connect(c, '10.1.0.2', x);
    assert.equal(seen, 'timeout');
    assert.ok((await far.packets('t4', p)) > 0, 'the replies went out the tunnel');
  });

  test('mode on: exactly the table, rule and connmark rules of each family, idempotently', async () => {
    for (let i = 0; i < 2; i++) assert.deepEqual((await oo.apply(c.path, [4, 6]))[4], [{ name: 'eth0', index: eth0Index }]);
    const t = 1000 + eth0Index;
    const hex = `0x${eth0Index.toString(16)}`;
    const nftHex = `0x${eth0Index.toString(16).padStart(8, '0')}`;
    assert.deepEqual(await rules(4), [`1000 fwmark ${hex} lookup ${t}`]);
    assert.deepEqual(await rules(6), [`1000 fwmark ${hex} lookup ${t}`]);
    assert.deepEqual(await table(4, t), ['10.1.0.1 dev eth0', 'default via 10.1.0.1 dev eth0']);
    assert.deepEqual(await table(6, t), ['default via fd01::1 dev eth0', 'fd01::1 dev eth0', 'fd01::2 dev eth0', 'fe80::/64 dev eth0']);
    for (const family of [4, 6] as const) {
      if (variant.backend === 'iptables') {
        assert.deepEqual(await mangle(family), [
          `-A INPUT -i eth0 -m conntrack --ctstate NEW,RELATED,ESTABLISHED -j CONNMARK --set-xmark ${hex}/0xffffffff`,
          `-A OUTPUT -m connmark --mark ${hex} -j CONNMARK --restore-mark --nfmask 0xffffffff --ctmask 0xffffffff`,
        ]);
      } else {
        const f = family === 4 ? 'ip' : 'ip6';
        assert.deepEqual(await mangle(family), [
          `table ${f} mangle {`, 'set eth0 {', 'type ifname', 'elements = { "eth0" }', '}',
          'chain input {', 'type filter hook input priority mangle; policy accept;',
          `iifname @eth0 ct state established,related,new counter packets 0 bytes 0 ct mark set ${nftHex} comment "coil-input-eth0"`, '}',
          'chain output {', 'type route hook output priority mangle; policy accept;',
          `ct mark ${nftHex} counter packets 0 bytes 0 meta mark set ct mark comment "coil-output-eth0"`, '}', '}',
        ]);
      }
    }
  });

  test('mode on: a connection from outside is answered through eth0 (IPv4, IPv6); the pod\'s own still goes to the tunnel', async () => {
    const v4 = await connect(c, '10.1.0.2', x);
    assert.equal(v4.seen, '198.51.100.2');
    const v6 = await connect(c, 'fd01::2', x);
    assert.equal(v6.seen, '2001:db8:98::2');
    assert.equal(await far.packets('t4', v4.p), 0, 'no IPv4 reply went into the tunnel');
    assert.equal(await far.packets('t6', v6.p), 0, 'no IPv6 reply went into the tunnel');
    const own = await connect(x, '198.51.100.2', c);
    assert.equal(own.seen, 'timeout', 'a connection the pod opens still goes to the tunnel');
    assert.ok((await far.packets('t4', own.p)) > 0, 'its SYN went out the tunnel');
  });

  test('IPv6 gateway gone: the mode leaves IPv6 and stays on IPv4', async () => {
    await oo.apply(c.path, [4]);
    assert.deepEqual(await rules(6), []);
    assert.deepEqual(await table(6, 1000 + eth0Index), []);
    assert.equal((await mangle(6)).filter((l) => /CONNMARK|ct mark/.test(l)).length, 0);
    assert.equal((await rules(4)).length, 1);
  });

  test('no Egress left (or the mode off): the rule, table and connmark rules go, and the reply takes the tunnel again', async () => {
    await client.remove(c.path);
    for (const family of [4, 6] as const) {
      assert.deepEqual(await rules(family), []);
      assert.deepEqual(await table(family, 1000 + eth0Index), []);
      assert.deepEqual(await mangle(family), []);
    }
  });
});
