/**
 * The egress path end to end with real FoU tunnels, meant to run where the kernel has FoU, IPIP
 * and ip6tnl (inside the VM of egress-fou-vm.test.ts; `hack/fou-vm.sh -- node <this file>`).
 * Prints `ok <step>` per step and exits 0, or prints `FAIL <step>: <why>` and exits 1.
 *
 * Four namespaces: a "node" N routing between a client pod C, an egress pod E and a target X.
 * N plays kube-proxy: UDP to the ClusterIP 10.96.0.100:5555 is DNATed to E. X can route only to
 * E, so an answer proves the tunnel, the masquerade and the way back (`iif eth0 lookup 118`).
 */
import { FouServer } from '../../src/egress-agent/fou-server.js';
import { NftablesNat } from '../../src/egress-agent/nat-nftables.js';
import { fouPeerLinkName, readFouPeers } from '../../src/netlink/fou.js';
import { IpRunner } from '../../src/netlink/iproute2/ip-runner.js';
import { writeSysctl } from '../../src/netlink/sysctl.js';
import { TestNetnsSet } from './test-netns.js';
import { EgressClient, planEgressClient } from '../../src/node-agent/egress/egress-client.js';
import { originatingOnlySteps } from './egress-fou-originating-only.js';
import { peerSeenBy, wire } from './egress-peer.js';

const ip = new IpRunner({ timeoutMs: 60_000 });
const netns = new TestNetnsSet({ ip });
const started = Date.now();

function step(name: string, ok: boolean, why = ''): void {
  const at = ((Date.now() - started) / 1000).toFixed(1);
  if (!ok) throw new Error(`${name}: ${why}`);
  console.log(`ok ${name} (${at} s)`);
}

async function linkStats(ns: string, dev: string): Promise<{ rx: number; tx: number }> {
  const [l] = await ip.json<Array<{ stats64?: { rx: { packets: number }; tx: { packets: number } } }>>(['-s', 'link', 'show', 'dev', dev], { netns: ns });
  return { rx: l?.stats64?.rx.packets ?? 0, tx: l?.stats64?.tx.packets ?? 0 };
}

/** ping from `ns`: true when answered. A process start is ~80 ms in the VM against ~3 s for node. */
async function pings(ns: { name: string }, dst: string): Promise<boolean> {
  return ip.exec(['ip', 'netns', 'exec', ns.name, 'ping', '-c', '2', '-i', '0.2', '-W', '2', '-q', dst]).then(() => true, () => false);
}

