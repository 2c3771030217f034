/**
 * Benchmark (not a test): coild's start-up recovery and one GC pass over a full node, reading the
 * host as rtnetlink dumps (now) against `ip -json` processes (before), in one run on this machine.
 *
 * A "host" netns holds `--pods` pods (default 110, kubelet's default maximum per node), each wired
 * by the real RtnetlinkPodNetwork on real veths. Each round then builds a fresh coild's IPAM parts
 * (NodeIpam, BlockReleaser, the export table's BlockExport, NodeGc; blocks from an in-memory cache,
 * test/fakes) twice, once per variant, and times:
 *
 * - recovery: `recoverAllocations` (list the host, register every pod, release empty blocks) and
 *   the export table's first sync, as coild.start() runs them;
 * - GC pass: one `NodeGc.run()` (list, inspect nothing, release nothing, sync the export table).
 *
 * Variants, as coild runs them (writes through rtnetlink in both):
 * - `ip -json (before)`: reads as `ip` processes (the path before the reads were dumps), started
 *   through coild's spawn helper on Node, directly on Bun;
 * - `rtnetlink (now)`: reads as dumps through the netlink agent on Node, through coild's own
 *   socket in-process on Bun.
 * Run it on Bun as coild runs in the image: `BUN_BE_BUN=1 dist/bin/coil dist/hack/bench/recovery.js`.
 * Rounds alternate the variants so drift hits both; the table gives p50/p95 per variant and the
 * ratio of the medians. Results: docs/performance.md#recovery-and-gc-reads.
 *
 * Usage (root; after hack/build-cni.sh): flock /tmp/coil-heavy.lock node dist/hack/bench/recovery.js [--pods 110] [--rounds 7]
 */
import { loadavg } from 'node:os';
import { Kinds } from '../../src/api/v2/kinds.js';
import { IpRunner } from '../../src/netlink/iproute2/ip-runner.js';
import { NetlinkAgent } from '../../src/netlink/netlink-agent.js';
import { NetlinkExecutor } from '../../src/netlink/netlink-executor.js';
import { InProcessRtnetlink, isBun } from '../../src/netlink/socket/rtnetlink-inprocess.js';
import type { RtDump } from '../../src/netlink/rt-request.js';
import { BlockExport } from '../../src/node-agent/ipam/block-export.js';
import { BlockReleaser } from '../../src/node-agent/ipam/block-release.js';
import { BlockRequester } from '../../src/node-agent/ipam/block-request.js';
import { NodeGc } from '../../src/node-agent/ipam/gc.js';
import { NodeIpam } from '../../src/node-agent/ipam/node-ipam.js';
import { recoverAllocations } from '../../src/node-agent/ipam/recovery.js';
import { IpRouteExporter } from '../../src/node-agent/ipam/route-export.js';
import { KeyedMutex } from '../../src/node-agent/podnet/keyed-mutex.js';
import { RtnetlinkPodNetwork } from '../../src/node-agent/podnet/pod-network-rtnetlink.js';
import { SpawnHelper } from '../../src/node-agent/podnet/spawn-helper.js';
import { defineFlags, type FlagValues } from '../../src/runtime/flag-table.js';
import { silentLogger } from '../../src/runtime/logging.js';
import { FakeBlockClient, FakeCoildCache, fakeBlock } from '../../test/fakes/coild-cache.fake.js';
import { TestNetnsSet, netnsSkipReason } from '../../test/netns/test-netns.js';
import { runBench } from './bench-flags.js';

const FLAGS = defineFlags('recovery', {
  pods: { kind: 'int', default: 110, min: 1, max: 4000, help: 'pods wired on the host netns' },
  rounds: { kind: 'int', default: 7, min: 1, max: 1000, help: 'timed rounds per variant (alternating)' },
});

const BLOCK_BITS = 5; // /27 blocks of 32 addresses; PODS_PER_BLOCK of each used, so 110 pods fill 4 blocks
const PODS_PER_BLOCK = 30;

/** Pod `i`'s address: the (i mod 30 + 1)-th of block ⌊i / 30⌋ of 10.8.0.0/16. */
function podAddress(i: number): string {
  const n = Math.floor(i / PODS_PER_BLOCK) * 32 + (i % PODS_PER_BLOCK) + 1;
  return `10.8.${n >> 8}.${n & 0xff}`;
}

/** The reads of before: `ip -json` processes, while writes still go to the rtnetlink backend. */
class ReadsThroughIp extends NetlinkExecutor {
  override dump<T>(d: RtDump, target: { netns?: string | undefined } = {}): Promise<T[]> {
    return this.ip.dump<T>(d, target);
  }
}

/** Nearest-rank percentile. */
function pct(values: readonly number[], q: number): number {
  const s = [...values].sort((a, b) => a - b);
  return s[Math.max(1, Math.ceil(q * s.length)) - 1] ?? NaN;
}

