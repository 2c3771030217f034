/**
 * Benchmark (not a test) of the IPAM checks (src/ipam/ipam-check.ts) at cluster scale: what one
 * `kubectl coil ipam check` computes after its reads, and what coil-controller spends on one
 * scrape of `coil_controller_ipam_findings` (src/reconcilers/ipam-findings.ts), which runs on the
 * controller's event loop. Synthetic facts: BLOCKS /27 blocks of one pool over NODES nodes, PODS
 * pods with an address each; nothing is found (the healthy case is the common one).
 *
 * Usage: node dist/hack/bench/ipam-check.js [--blocks 100000] [--pods 150000] [--nodes 5000] [--runs 7]
 * Prints the median and max of `runs` checks (after one warm-up), with and without Pods.
 */
import { readFileSync } from 'node:fs';
import { checkIpam, type BlockFacts, type IpamFacts, type ObjectRef, type PodFacts } from '../../src/ipam/ipam-check.js';
import { defineFlags } from '../../src/runtime/flag-table.js';
import { runBench } from './bench-flags.js';

const FLAGS = defineFlags('ipam-check bench', {
  blocks: { kind: 'int', default: 100_000, min: 1, max: 500_000, help: 'AddressBlocks (/27, one pool 10.0.0.0/8)' },
  pods: { kind: 'int', default: 150_000, max: 1_000_000, help: 'Pods, one IPv4 address each, spread over the blocks' },
  nodes: { kind: 'int', default: 5_000, min: 1, help: 'Nodes' },
  runs: { kind: 'int', default: 7, min: 1, help: 'measured checks per case' },
});

const ref = (kind: ObjectRef['kind'], name: string, namespace?: string): ObjectRef => ({ kind, name, ...(namespace && { namespace }), uid: `uid-${name}`, resourceVersion: '1' });
const v4 = (n: number): string => `${(n >>> 24) & 255}.${(n >>> 16) & 255}.${(n >>> 8) & 255}.${n & 255}`;

function facts(o: { blocks: number; pods: number; nodes: number }, withPods: boolean): IpamFacts {
  const base = 10 << 24;
  const blocks: BlockFacts[] = Array.from({ length: o.blocks }, (_, i) => ({ ref: ref('AddressBlock', `default-${i}`), pool: 'default', node: `n${i % o.nodes}`, index: i, ipv4: `${v4(base + i * 32)}/27` }));
  const pods: PodFacts[] = Array.from({ length: o.pods }, (_, i) => {
    const b = i % o.blocks;
    return { ref: ref('Pod', `p${i}`, 'bench'), node: `n${b % o.nodes}`, ips: [v4(base + b * 32 + 1 + (Math.floor(i / o.blocks) % 31))] };
  });
  return {
    nowMs: Date.now(), pools: [{ ref: ref('AddressPool', 'default'), blockSizeBits: 5, subnets: [{ ipv4: '10.0.0.0/8' }] }], blocks,
    nodes: Array.from({ length: o.nodes }, (_, i) => ref('Node', `n${i}`)), requests: [], ...(withPods && { pods }),
  };
}

function measure(f: IpamFacts, runs: number): { medianMs: number; maxMs: number; findings: number } {
  let findings = checkIpam(f).length; // warm-up
  const ms: number[] = [];
  for (let r = 0; r < runs; r++) {
    const t = performance.now();
    findings = checkIpam(f).length;
    ms.push(performance.now() - t);
  }
  ms.sort((a, b) => a - b);
  return { medianMs: ms[Math.floor(ms.length / 2)]!, maxMs: ms.at(-1)!, findings };
}

await runBench(FLAGS, async (o) => {
  for (const withPods of [false, true]) {
    const r = measure(facts(o, withPods), o.runs);
    console.log(`${o.blocks} blocks, ${withPods ? `${o.pods} pods` : 'no pods'}: median ${r.medianMs.toFixed(0)} ms, max ${r.maxMs.toFixed(0)} ms (${r.findings} findings)`);
  }
  console.log(`load average: ${readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ')}`);
});
