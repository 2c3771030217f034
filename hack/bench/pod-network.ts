// Times RtnetlinkPodNetwork.setup/destroy in real namespaces (root): a "host" netns plus one pod
// netns per run. Not a test; run `node dist/hack/bench/pod-network.js [--runs 20]`.
// Variant "nsenter" reaches the same pod netns through a path outside /run/netns's pattern
// (`/run/netns//name`), as for a runtime handing out `/proc/<pid>/ns/net`.
import { IpRunner } from '../../src/netlink/iproute2/ip-runner.js';
import { TestNetnsSet, netnsSkipReason } from '../../test/netns/test-netns.js';
import { RtnetlinkPodNetwork } from '../../src/node-agent/podnet/pod-network-rtnetlink.js';
import { defineFlags, type FlagValues } from '../../src/runtime/flag-table.js';
import { runBench } from './bench-flags.js';

const FLAGS = defineFlags('pod-network', {
  runs: { kind: 'int', default: 20, min: 1, help: 'timed setups and destroys per variant' },
});

function stats(label: string, ms: number[]): string {
  const s = [...ms].sort((a, b) => a - b);
  const q = (p: number): number => s[Math.min(s.length - 1, Math.ceil(p * s.length) - 1)] ?? NaN;
  return `| ${label} | ${s.length} | ${q(0.5).toFixed(1)} | ${q(0.95).toFixed(1)} | ${(s.at(-1) ?? NaN).toFixed(1)} |`;
}

async function main({ runs }: FlagValues<typeof FLAGS.specs>): Promise<void> {
  const skip = netnsSkipReason();
  if (skip) { console.log(`skipped: ${skip}`); return; }
  const ip = new IpRunner();
  const netns = new TestNetnsSet({ ip });
  try {
    const host = await netns.create('benchhost');
    const pn = new RtnetlinkPodNetwork({ ip, hostNetns: host.path });
    await pn.init();
    const pods = await Promise.all(Array.from({ length: runs + 2 }, () => netns.create('benchpod')));
    console.log(`| ${runs} runs, dual stack | n | p50 ms | p95 ms | max ms |\n|---|---|---|---|---|`);
    for (const variant of ['ip -n', 'nsenter'] as const) {
      // All setups first, then all destroys: ADD latency without a concurrent reaper holding RTNL.
      const setup: number[] = [];
      const destroy: number[] = [];
      for (const [i, pod] of pods.entries()) {
        const path = variant === 'ip -n' ? pod.path : pod.path.replace('/run/netns/', '/run/netns//');
        const t = performance.now();
        await pn.setup(path, { containerId: `bench${i}`, ifname: 'eth0', pool: 'default', ipv4: `10.70.0.${i + 2}`, ipv6: `fd00:70::${i + 2}`, hostIPv4: '192.168.70.1' });
        if (i >= 2) setup.push(performance.now() - t); // the first two warm up caches
      }
      for (const i of pods.keys()) {
        const t = performance.now();
        await pn.destroy(`bench${i}`, 'eth0');
        if (i >= 2) destroy.push(performance.now() - t);
      }
      const t = performance.now();
      await pn.reap();
      console.log(stats(`setup (pod side via ${variant})`, setup));
      console.log(stats('destroy (caller-visible; veth deleted by the reaper)', destroy));
      console.log(`| reaper: last group delete | 1 | ${(performance.now() - t).toFixed(1)} | | |`);
    }
    // Burst: every pod at once (kubelet starting many pods), latency per call and pods/s.
    const lat: number[] = [];
    const t0 = performance.now();
    await Promise.all(pods.map(async (pod, i) => {
      const t = performance.now();
      await pn.setup(pod.path, { containerId: `burst${i}`, ifname: 'eth0', pool: 'default', ipv4: `10.70.1.${i + 2}`, ipv6: `fd00:70:1::${i + 2}`, hostIPv4: '192.168.70.1' });
      lat.push(performance.now() - t);
    }));
    const wall = performance.now() - t0;
    console.log(stats(`setup, ${pods.length} concurrent (${(pods.length / (wall / 1000)).toFixed(0)} pods/s)`, lat));
    const t1 = performance.now();
    await Promise.all(pods.map((_, i) => pn.destroy(`burst${i}`, 'eth0')));
    await pn.reap();
    console.log(`| destroy + reap, ${pods.length} concurrent: wall | 1 | ${(performance.now() - t1).toFixed(1)} | | |`);
  } finally {
    await netns.cleanup();
  }
}

await runBench(FLAGS, main);
