/**
 * An Egress's shared SNAT address moving between nodes over BGP, with real BIRD: two nodes N1 and
 * N2, each with one NAT pod netns wired as coild wires pods (veth, /32 in the pod table 116 and its
 * rule), each running coild's SnatRouter and BIRD as the lab's nodes do (table 119 learned, sent
 * over iBGP, next hop self); a router R peering with both, which installs what it learns in its
 * main table — the upstream that sends the servers' answers to S. The active NAT pod (what every
 * coild computes from its probes; here given) moves from N1's NAT pod to N2's:
 * - N1 withdraws S and N2 announces it, and R routes S to N2 only;
 * - N1 lost (its BIRD stopped: no withdrawal, no BGP message, as a hung or dead node) while N2
 *   takes S over: with BFD between R and the nodes, R drops N1's path within BFD's detection time
 *   (5 × 100 ms) and routes S to N2; without it R would keep N1's stale path (the lower router id
 *   wins the tie) until the BGP hold time (docs/egress-failover.md#sessions-kept-the-shared-snat-address).
 * No FoU is needed: this runs on this machine's kernel. Root and bird2 (hack/setup.sh) only.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Registry } from 'prom-client';
import type { Egress } from '../../src/api/v2/egress.js';
import { Kinds } from '../../src/api/v2/kinds.js';
import { IpRunner } from '../../src/netlink/iproute2/ip-runner.js';
import { NetlinkExecutor } from '../../src/netlink/netlink-executor.js';
import { readRoutes } from '../../src/netlink/route.js';
import { writeSysctl } from '../../src/netlink/sysctl.js';
import { SnatRouter } from '../../src/node-agent/egress/snat-routes.js';
import { IpRouteExporter } from '../../src/node-agent/ipam/route-export.js';
import { silentLogger } from '../../src/runtime/logging.js';
import { FakeCoildCache } from '../fakes/coild-cache.fake.js';
import { prerequisite } from '../support/prerequisite.js';
import { TestNetnsSet, netnsSkipReason, type TestNetns } from './test-netns.js';

const BIRD = '/usr/sbin/bird';
const S = '203.0.113.10';
const AS = 64512;

const skip = prerequisite(netnsSkipReason() ?? (existsSync(BIRD) ? undefined : `${BIRD} is missing: run hack/setup.sh (bird2)`));

/** A node's BIRD: table 119 learned (as hack/lab/bird.ts) and sent to R with BFD. */
function nodeBird(local: string, router: string): string {
  return `router id ${local};
protocol device { scan time 10; }
ipv4 table t119;
protocol kernel k119 { kernel table 119; learn; scan time 1; ipv4 { table t119; import all; export none; }; }
protocol pipe p119 { table master4; peer table t119; import all; export none; }
protocol bfd { interface "*" { interval 100 ms; multiplier 5; }; }
protocol bgp up { local ${local} as ${AS}; neighbor ${router} as ${AS}; direct; hold time 9; keepalive time 3; connect delay time 1; bfd on;
  ipv4 { import none; export where proto = "k119"; next hop self; }; }
`;
}

/** R's BIRD: one session per node, what it learns into its main table. */
function routerBird(sessions: ReadonlyArray<{ local: string; neighbor: string }>): string {
  return `router id ${sessions[0]!.local};
protocol device { scan time 10; }
protocol kernel kmain { kernel table 254; scan time 10; ipv4 { import none; export where source = RTS_BGP; }; }
protocol bfd { interface "*" { interval 100 ms; multiplier 5; }; }
${sessions.map((s, i) => `protocol bgp node${i + 1} { local ${s.local} as ${AS}; neighbor ${s.neighbor} as ${AS}; direct; hold time 9; keepalive time 3; connect delay time 1; bfd on;
  ipv4 { import all; export none; }; }`).join('\n')}
`;
}

