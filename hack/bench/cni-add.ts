/**
 * Benchmark (not a test): CNI ADD and DEL latency of `coil` (the Bun executable + coild) against
 * Debian's Go `ptp` + `host-local`, in one run on this machine, timed the same way.
 *
 * The reference side is Debian's Go `ptp` + `host-local` ({@link reference}: sequential, in a node
 * netns of its own; docs/performance.md#the-reference-plugin). Both sides are timed by the same bash
 * `$EPOCHREALTIME` wrapper around each exec ({@link LOOP}), env + netconf on stdin as containerd
 * passes them; coil against coild on a netns node with the real control plane and IPAM controller
 * (test/netns/node-lab.ts). Pods are served from a warm block: one ADD before the timed loop
 * fetches a /24 block, so the loop measures the common case, not the BlockRequest round trip. Every
 * round gives each pod a new sandbox (netns and container ID), on both sides.
 * Rounds alternate ptp and coil so drift hits both.
 *
 * Usage (root): node dist/hack/bench/cni-add.js [-n PODS=100] [-r ROUNDS=2] [-w WARMUP_ROUNDS=1] [-c 'EXTRA COILD FLAGS'] [-x OTHER_COIL ...]
 * Output: a markdown table of p50/p95 per round and the coil/ptp ratios of the medians.
 * Warm-up rounds run both sides the same way first and are printed but left out of the medians:
 * coild is a long-lived daemon, and its first few hundred calls run while V8 is still optimizing
 * its hot paths (coild's ADD handling p50 ≈ 0.5–0.7 ms higher over the first 200 ADDs).
 * `-x` also times another `coil` executable (e.g. a copy built from an earlier commit) in every
 * round, against the same coild, for an A/B between builds.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { TestNetnsSet } from '../../test/netns/test-netns.js';
import { NodeLab, labSkipReason, COIL_BIN, type LabNode, type LabPod } from '../../test/netns/node-lab.js';
import { defineFlags, type FlagValues } from '../../src/runtime/flag-table.js';
import { runBench } from './bench-flags.js';

const run = promisify(execFile);
/** Debian's containernetworking-plugins (package containernetworking-plugins). */
const REF_PLUGINS = '/usr/lib/cni';

/** p50/p95 of ADD and DEL, ms; for coil also STATUS (the executable + gRPC round trip, no kernel work). */
interface Figures { addP50: number; addP95: number; delP50: number; delP95: number; statusP50?: number }

/** Nearest-rank percentile. */
function pct(sorted: readonly number[], q: number): number {
  return sorted[Math.max(1, Math.ceil(q * sorted.length)) - 1]!;
}

/**
 * The timing loop: one exec per pod, as a runtime invokes a plugin, microseconds per call into
 * `out`. Arguments: CNI command, netconf file, pod list (`<cid> <netns> <namespace> <name>` lines),
 * output file, plugin executable, CNI_PATH.
 */
const LOOP = `
set -u
cmd=$1 conf=$2 list=$3 out=$4 bin=$5 cnipath=$6
: > "$out"
while read -r cid netns ns name; do
  t0=$EPOCHREALTIME
  OUT=$(CNI_COMMAND=$cmd CNI_CONTAINERID=$cid CNI_NETNS=$netns CNI_IFNAME=eth0 CNI_PATH=$cnipath \\
        CNI_ARGS="IgnoreUnknown=1;K8S_POD_NAMESPACE=$ns;K8S_POD_NAME=$name;K8S_POD_INFRA_CONTAINER_ID=$cid;K8S_POD_UID=$cid" \\
        "$bin" < "$conf")
  rc=$?
  t1=$EPOCHREALTIME
  [ $rc -eq 0 ] || { echo "$cmd $name failed: $OUT" >&2; exit 1; }
  echo $(( 10#\${t1/./} - 10#\${t0/./} )) >> "$out"
done < "$list"
`;

/** Runs {@link LOOP} for `cmd` (in `netns` when given) and returns the sorted times in ms. */
async function timeCalls(o: { cmd: string; conf: string; list: string; out: string; bin: string; cniPath: string; netns?: string }): Promise<number[]> {
  const loop = ['bash', '-c', LOOP, 'loop', o.cmd, o.conf, o.list, o.out, o.bin, o.cniPath];
  const [file, ...args] = o.netns ? ['nsenter', `--net=${o.netns}`, '--', ...loop] : loop;
  await run(file!, args);
  const { stdout } = await run('cat', [o.out]);
  return stdout.trim().split('\n').map((l) => Number(l) / 1000).sort((a, b) => a - b);
}

/**
 * One round of the reference: `ptp` + `host-local` ADD then DEL of `n` pods, sequential, each a
 * new netns and container ID. ptp wires the host side in the netns it runs in, so the calls run
 * in a "node" netns of the round's own (the host is untouched); host-local keeps its leases in a
 * temporary directory. DEL gets the same netconf as ADD (libcni would add the cached ADD result
 * as prevResult, which ptp does not read).
 */
