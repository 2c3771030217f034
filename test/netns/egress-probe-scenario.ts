/**
 * coild's NAT pod probe on real FoU, IPv4 and IPv6 (run in the VM by egress-failover-vm.test.ts;
 * `hack/fou-vm.sh -- node <this file>`): the VM's own netns is the node, where NatProber runs as
 * in coild; one NAT pod netns set up by coil-egress's code (FoU ports, NAT66 and NAT44 rules,
 * return rules). Prints `ok <step>` per step and `ALL OK`, or `FAIL <why>` and exits 1.
 */
import { FouServer } from '../../src/egress-agent/fou-server.js';
import { NftablesNat } from '../../src/egress-agent/nat-nftables.js';
import { IpRunner } from '../../src/netlink/iproute2/ip-runner.js';
import { writeSysctl } from '../../src/netlink/sysctl.js';
import { NatProber } from '../../src/node-agent/egress/nat-prober.js';
import { silentLogger } from '../../src/runtime/logging.js';
import { TestNetnsSet, type TestNetns } from './test-netns.js';
import { wire } from './egress-peer.js';

const ip = new IpRunner({ timeoutMs: 60_000 });
const netns = new TestNetnsSet({ ip });
const started = Date.now();

function step(name: string, ok: boolean, why = ''): void {
  if (!ok) throw new Error(`${name}: ${why}`);
  console.log(`ok ${name} (${((Date.now() - started) / 1000).toFixed(1)} s)`);
}

async function until(cond: () => boolean, ms: number): Promise<boolean> {
  const end = Date.now() + ms;
  while (!cond() && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
  return cond();
}

async function main(): Promise<void> {
  await ip.exec(['ip', 'netns', 'attach', 'coilprobe-node', String(process.pid)]);
  const n: TestNetns = { name: 'coilprobe-node', path: '/run/netns/coilprobe-node' };
  const e = await netns.create('e');
  await wire(ip, e, 'eth0', n, 'n-e');
  const v6 = (cidr: string, dev: string) => ['addr', 'add', cidr, 'dev', dev, 'nodad'];
  await ip.batch([['addr', 'add', '10.2.0.1/24', 'dev', 'n-e'], v6('fd02::1/64', 'n-e')], { netns: n.path });
  await ip.batch([['addr', 'add', '10.2.0.2/24', 'dev', 'eth0'], ['route', 'add', 'default', 'via', '10.2.0.1'], v6('fd02::2/64', 'eth0'), ['route', 'add', '::/0', 'via', 'fd02::1']], { netns: e.path });
  await writeSysctl(ip, 'net.ipv4.ip_forward', '1');
  await writeSysctl(ip, 'net.ipv6.conf.all.forwarding', '1');
  await new NftablesNat({ ip, podAddresses: ['10.2.0.2', 'fd02::2'], outInterface: 'eth0', netns: e.path }).init();
  await new FouServer({ ip, podAddresses: ['10.2.0.2', 'fd02::2'], port: 5555, isSourcePortAuto: false, outInterface: 'eth0', netns: e.path }).init();
  step('topology: node, NAT pod with FoU ports and NAT44/NAT66', true);

  const rtts: Record<string, number[]> = { '10.2.0.2': [], 'fd02::2': [] };
  const prober = new NatProber({ port: 5555, logger: silentLogger(), onRtt: (a, ms) => rtts[a]?.push(ms) });
  prober.setTargets(['10.2.0.2', 'fd02::2']);
  const ac = new AbortController();
  const running = prober.run(ac.signal);
  try {
    step('IPv4: the probe through FoU decapsulation, forwarding and MASQUERADE answers', await until(() => prober.health('10.2.0.2') === 'up', 20_000), prober.health('10.2.0.2'));
    step('IPv6: the ip6ip6 probe (UDP checksum over the pseudo-header) answers through NAT66', await until(() => prober.health('fd02::2') === 'up', 20_000), prober.health('fd02::2'));
    await new Promise((r) => setTimeout(r, 1_000));
    const p50 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? NaN;
    console.log(`# probe RTT p50: v4 ${p50(rtts['10.2.0.2']!).toFixed(2)} ms (${rtts['10.2.0.2']!.length}), v6 ${p50(rtts['fd02::2']!).toFixed(2)} ms (${rtts['fd02::2']!.length})`);
    // Answers from the NAT pod dropped at the node (a link down would also flush the IPv6
    // addresses, keep_addr_on_down being 0).
    await ip.exec(['nft', '-f', '-'], { netns: n.path, input: 'table inet coilprobe {\n chain in {\n  type filter hook input priority 0; policy accept;\n  ip saddr 10.2.0.2 drop\n  ip6 saddr fd02::2 drop\n }\n}\n' });
    const t0 = Date.now();
    step('the NAT pod unreachable: both families down', await until(() => prober.health('10.2.0.2') === 'down' && prober.health('fd02::2') === 'down', 10_000));
    console.log(`# down after ${Date.now() - t0} ms`);
    await ip.exec(['nft', 'delete', 'table', 'inet', 'coilprobe'], { netns: n.path });
    step('reachable again: both up', await until(() => prober.health('10.2.0.2') === 'up' && prober.health('fd02::2') === 'up', 20_000));
  } finally {
    ac.abort();
    await running;
  }
}

main().then(
  async () => { await netns.cleanup(); await ip.exec(['ip', 'netns', 'del', 'coilprobe-node']).catch(() => undefined); console.log('ALL OK'); process.exit(0); },
  async (err: unknown) => { console.log(`FAIL ${err instanceof Error ? err.message : String(err)}`); await netns.cleanup(); await ip.exec(['ip', 'netns', 'del', 'coilprobe-node']).catch(() => undefined); process.exit(1); },
);