async function main(o: FlagValues<typeof FLAGS.specs>): Promise<void> {
  const skip = netnsSkipReason();
  if (skip) throw new Error(skip);
  const agent = new NetlinkAgent();
  if (!isBun && !agent.isUsable) throw new Error(`${agent.runtimePath} or ${agent.scriptPath} missing: run hack/build-cni.sh`);
  const rtnetlink = isBun ? new InProcessRtnetlink() : agent;
  const helper = isBun ? undefined : new SpawnHelper();
  const ip = new IpRunner(helper ? { spawner: helper.spawner } : {});
  const netns = new TestNetnsSet();
  const variants = {
    'ip -json (before)': new ReadsThroughIp({ ip, rtnetlink }),
    'rtnetlink (now)': new NetlinkExecutor({ ip, rtnetlink }),
  };
  try {
    const host = await netns.create('benchhost');
    const wiring = new RtnetlinkPodNetwork({ kernel: variants['rtnetlink (now)'], hostNetns: host.path });
    await wiring.init();
    const blocks = Math.ceil(o.pods / PODS_PER_BLOCK);
    const t0 = performance.now();
    for (let i = 0; i < o.pods; i++) {
      const pod = await netns.create('benchpod');
      await wiring.setup(pod.path, { containerId: `recovery${i}`, ifname: 'eth0', pool: 'p', ipv4: podAddress(i), hostIPv4: '10.250.0.1' });
    }
    process.stderr.write(`wired ${o.pods} pods in ${((performance.now() - t0) / 1000).toFixed(1)} s\n`);

    const coild = (kernel: NetlinkExecutor) => {
      const cache = new FakeCoildCache();
      cache.put(Kinds.AddressPool, { metadata: { name: 'p' }, spec: { blockSizeBits: BLOCK_BITS, subnets: [{ ipv4: '10.8.0.0/16' }] } } as never);
      for (let b = 0; b < blocks; b++) cache.put(Kinds.AddressBlock, fakeBlock('p', b, `10.8.${(b * 32) >> 8}.${(b * 32) & 0xff}/27`));
      const logger = silentLogger();
      const client = new FakeBlockClient();
      const requester = new BlockRequester({ cache: cache.asCache(), client: client.asClient(), nodeName: 'n1', logger });
      const ipam = new NodeIpam({ cache: cache.asCache(), requester, logger, coolingMs: 0, lowWaterMark: 0, allocTimeoutMs: 1_000 });
      const podNetwork = new RtnetlinkPodNetwork({ kernel, hostNetns: host.path });
      const releaser = new BlockReleaser({ ipam, client: client.asClient(), logger, graceMs: 3_600_000 });
      const exporter = new BlockExport({ cache: cache.asCache(), exporter: new IpRouteExporter({ kernel, hostNetns: host.path }), logger });
      const gc = new NodeGc({ ipam, podNetwork, releaser, exporter, locks: new KeyedMutex(), logger });
      return { ipam, podNetwork, releaser, exporter, gc, logger };
    };

    const times: Record<string, { recovery: number[]; gc: number[] }> = {};
    for (let round = 0; round <= o.rounds; round++) { // round 0 warms up both variants
      const names = Object.keys(variants) as (keyof typeof variants)[];
      for (const name of round % 2 === 0 ? names : [...names].reverse()) {
        const c = coild(variants[name]);
        c.ipam.start();
        const t1 = performance.now();
        const report = await recoverAllocations({ podNetwork: c.podNetwork, ipam: c.ipam, releaser: c.releaser, logger: c.logger });
        await c.exporter.start();
        const t2 = performance.now();
        const pass = await c.gc.run();
        const t3 = performance.now();
        if (report.registered.length !== o.pods || pass.freed.length + pass.adopted.length + pass.removed.length > 0) {
          throw new Error(`${name}: recovered ${report.registered.length} of ${o.pods} pods; GC freed ${pass.freed.length}, adopted ${pass.adopted.length}, removed ${pass.removed.length}`);
        }
        await c.exporter.stop();
        c.releaser.stop();
        c.ipam.stop();
        if (round === 0) continue;
        (times[name] ??= { recovery: [], gc: [] }).recovery.push(t2 - t1);
        times[name].gc.push(t3 - t2);
      }
    }
    const before = times['ip -json (before)']!;
    const now = times['rtnetlink (now)']!;
    console.log(`${o.pods} pods, ${o.rounds} rounds per variant, on ${isBun ? 'Bun (rtnetlink in-process)' : 'Node (netlink agent, spawn helper)'}, load ${loadavg().map((l) => l.toFixed(2)).join(' ')}\n`);
    console.log('| reads | recovery p50 ms | recovery p95 ms | GC pass p50 ms | GC pass p95 ms |\n|---|---|---|---|---|');
    for (const [name, t] of Object.entries(times)) {
      console.log(`| ${name} | ${pct(t.recovery, 0.5).toFixed(1)} | ${pct(t.recovery, 0.95).toFixed(1)} | ${pct(t.gc, 0.5).toFixed(1)} | ${pct(t.gc, 0.95).toFixed(1)} |`);
    }
    console.log(`| now / before (p50) | ${(pct(now.recovery, 0.5) / pct(before.recovery, 0.5)).toFixed(2)} | | ${(pct(now.gc, 0.5) / pct(before.gc, 0.5)).toFixed(2)} | |`);
  } finally {
    agent.stop();
    helper?.stop();
    await netns.cleanup();
  }
}

await runBench(FLAGS, main);