async function reference(n: number): Promise<Figures> {
  const sandboxes = new TestNetnsSet();
  const dir = await mkdtemp(join(tmpdir(), 'coil-bench-ptp-'));
  try {
    const node = await sandboxes.create('ptpnode');
    const pods: string[] = [];
    for (let i = 0; i < n; i++) pods.push(`${randomBytes(32).toString('hex')} ${(await sandboxes.create('ptppod')).path} bench pod-${i}\n`);
    const list = join(dir, 'pods.txt');
    const conf = join(dir, 'ptp.json');
    await writeFile(list, pods.join(''));
    await writeFile(conf, JSON.stringify({
      cniVersion: '1.0.0', name: 'bench', type: 'ptp', ipMasq: false, mtu: 1500,
      ipam: { type: 'host-local', dataDir: join(dir, 'ipam'), ranges: [[{ subnet: '10.210.0.0/16', gateway: '10.210.0.1' }]], routes: [{ dst: '0.0.0.0/0' }] },
    }));
    const times = (cmd: string): Promise<number[]> =>
      timeCalls({ cmd, conf, list, out: join(dir, `${cmd}.us`), bin: join(REF_PLUGINS, 'ptp'), cniPath: REF_PLUGINS, netns: node.path });
    const add = await times('ADD');
    const del = await times('DEL');
    return { addP50: pct(add, 0.5), addP95: pct(add, 0.95), delP50: pct(del, 0.5), delP95: pct(del, 0.95) };
  } finally {
    await sandboxes.cleanup();
    await rm(dir, { recursive: true, force: true });
  }
}

/**
 * One round of ADD, DEL and STATUS for every pod. Each round gives every pod a new sandbox — a
 * fresh netns and container ID — as the reference round does (and as a runtime does per pod),
 * so no round finds a netns that earlier rounds already used.
 */
async function coilRound(lab: NodeLab, node: LabNode, podObjects: readonly LabPod[], bin: string): Promise<Figures> {
  const sandboxes = new TestNetnsSet();
  try {
    const pods = await Promise.all(podObjects.map(async (p) => ({ ...p, ns: await sandboxes.create('bench'), containerId: randomBytes(32).toString('hex') })));
    return await timedRound(lab, node, pods, bin);
  } finally {
    await sandboxes.cleanup();
  }
}

async function timedRound(lab: NodeLab, node: LabNode, pods: readonly LabPod[], bin: string): Promise<Figures> {
  const conf = join(lab.dir, 'coil.json');
  const list = join(lab.dir, 'pods.txt');
  await writeFile(conf, JSON.stringify({ cniVersion: '1.0.0', name: 'k8s-pod-network', type: 'coil', socket: node.socketPath }));
  await writeFile(list, pods.map((p) => `${p.containerId} ${p.ns.path} ${p.namespace} ${p.name}\n`).join(''));
  const status = join(lab.dir, 'coil-1.1.json');
  await writeFile(status, JSON.stringify({ cniVersion: '1.1.0', name: 'k8s-pod-network', type: 'coil', socket: node.socketPath }));
  const times = (cmd: string, c = conf): Promise<number[]> => timeCalls({ cmd, conf: c, list, out: join(lab.dir, `${cmd}.us`), bin, cniPath: '/opt/cni/bin' });
  const add = await times('ADD');
  const del = await times('DEL');
  const st = await times('STATUS', status);
  return { addP50: pct(add, 0.5), addP95: pct(add, 0.95), delP50: pct(del, 0.5), delP95: pct(del, 0.95), statusP50: pct(st, 0.5) };
}

function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
}

const FLAGS = defineFlags('cni-add', {
  n: { kind: 'int', default: 100, min: 1, help: 'pods per round' },
  r: { kind: 'int', default: 2, min: 1, help: 'timed rounds' },
  w: { kind: 'int', default: 1, help: 'warm-up rounds (printed, left out of the medians)' },
  c: { kind: 'string', default: '', help: 'extra coild flags, space-separated' },
  x: { kind: 'strings', help: 'another coil executable to time in every round (repeatable)' },
});

