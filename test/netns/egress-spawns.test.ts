/**
 * The processes the egress paths start (issue 37's "done when"), counted through the
 * ProcessSpawner seam every program of coild and coil-egress goes through (IpRunner; coild's spawn
 * helper plugs into the same seam), over real FoU tunnels in real network namespaces:
 * - a client pod's egress ADD (EgressClient.apply: FoU ports, peer links, 117/118, rules, flow
 *   pins) and DEL (EgressClient.remove);
 * - a NAT pod failover on the client: the tunnel's move (EgressClient.retarget) and the pin sync
 *   after it (syncFlowPins);
 * - a client add on coil-egress (FouServer.sync with one client more).
 * Each starts no `ip` process (every link, address, route, rule and FoU port goes as a typed
 * request through the netlink agent: rtnetlink and generic netlink) and at most one `nft` per sync.
 * The same ADD through the iproute2 fallback starts `ip` processes: the counter counts.
 *
 * FoU is missing from this machine's kernel: the test says so and skips here, and
 * egress-fou-vm.test.ts runs it in a VM with a stock kernel. Needs root and the agent
 * (hack/build-cni.sh).
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { FouServer } from '../../src/egress-agent/fou-server.js';
import { probeFeatures } from '../../src/netlink/features.js';
import { IpRunner } from '../../src/netlink/iproute2/ip-runner.js';
import { NetlinkAgent } from '../../src/netlink/netlink-agent.js';
import { NetlinkExecutor } from '../../src/netlink/netlink-executor.js';
import { EgressClient, planEgressClient, type EgressGateway } from '../../src/node-agent/egress/egress-client.js';
import { FlowPins } from '../../src/node-agent/egress/flow-pins.js';
import { kernelLacks, prerequisite } from '../support/prerequisite.js';
import { SpawnCounter } from '../support/spawn-count.js';
import { TestNetnsSet, netnsSkipReason, type TestNetns } from './test-netns.js';

const agent = new NetlinkAgent();
const skip = prerequisite(netnsSkipReason() ?? (agent.isUsable ? undefined : `${agent.runtimePath} or ${agent.scriptPath} missing: run hack/build-cni.sh`));

const CLIENT = ['10.1.0.2', 'fd01::2'];
const NAT_A = ['10.1.0.100', 'fd01::100'];
const NAT_B = ['10.1.0.101', 'fd01::101'];

function gateways(nat: readonly string[]): EgressGateway[] {
  return [
    { egress: 'internet/nat', clusterIp: '10.96.0.100', destinations: ['0.0.0.0/0', '192.168.10.0/24'], isSourcePortAuto: false, natPod: nat[0]! },
    { egress: 'internet/nat', clusterIp: 'fd96::100', destinations: ['::/0'], isSourcePortAuto: false, natPod: nat[1]! },
  ];
}

describe('egress paths start no ip process and one nft per sync (real FoU, real netns)', { skip }, () => {
  const ip = new IpRunner();
  const netns = new TestNetnsSet({ ip });
  const spawns = new SpawnCounter();
  const kernel = new NetlinkExecutor({ rtnetlink: agent, ip: spawns.ip });
  let fouSkip: string | undefined;
  let c: TestNetns;
  let e: TestNetns;

  before(async () => {
    const f = await probeFeatures(ip);
    fouSkip = kernelLacks((['fou', 'ipip', 'ip6tnl'] as const).filter((k) => !f[k]), 'test/netns/egress-fou-vm.test.ts');
    if (fouSkip) return;
    c = await netns.create('spawn-client');
    e = await netns.create('spawn-egress');
    // The pod's eth0 with its addresses (the tunnels' local ends); the egress pod's likewise.
    await ip.batch([['link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', e.path], ['addr', 'add', `${CLIENT[0]}/24`, 'dev', 'eth0'],
      ['addr', 'add', `${CLIENT[1]}/64`, 'dev', 'eth0', 'nodad'], ['link', 'set', 'eth0', 'up']], { netns: c.path });
    await ip.batch([['addr', 'add', `${NAT_A[0]}/24`, 'dev', 'eth0'], ['addr', 'add', `${NAT_A[1]}/64`, 'dev', 'eth0', 'nodad'], ['link', 'set', 'eth0', 'up']], { netns: e.path });
  });
  after(async () => {
    agent.stop();
    await netns.cleanup();
  });

  /** What `run` started, checked: no ip, at most `nftMax` nft (each a whole `nft -f -` batch). */
  async function counted(what: string, run: () => Promise<unknown>, nftMax: number): Promise<string[]> {
    spawns.reset();
    await run();
    const programs = spawns.programs();
    assert.deepEqual(spawns.of('ip'), [], `${what}: no ip process (started: ${programs.join(', ') || 'none'})`);
    const nft = spawns.of('nft');
    assert.ok(nft.length <= nftMax, `${what}: at most ${nftMax} nft per sync (started: ${programs.join(', ')})`);
    for (const argv of nft) assert.deepEqual(argv.slice(argv.indexOf('nft') + 1), ['-f', '-'], `${what}: nft as one batch`);
    console.log(`# ${what}: ${programs.join(', ') || 'no process'}`);
    return programs;
  }

  test('client ADD, NAT pod failover (move and pin sync), DEL; coil-egress client add', async (t) => {
    if (fouSkip) return t.skip(fouSkip);
    const pins = new FlowPins({ ip: spawns.ip, kernel, backend: 'nftables' });
    const client = new EgressClient({ ip: spawns.ip, kernel, port: 5555, flowPins: { enabled: true, applier: pins } });
    const planA = planEgressClient({ podIps: CLIENT, port: 5555, linkMtuBytes: 1500, gateways: gateways(NAT_A) });
    const planB = planEgressClient({ podIps: CLIENT, port: 5555, linkMtuBytes: 1500, gateways: gateways(NAT_B) });

    await counted('egress ADD (apply)', () => client.apply(c.path, planA), 1);
    // The tunnels are there, pinned: the counts above are of a whole ADD.
    assert.deepEqual((await client.peerRemotes(c.path)).sort(), [NAT_A[0], NAT_A[1]].sort());
    assert.equal((await pins.current(c.path, 4)).size, 1);

    await counted('failover: tunnel move (retarget)', async () => assert.equal(await client.retarget(c.path, planA, planB), true), 0);
    await counted('failover: pin sync', () => client.syncFlowPins(c.path, planB), 1);
    assert.deepEqual((await client.peerRemotes(c.path)).sort(), [NAT_B[0], NAT_B[1]].sort());

    await counted('egress DEL (remove)', () => client.remove(c.path), 1);
    assert.deepEqual(await client.peerRemotes(c.path), []);

    const server = new FouServer({ ip: spawns.ip, kernel, podAddresses: NAT_A, port: 5555, isSourcePortAuto: false, outInterface: 'eth0', netns: e.path });
    await server.init();
    await server.sync(new Set());
    const added = await counted('coil-egress client add (sync)', () => server.sync(new Set(CLIENT)), 0);
    assert.deepEqual(added, []);
    assert.equal((await server.sync(new Set(CLIENT))).links.size, 2);
  });

  test('the counter counts: the same ADD through the iproute2 fallback starts ip processes', async (t) => {
    if (fouSkip) return t.skip(fouSkip);
    const fallback = new SpawnCounter();
    const client = new EgressClient({ ip: fallback.ip, port: 5555 });
    await client.apply(c.path, planEgressClient({ podIps: CLIENT, port: 5555, gateways: gateways(NAT_A) }));
    assert.ok(fallback.of('ip').length >= 5, `ip processes on the fallback: ${fallback.programs().join(', ')}`);
    await client.remove(c.path);
  });
});