describe('a shared SNAT address moves between nodes over BGP (real BIRD)', { skip }, () => {
  const ip = new IpRunner();
  const kernel = new NetlinkExecutor({ ip });
  const netns = new TestNetnsSet({ ip });
  const birds: ChildProcess[] = [];
  const cache = new FakeCoildCache();
  let dir: string;
  let r: TestNetns;
  const nodes: Array<{ ns: TestNetns; address: string; natPod: string; router: SnatRouter; export: IpRouteExporter; bird?: ChildProcess }> = [];
  /** The active NAT pod every coild computes (given here), with its node. */
  let active: { address: string; nodeName: string } | undefined;

  /** R's route to S: its gateways (one per path). */
  const rToS = async (): Promise<string[]> => (await readRoutes(kernel, { netns: r.path, family: 4 })).filter((x) => x.dst === S).map((x) => x.gateway ?? x.dev ?? '?');

  const startBird = async (ns: TestNetns, name: string, conf: string): Promise<ChildProcess> => {
    const file = join(dir, `${name}.conf`);
    await writeFile(file, conf);
    const p = spawn(ip.ipPath, ['netns', 'exec', ns.name, BIRD, '-f', '-c', file, '-s', join(dir, `${name}.ctl`), '-P', join(dir, `${name}.pid`)], { stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    p.stderr!.on('data', (b: Buffer) => { err += b.toString(); });
    p.once('exit', (code, signal) => { if (code) console.error(`bird ${name} exited ${code ?? signal}: ${err}`); });
    birds.push(p);
    return p;
  };

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'coil-snat-bgp-'));
    const egress: Egress = { metadata: { namespace: 'internet', name: 'nat' }, spec: { destinations: ['0.0.0.0/0'], replicas: 2, sessionAffinity: 'ClientIP', snatAddresses: [S] } };
    cache.put(Kinds.Egress, egress);
    r = await netns.create('snat-r');
    for (const i of [1, 2]) {
      const ns = await netns.create(`snat-n${i}`);
      const pod = await netns.create(`snat-pod${i}`);
      const address = `10.70.${i}.2`;
      const natPod = `10.64.0.${i}`;
      await ip.batch([['link', 'add', 'up0', 'type', 'veth', 'peer', 'name', `n${i}`, 'netns', r.name], ['link', 'set', 'up0', 'up'], ['addr', 'add', `${address}/24`, 'dev', 'up0'],
        ['link', 'add', 'vpod', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', pod.name], ['link', 'set', 'vpod', 'up'],
        ['route', 'add', `${natPod}/32`, 'dev', 'vpod', 'scope', 'link', 'proto', '30', 'table', '116'], ['rule', 'add', 'pref', '2000', 'table', '116']], { netns: ns.path });
      await ip.batch([['link', 'set', `n${i}`, 'up'], ['addr', 'add', `10.70.${i}.1/24`, 'dev', `n${i}`]], { netns: r.path });
      await ip.batch([['link', 'set', 'eth0', 'up'], ['addr', 'add', `${natPod}/32`, 'dev', 'eth0']], { netns: pod.path });
      await writeSysctl(ip, 'net.ipv4.ip_forward', '1', { netns: ns.path });
      const exporter = new IpRouteExporter({ kernel, hostNetns: ns.path });
      const nodeName = `node-${i}`;
      const router: SnatRouter = new SnatRouter({
        cache: cache.asCache(), kernel, ip, hostNetns: ns.path, nodeName, hostedNatPods: () => [natPod], podTableId: 116, protocolId: 30, logger: silentLogger(), registry: new Registry(),
        activeOf: () => active, onExportChange: () => void exporter.sync(router.exported()),
      });
      nodes.push({ ns, address, natPod, router, export: exporter });
    }
    await startBird(r, 'r', routerBird(nodes.map((n, i) => ({ local: `10.70.${i + 1}.1`, neighbor: n.address }))));
    for (const [i, n] of nodes.entries()) n.bird = await startBird(n.ns, `n${i + 1}`, nodeBird(n.address, `10.70.${i + 1}.1`));
  });

  after(async () => {
    for (const p of birds) {
      p.kill('SIGCONT');
      p.kill('SIGTERM');
    }
    await Promise.all(birds.map((p) => (p.exitCode === null && p.signalCode === null ? new Promise((res) => p.once('exit', res)) : undefined)));
    await netns.cleanup();
    await rm(dir, { recursive: true, force: true });
  });

  /** Every coild's SnatRouter syncs (each reacts to its own probes; here at once). */
  const syncAll = async () => { for (const n of nodes) await n.router.sync(); };

  test('the active NAT pod on N1: N1 routes S to it and announces it; R routes S to N1', async () => {
    active = { address: nodes[0]!.natPod, nodeName: 'node-1' };
    await syncAll();
    await untilAsync(async () => (await rToS()).join() === nodes[0]!.address, 30_000, async () => `R's route to S: ${(await rToS()).join() || 'none'}`);
    const get = await ip.exec([ip.ipPath, '-n', nodes[0]!.ns.name, 'route', 'get', S]);
    assert.match(get.stdout, /via 10\.64\.0\.1 dev vpod/);
  });

  test('the active NAT pod moves to N2: N1 withdraws, N2 announces, R routes S to N2 only', async (t) => {
    active = { address: nodes[1]!.natPod, nodeName: 'node-2' };
    const t0 = Date.now();
    await syncAll();
    await untilAsync(async () => (await rToS()).join() === nodes[1]!.address, 10_000, async () => `R's route to S: ${(await rToS()).join() || 'none'}`);
    t.diagnostic(`R routed S to N2 ${Date.now() - t0} ms after the nodes' syncs began`);
    assert.deepEqual((await readRoutes(kernel, { netns: nodes[0]!.ns.path, family: 4, table: 119 })).map((x) => x.dst), [], 'N1 exports nothing');
  });

  test('N1 lost (its BIRD stopped, no withdrawal) while N2 takes S over: BFD drops N1\'s stale path, R routes S to N2', async (t) => {
    active = { address: nodes[0]!.natPod, nodeName: 'node-1' };
    await syncAll();
    await untilAsync(async () => (await rToS()).join() === nodes[0]!.address, 10_000, async () => `R's route to S: ${(await rToS()).join() || 'none'}`);
    // N1 hangs: neither its coild nor its BIRD says anything more; N2's coild sees N1's NAT pod fail.
    nodes[0]!.bird!.kill('SIGSTOP');
    const t0 = Date.now();
    active = { address: nodes[1]!.natPod, nodeName: 'node-2' };
    await nodes[1]!.router.sync();
    // BFD detects in 5 × 100 ms; the BGP hold time (9 s) is what it would take without it.
    await untilAsync(async () => (await rToS()).join() === nodes[1]!.address, 3_000, async () => `R's route to S: ${(await rToS()).join() || 'none'} (N1's stale path kept: BFD did not drop it)`);
    t.diagnostic(`R routed S to N2 ${Date.now() - t0} ms after N1 stopped`);
    nodes[0]!.bird!.kill('SIGCONT');
  });
});

/** Polls the async `cond` every 50 ms until it holds. @throws AssertionError with `what()` after `timeoutMs` */
async function untilAsync(cond: () => Promise<boolean>, timeoutMs: number, what: () => Promise<string>): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > end) assert.fail(await what());
    await new Promise((res) => setTimeout(res, 50));
  }
}