async function main(): Promise<void> {
  const [n, c, e, x] = [await netns.create('n'), await netns.create('c'), await netns.create('e'), await netns.create('x')];
  await wire(ip, c, 'eth0', n, 'n-c');
  await wire(ip, e, 'eth0', n, 'n-e');
  await wire(ip, x, 'eth0', n, 'n-x');
  const v6 = (cidr: string, dev: string) => ['addr', 'add', cidr, 'dev', dev, 'nodad'];
  await ip.batch([['addr', 'add', '10.1.0.1/24', 'dev', 'n-c'], ['addr', 'add', '10.2.0.1/24', 'dev', 'n-e'], ['addr', 'add', '198.51.100.1/24', 'dev', 'n-x'],
    v6('fd01::1/64', 'n-c'), v6('fd02::1/64', 'n-e'), v6('fd98::1/64', 'n-x')], { netns: n.path });
  await ip.batch([['addr', 'add', '10.1.0.2/24', 'dev', 'eth0'], ['route', 'add', 'default', 'via', '10.1.0.1'], v6('fd01::2/64', 'eth0'), ['route', 'add', '::/0', 'via', 'fd01::1']], { netns: c.path });
  await ip.batch([['addr', 'add', '10.2.0.2/24', 'dev', 'eth0'], ['route', 'add', 'default', 'via', '10.2.0.1'], v6('fd02::2/64', 'eth0'), ['route', 'add', '::/0', 'via', 'fd02::1']], { netns: e.path });
  await ip.batch([['addr', 'add', '198.51.100.2/24', 'dev', 'eth0'], ['route', 'add', '10.2.0.0/24', 'via', '198.51.100.1'], v6('fd98::2/64', 'eth0'), ['route', 'add', 'fd02::/64', 'via', 'fd98::1']], { netns: x.path });
  await writeSysctl(ip, 'net.ipv4.ip_forward', '1', { netns: n.path });
  await writeSysctl(ip, 'net.ipv6.conf.all.forwarding', '1', { netns: n.path });
  await ip.exec(['nft', '-f', '-'], { netns: n.path, input: [
    'table ip kube-proxy {', ' chain pre {', '  type nat hook prerouting priority dstnat; policy accept;', '  ip daddr 10.96.0.100 udp dport 5555 dnat to 10.2.0.2', ' }', '}',
    'table ip6 kube-proxy {', ' chain pre {', '  type nat hook prerouting priority dstnat; policy accept;', '  ip6 daddr fd96::100 udp dport 5555 dnat to fd02::2', ' }', '}', ''].join('\n') });
  step('topology', true);

  const server = new FouServer({ ip, podAddresses: ['10.2.0.2', 'fd02::2'], port: 5555, isSourcePortAuto: false, outInterface: 'eth0', netns: e.path });
  await new NftablesNat({ ip, podAddresses: ['10.2.0.2', 'fd02::2'], outInterface: 'eth0', netns: e.path }).init();
  await server.init();
  const synced = await server.sync(new Set(['10.1.0.2', 'fd01::2']));
  step('egress pod: NAT, FoU ports, return rules, tunnels to the client (v4, v6)', synced.links.get('10.1.0.2') === 'fou4_0a010002' && synced.links.get('fd01::2') === fouPeerLinkName('fd01::2'), JSON.stringify([...synced.links]));

  const client = new EgressClient({ ip, port: 5555 });
  const gateway = { egress: 'egress/nat', clusterIp: '10.96.0.100', destinations: ['198.51.100.0/24'], isSourcePortAuto: false };
  // fd98::/64 is inside fc00::/7, so it goes to the narrow table 117 and beats rule 2000.
  const gateway6 = { egress: 'egress/nat', clusterIp: 'fd96::100', destinations: ['fd98::/64'], isSourcePortAuto: false };
  await client.apply(c.path, planEgressClient({ podIps: ['10.1.0.2', 'fd01::2'], port: 5555, linkMtuBytes: 1500, gateways: [gateway, gateway6] }));
  const [peer] = await ip.json<Array<{ mtu: number }>>(['link', 'show', 'dev', 'fou4_0a600064'], { netns: c.path });
  step('client pod: peer link to the ClusterIP with MTU 1500 - 28', peer?.mtu === 1472, `mtu ${peer?.mtu}`);

  const seen = await peerSeenBy(x, '198.51.100.2', 8080, c, 60_000);
  step('TCP through the tunnel: the target sees the egress pod address', seen === '10.2.0.2', seen);
  step('IPv6 through the ip6ip6 tunnel (table 117), NAT66 at the egress pod', await pings(c, 'fd98::2'));
  const tx = await linkStats(c.path, 'fou4_0a600064');
  const back = await linkStats(e.path, 'fou4_0a010002');
  step('packets went out the client tunnel and came back through the egress tunnel', tx.tx > 0 && back.tx > 0, JSON.stringify({ tx, back }));

  const fixed = (await readFouPeers(ip, { netns: c.path })).find((l) => l.family === 4);
  step('the fixed source port reads back as 5555', fixed?.sourcePort === 5555, JSON.stringify(fixed));

  // With per-flow source ports on both sides, a reply no longer matches N's DNAT conntrack entry,
  // so it arrives from the egress pod IP, which no peer link names: the flow-based device takes it.
  const autoPlan = planEgressClient({ podIps: ['10.1.0.2'], port: 5555, gateways: [{ ...gateway, isSourcePortAuto: true }] });
  await client.apply(c.path, autoPlan);
  await new FouServer({ ip, podAddresses: ['10.2.0.2'], port: 5555, isSourcePortAuto: true, outInterface: 'eth0', netns: e.path }).sync(new Set(['10.1.0.2']));
  const auto = (await readFouPeers(ip, { netns: c.path })).find((l) => l.family === 4);
  step('fouSourcePortAuto: the peer link was recreated with encap-sport auto', auto?.sourcePort === 0, JSON.stringify(auto));
  const before = await linkStats(c.path, 'coil_ipip4');
  const answered = await pings(c, '198.51.100.2');
  const afterAuto = await linkStats(c.path, 'coil_ipip4');
  step('ping answered; replies arrive on the flow-based device coil_ipip4', answered && afterAuto.rx > before.rx, `${answered} ${JSON.stringify({ before, afterAuto })}`);

  await originatingOnlySteps({ ip, c, x, podIp: '10.1.0.2', outsideIp: '198.51.100.2', outsideGateway: '198.51.100.1', egressIp: '10.2.0.2', plan: autoPlan, port: 5555, step });

  await client.remove(c.path);
  step('after removal the client is routed directly and gets no answer', !(await pings(c, '198.51.100.2')));
  await server.sync(new Set());
  const left = await ip.json<unknown[]>(['route', 'show', 'table', '118'], { netns: e.path });
  step('egress pod: a departed client loses its tunnel and route', left.length === 0, JSON.stringify(left));
}

main().then(
  async () => { await netns.cleanup(); console.log('ALL OK'); process.exit(0); },
  async (err: unknown) => { console.log(`FAIL ${err instanceof Error ? err.message : String(err)}`); await netns.cleanup(); process.exit(1); },
);