async function main(values: FlagValues<typeof FLAGS.specs>): Promise<void> {
  const others = values.x;
  const extra = values.c.split(' ').filter(Boolean);
  const n = Number(values.n);
  const rounds = Number(values.r);
  const skip = labSkipReason();
  if (skip) throw new Error(skip);
  const lab = await NodeLab.start();
  try {
    await lab.createPool('default', { subnets: [{ ipv4: '10.100.0.0/16' }], blockSizeBits: 8 });
    await lab.createNamespace('bench');
    const node = await lab.addNode('bench-node', '10.250.0.9');
    // Cooling off so every round is served from the same warm block; the release grace keeps it.
    await lab.startCoild(node, ['--cooling-period=0', '--block-release-grace=1h', '--low-water-mark=0', ...extra]);
    const warm = await lab.createPod(node, 'bench', 'warm');
    const first = await lab.runCoil(node, 'ADD', warm);
    if (first.code !== 0) throw new Error(`warm-up ADD failed: ${first.stdout}\n${await lab.logs()}`);
    const pods: LabPod[] = [];
    for (let i = 0; i < n; i++) pods.push(await lab.createPod(node, 'bench', `pod-${i}`));
    const warmups: [Figures, Figures][] = [];
    for (let r = 0; r < Number(values.w); r++) warmups.push([await reference(n), await coilRound(lab, node, pods, COIL_BIN)]);
    const ptp: Figures[] = [];
    const coil: Figures[] = [];
    const other: Figures[][] = others.map(() => []);
    for (let r = 0; r < rounds; r++) {
      ptp.push(await reference(n));
      coil.push(await coilRound(lab, node, pods, COIL_BIN));
      for (const [i, bin] of others.entries()) other[i]!.push(await coilRound(lab, node, pods, bin));
    }
    const f = (x: number): string => x.toFixed(2);
    const KEYS = ['addP50', 'addP95', 'delP50', 'delP95'] as const;
    const row = (round: string, name: string, cells: readonly string[]): string => `| ${round} | ${name} | ${cells.join(' | ')} |`;
    const lines = ['| round | plugin | ADD p50 ms | ADD p95 ms | DEL p50 ms | DEL p95 ms |', '|---|---|---|---|---|---|'];
    for (const [r, [p, c]] of warmups.entries()) {
      for (const [name, x] of [['ptp+host-local', p], ['coil', c]] as const) lines.push(row(`warm-up ${r + 1}`, name, KEYS.map((k) => f(x[k]))));
    }
    for (let r = 0; r < rounds; r++) {
      const rows: [string, Figures][] = [['ptp+host-local', ptp[r]!], ['coil', coil[r]!], ...others.map((bin, i): [string, Figures] => [`coil ${bin}`, other[i]![r]!])];
      for (const [name, x] of rows) lines.push(row(String(r + 1), name, KEYS.map((k) => f(x[k]))));
    }
    /** Ratios of the medians over the rounds, `xs` against ptp. */
    const ratios = (xs: Figures[]): string[] => KEYS.map((k) => (median(xs.map((x) => x[k])) / median(ptp.map((x) => x[k]))).toFixed(2));
    lines.push(row('median', 'coil / ptp+host-local', ratios(coil)));
    for (const [i, bin] of others.entries()) lines.push(row('median', `coil ${bin} / ptp+host-local`, ratios(other[i]!)));
    // Where coil's time goes: coild's own handling time (its gRPC call log) vs the whole exec.
    const calls = (await run('cat', [node.logFile], { maxBuffer: 64 << 20 })).stdout.split('\n')
      .filter((l) => l.includes('"finished unary call')).map((l) => JSON.parse(l) as Record<string, unknown>);
    /** coild's handling times of `method` (ms), in log order. */
    const timesOf = (method: string): number[] => calls.filter((e) => e['grpc.method'] === method).map((e) => Number(e['grpc.time_ms']));
    const sorted = (xs: number[]): number[] => [...xs].sort((x, y) => x - y);
    const [a, d] = [sorted(timesOf('Add')), sorted(timesOf('Del'))];
    lines.push('', `coil STATUS p50 per round (executable start + gRPC round trip, no kernel work): ${coil.map((c) => f(c.statusP50!)).join(', ')} ms`);
    lines.push(`coild handling time (gRPC log, all rounds): ADD p50 ${f(pct(a, 0.5))} / p95 ${f(pct(a, 0.95))} ms, DEL p50 ${f(pct(d, 0.5))} / p95 ${f(pct(d, 0.95))} ms`);
    // In log order, after the warm-up ADD: n ADDs per coil executable per round.
    const addsInOrder = timesOf('Add').slice(1);
    const perRound: string[] = [];
    for (let i = 0; i + n <= addsInOrder.length; i += n) perRound.push(f(pct(sorted(addsInOrder.slice(i, i + n)), 0.5)));
    lines.push(`coild ADD handling p50 per ${n} ADDs, in order: ${perRound.join(', ')} ms`);
    process.stdout.write(`### coil${extra.length ? ` (coild ${extra.join(' ')})` : ''} vs ptp+host-local, N=${n} sequential, CNI 1.0.0, ${new Date().toISOString()}, loadavg ${(await run('cat', ['/proc/loadavg'])).stdout.trim()}\n${lines.join('\n')}\n`);
  } finally {
    await lab.stop();
  }
}

await runBench(FLAGS, main);
