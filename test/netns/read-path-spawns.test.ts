// coild's reads of the host start no process: start-up recovery and a GC pass, over pods wired on
// real veths in a "host" netns, read links and routes as rtnetlink dumps (through the netlink
// agent, coild's backend on Node) and write through typed requests, so the spawner that would
// start `ip` (ProcessSpawner, the seam coild's spawn helper plugs into) is never called. Before
// the reads were dumps, recovery started three `ip -json` processes and a GC pass five or more.
// The same passes over the iproute2 fallback spawn, which shows the counter counts.
// Needs root and the agent (hack/build-cni.sh); skipped with the reason otherwise (under CI=true, a failure).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Kinds } from '../../src/api/v2/kinds.js';
import { IpRunner, spawnProcess, type ProcessSpawner } from '../../src/netlink/iproute2/ip-runner.js';
import { NetlinkAgent } from '../../src/netlink/netlink-agent.js';
import { NetlinkExecutor } from '../../src/netlink/netlink-executor.js';
import { BlockExport } from '../../src/node-agent/ipam/block-export.js';
import { BlockReleaser } from '../../src/node-agent/ipam/block-release.js';
import { BlockRequester } from '../../src/node-agent/ipam/block-request.js';
import { NodeGc } from '../../src/node-agent/ipam/gc.js';
import { NodeIpam } from '../../src/node-agent/ipam/node-ipam.js';
import { recoverAllocations } from '../../src/node-agent/ipam/recovery.js';
import { IpRouteExporter } from '../../src/node-agent/ipam/route-export.js';
import { KeyedMutex } from '../../src/node-agent/podnet/keyed-mutex.js';
import { RtnetlinkPodNetwork } from '../../src/node-agent/podnet/pod-network-rtnetlink.js';
import { silentLogger } from '../../src/runtime/logging.js';
import { FakeBlockClient, FakeCoildCache, fakeBlock } from '../fakes/coild-cache.fake.js';
import { prerequisite } from '../support/prerequisite.js';
import { TestNetnsSet, netnsSkipReason, type TestNetns } from './test-netns.js';

const HOUR_MS = 3_600_000;
const agent = new NetlinkAgent();
const skip = prerequisite(netnsSkipReason() ?? (agent.isUsable ? undefined : `${agent.runtimePath} or ${agent.scriptPath} missing: run hack/build-cni.sh`));

describe('recovery and GC read the host without starting a process (real netns)', { skip }, () => {
  const ip = new IpRunner();
  const netns = new TestNetnsSet({ ip });
  const spawned: string[][] = [];
  const counting: ProcessSpawner = (argv, input, t) => {
    spawned.push([...argv]);
    return spawnProcess(argv, input, t);
  };
  let host: TestNetns;
  const pods = ['10.8.0.1', '10.8.0.2', '10.8.0.5'];

  before(async () => {
    host = await netns.create('spawns-host');
    const wiring = new RtnetlinkPodNetwork({ ip, hostNetns: host.path, reapDelayMs: HOUR_MS });
    await wiring.init();
    for (const [i, ipv4] of pods.entries()) {
      const pod = await netns.create('spawns-pod');
      await wiring.setup(pod.path, { containerId: `spawns${process.pid}x${i}`, ifname: 'eth0', pool: 'p', ipv4, hostIPv4: '10.250.0.1' });
    }
  });
  after(async () => {
    agent.stop();
    await netns.cleanup();
  });

  /** One coild's IPAM parts over `host`, all kernel calls through `kernel`. */
  function coild(kernel: NetlinkExecutor) {
    const cache = new FakeCoildCache();
    cache.put(Kinds.AddressPool, { metadata: { name: 'p' }, spec: { blockSizeBits: 2, subnets: [{ ipv4: '10.8.0.0/24' }] } } as never);
    cache.put(Kinds.AddressBlock, fakeBlock('p', 0, '10.8.0.0/30'));
    cache.put(Kinds.AddressBlock, fakeBlock('p', 1, '10.8.0.4/30'));
    const logger = silentLogger();
    const client = new FakeBlockClient();
    const requester = new BlockRequester({ cache: cache.asCache(), client: client.asClient(), nodeName: 'n1', logger });
    const ipam = new NodeIpam({ cache: cache.asCache(), requester, logger, coolingMs: 0, lowWaterMark: 0, allocTimeoutMs: 1_000 });
    const podNetwork = new RtnetlinkPodNetwork({ kernel, hostNetns: host.path, reapDelayMs: HOUR_MS });
    const releaser = new BlockReleaser({ ipam, client: client.asClient(), logger, graceMs: HOUR_MS });
    const exporter = new BlockExport({ cache: cache.asCache(), exporter: new IpRouteExporter({ kernel, hostNetns: host.path }), logger });
    const gc = new NodeGc({ ipam, podNetwork, releaser, exporter, locks: new KeyedMutex(), logger });
    return { ipam, podNetwork, releaser, exporter, gc, logger };
  }

  /** Recovery, the export table's first sync, then one GC pass; the processes each started. */
  async function run(kernel: NetlinkExecutor): Promise<{ recovery: string[][]; gc: string[][]; registered: number }> {
    const c = coild(kernel);
    c.ipam.start();
    try {
      spawned.length = 0;
      const report = await recoverAllocations({ podNetwork: c.podNetwork, ipam: c.ipam, releaser: c.releaser, logger: c.logger });
      await c.exporter.start();
      const recovery = [...spawned];
      spawned.length = 0;
      const pass = await c.gc.run();
      assert.deepEqual([pass.freed, pass.adopted, pass.removed], [[], [], []], 'the normal path: nothing to free, adopt or delete');
      return { recovery, gc: [...spawned], registered: report.registered.length };
    } finally {
      await c.exporter.stop();
      c.releaser.stop();
      c.ipam.stop();
    }
  }

  test('through the netlink agent: recovery and a GC pass start 0 processes', async () => {
    const r = await run(new NetlinkExecutor({ rtnetlink: agent, ip: new IpRunner({ spawner: counting }) }));
    assert.equal(r.registered, pods.length);
    assert.deepEqual(r.recovery, [], 'recovery started processes');
    assert.deepEqual(r.gc, [], 'a GC pass started processes');
  });

  test('through the iproute2 fallback the same passes start ip processes (the counter counts)', async () => {
    const r = await run(new NetlinkExecutor({ ip: new IpRunner({ spawner: counting }) }));
    assert.equal(r.registered, pods.length);
    assert.ok(r.recovery.length >= 3 && r.recovery.every((argv) => argv.includes('ip')), JSON.stringify(r.recovery));
    assert.ok(r.gc.length >= 3 && r.gc.every((argv) => argv.includes('ip')), JSON.stringify(r.gc));
  });
});
