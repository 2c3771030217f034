/**
 * Benchmark (not a test): what a node pays for coil, measured as the kubelet measures it — each
 * long-lived program's working set (its container's memory cgroup: usage minus inactive file
 * pages, cAdvisor's rule: hack/lab/container-memory.ts) and RSS, in its real pod on the
 * real-node lab (hack/lab/cluster.ts: kubelet + containerd nodes, coil installed with helm from
 * the image built here), beside each goal of docs/performance.md#footprint:
 *
 * 1. idle: the lab up (3 nodes), every node Ready, nothing but coil's pods, `--settle` seconds
 *    later — coild on every node, both coil-controller replicas;
 * 2. churns: `--churns` times `--adds` ADDs and as many DELs on the first node through the node's
 *    `/opt/cni/bin/coil` as containerd runs it (hack/lab/cni-driver.ts: one call at a time, at
 *    most `--live` pods attached), each against a Pod object bound to the node that kubelet
 *    refuses to run (a node selector no node has: kubelet's admission fails it, so no sandbox
 *    competes with the driver's), made before its ADD and deleted after its DEL; coild measured
 *    after each churn (the 2nd and 3rd show growth, a leak);
 * 3. `--pods` pods of a Deployment started by kubelet on the first node — coild and the controllers;
 * 4. an Egress with one NAT pod and `--clients` client Pods naming it (bound to no lab node, with
 *    pod IPs) — coil-egress. This kernel has no FoU: coil-egress then stays unready and starts no
 *    client watch, and its row says so (the FoU VM measures that case: hack/bench/footprint.ts);
 * 5. `coil` and Debian's `ptp` answering VERSION, timed by hyperfine in one run.
 *
 * Usage (root; the lab's lock, its own prefix and dir):
 *   flock /tmp/coil-lab.lock env COIL_LAB_PREFIX=fp- COIL_LAB_DIR=/tmp/fp-lab node dist/hack/bench/lab-footprint.js
 *     [--nodes=3] [--adds=1000] [--churns=3] [--live=110] [--pods=110] [--clients=100] [--settle=20] [--version-runs=200]
 * Output: each figure as it is read (stderr), then one markdown table with the goals (stdout).
 */
import { randomBytes } from 'node:crypto';
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import * as k8s from '@kubernetes/client-node';
import { Cluster } from '../lab/cluster.js';
import { CniDriver } from '../lab/cni-driver.js';
import { containerMemory, programPids, PROGRAMS, type ContainerMemory, type Program } from '../lab/container-memory.js';
import { REPO_ROOT } from '../../test/envtest/control-plane.js';
import { defineFlags, type FlagValues } from '../../src/runtime/flag-table.js';
import { runBench } from './bench-flags.js';
import { IDLE_SETTLE_S } from './footprint-doc.js';

const run = promisify(execFile);
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const MB = 1024 * 1024;

/** The goals of issue 36, working set MiB (docs/performance.md#footprint). */
export const GOALS = { coildIdle: 50, coildChurn: 60, egress: 45, controller: 80, versionRatio: 1.3 } as const;

/** One figure: a program's container on a node in a state. */
interface Row { program: Program; state: string; node: string; mem: ContainerMemory; goalMb?: number }

const f1 = (bytes: number): string => (bytes / MB).toFixed(1);

function rowLine(r: Row): string {
  const goal = r.goalMb === undefined ? '' : `≤ ${r.goalMb} MB ${r.mem.workingSet / MB <= r.goalMb ? 'met' : '**not met**'}`;
  return `| ${r.program} | ${r.state} | ${r.node} | ${f1(r.mem.workingSet)} | ${f1(r.mem.rss)} | ${f1(r.mem.hwm)} | ${f1(r.mem.anon)} | ${f1(r.mem.activeFile)} / ${f1(r.mem.inactiveFile)} | ${f1(r.mem.podWorkingSet)} | ${goal} |`;
}
const HEADER = '| program | state | node | working set MB | RSS MB | VmHWM MB | cgroup anon MB | cgroup file active / inactive MB | pod working set MB | goal (working set) |\n|---|---|---|---|---|---|---|---|---|---|';

/** Every container of `program` on the lab's nodes, measured now. */
async function measure(cluster: Cluster, program: Program, nodes?: readonly string[]): Promise<{ node: string; mem: ContainerMemory }[]> {
  const out: { node: string; mem: ContainerMemory }[] = [];
  for (const node of nodes ?? cluster.nodes.map((n) => n.name)) {
    // The program's first process in its container is the one the entrypoint exec'd.
    for (const pid of await programPids(node, PROGRAMS[program])) out.push({ node, mem: await containerMemory(pid) });
  }
  if (out.length === 0) throw new Error(`no ${program} process on ${(nodes ?? cluster.nodes.map((n) => n.name)).join(', ')}`);
  return out;
}

/** nearest-rank percentile of `xs` (ms). */
function pct(xs: readonly number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.max(0, Math.ceil((p / 100) * s.length) - 1)] ?? NaN;
}

/**
 * `adds` ADDs and as many DELs on `node` through `driver`, at most `live` pods attached: ADD until
 * `live` are up, then DEL the oldest and ADD a new one, then DEL the rest.
 * @throws Error naming the call when any call fails
 */
async function churn(core: k8s.CoreV1Api, driver: CniDriver, o: { node: string; namespace: string; adds: number; live: number; round: number }): Promise<{ addMs: number[]; delMs: number[]; wallMs: number }> {
  const up: { name: string; id: string }[] = [];
  const addMs: number[] = [];
  const delMs: number[] = [];
  const t0 = performance.now();
  const del = async (): Promise<void> => {
    const pod = up.shift()!;
    const r = await driver.call('DEL', o.namespace, pod.name, pod.id);
    if (r.code !== 0) throw new Error(`DEL ${pod.name} failed (${r.code}): ${r.output}`);
    delMs.push(r.ms);
    await core.deleteNamespacedPod({ namespace: o.namespace, name: pod.name, gracePeriodSeconds: 0 });
  };
  for (let i = 0; i < o.adds; i++) {
    if (up.length >= o.live) await del();
    const name = `churn-${o.round}-${i}`;
    await core.createNamespacedPod({
      namespace: o.namespace,
      body: {
        metadata: { name, namespace: o.namespace },
        // Bound to the node, refused by its kubelet (no node has the label), so no sandbox is made.
        spec: { nodeName: o.node, nodeSelector: { 'footprint.coil.local/never': 'true' }, containers: [{ name: 'c', image: 'coil.local/pause:1' }] },
      },
    });
    const id = randomBytes(32).toString('hex');
    const r = await driver.call('ADD', o.namespace, name, id);
    if (r.code !== 0) throw new Error(`ADD ${name} failed (${r.code}): ${r.output}`);
    addMs.push(r.ms);
    up.push({ name, id });
  }
  while (up.length > 0) await del();
  return { addMs, delMs, wallMs: performance.now() - t0 };
}

/** Egress `nat` in `namespace` with `clients` client Pods naming it (on no lab node, with pod IPs). */
async function egressWithClients(cluster: Cluster, namespace: string, clients: number): Promise<void> {
  await cluster.kubectl(['apply', '-f', '-'], [
    JSON.stringify({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: namespace } }),
    JSON.stringify({ apiVersion: 'coil.cybozu.com/v2', kind: 'Egress', metadata: { name: 'nat', namespace }, spec: { replicas: 1, destinations: ['0.0.0.0/0'] } }),
    JSON.stringify({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: `${namespace}-app` } }),
  ].join('\n'));
  const core = cluster.api(k8s.CoreV1Api);
  for (let i = 0; i < clients; i++) {
    const pod = await core.createNamespacedPod({
      namespace: `${namespace}-app`,
      body: {
        metadata: { name: `client-${i}`, annotations: { [`egress.coil.cybozu.com/${namespace}`]: 'nat' } },
        spec: { nodeName: 'elsewhere', containers: [{ name: 'c', image: 'coil.local/pause:1' }] },
      },
    });
    const ip = `10.64.${i >> 8}.${i & 255}`;
    await core.replaceNamespacedPodStatus({ namespace: `${namespace}-app`, name: `client-${i}`, body: { ...pod, status: { phase: 'Running', podIP: ip, podIPs: [{ ip }] } } });
  }
}

/**
 * hyperfine's mean and median of `coil` and ptp answering VERSION, one run, ms. Without a shell
 * (`-N`): hyperfine's correction for a shell's start (its default) is as large as a static Go
 * binary's whole run and left ptp at a median of 0.26 ms in one run. Each command runs under
 * `env` (for CNI_COMMAND), which both pay alike; stdin is empty, which both accept for VERSION.
 */
async function versionTimes(runs: number): Promise<{ coil: { mean: number; median: number }; ptp: { mean: number; median: number }; ratio: number }> {
  const { rm } = await import('node:fs/promises');
  const out = join(REPO_ROOT, 'dist/bench-version-hyperfine.json');
  try {
    await run('hyperfine', ['-N', '--warmup', '10', '--runs', String(runs), '--export-json', out,
      '-n', 'coil', `env CNI_COMMAND=VERSION ${join(REPO_ROOT, 'dist/bin/coil')}`,
      '-n', 'ptp', 'env CNI_COMMAND=VERSION /usr/lib/cni/ptp'], { maxBuffer: 16 << 20 });
    const res = JSON.parse(await readFile(out, 'utf8')) as { results: { command: string; mean: number; median: number }[] };
    const get = (n: string) => { const r = res.results.find((x) => x.command === n)!; return { mean: r.mean * 1000, median: r.median * 1000 }; };
    const coil = get('coil');
    const ptp = get('ptp');
    return { coil, ptp, ratio: coil.median / ptp.median };
  } finally {
    await rm(out, { force: true });
  }
}

const FLAGS = defineFlags('lab-footprint', {
  nodes: { kind: 'int', default: 3, min: 1, help: 'lab nodes' },
  adds: { kind: 'int', default: 1000, min: 0, help: 'ADDs (and DELs) of each churn' },
  churns: { kind: 'int', default: 3, min: 0, help: 'churns on the first node' },
  live: { kind: 'int', default: 110, min: 1, help: 'pods attached at most during a churn' },
  pods: { kind: 'int', default: 110, min: 0, help: 'pods kubelet starts on the first node' },
  clients: { kind: 'int', default: 100, min: 0, help: "client Pods of the Egress (0: no Egress)" },
  settle: { kind: 'int', default: IDLE_SETTLE_S, min: 0, help: 'seconds of quiet before each reading' },
  'version-runs': { kind: 'int', default: 200, min: 0, help: 'hyperfine runs of each VERSION (0: none)' },
});

async function main(v: FlagValues<typeof FLAGS.specs>): Promise<void> {
  if (process.getuid?.() !== 0) throw new Error('the lab needs root');
  const t0 = performance.now();
  const log = (m: string): void => void process.stderr.write(`lab-footprint: ${m} (${((performance.now() - t0) / 1000).toFixed(1)} s)\n`);
  const rows: Row[] = [];
  const notes: string[] = [];
  const note = (program: Program, state: string, got: { node: string; mem: ContainerMemory }[], goalMb?: number): void => {
    for (const g of got) {
      const r: Row = { program, state, ...g, ...(goalMb !== undefined && { goalMb }) };
      rows.push(r);
      process.stderr.write(`${rowLine(r)}\n`);
    }
  };
  // The commit measured: read before the lab builds its image from this tree (a later commit does
  // not change what runs), with `+` when the tree has changes the image also carries.
  const head = (await run('git', ['-C', REPO_ROOT, 'rev-parse', '--short', 'HEAD']).then((r) => r.stdout.trim(), () => '?'))
    + (await run('git', ['-C', REPO_ROOT, 'status', '--porcelain', '--untracked-files=no']).then((r) => (r.stdout.trim() ? '+' : ''), () => ''));
  const cluster = await Cluster.up({ nodes: Number(v.nodes), log });
  const settle = (): Promise<void> => sleep(Number(v.settle) * 1000);
  try {
    const first = cluster.nodes[0]!.name;
    await settle();
    note('coild', 'idle', await measure(cluster, 'coild'), GOALS.coildIdle);
    note('coil-controller', `idle, ${cluster.nodes.length} nodes`, await measure(cluster, 'coil-controller'), GOALS.controller);

    if (Number(v.churns) > 0 && Number(v.adds) > 0) {
      const core = cluster.api(k8s.CoreV1Api);
      await cluster.kubectl(['create', 'namespace', 'fp-churn']);
      const driver = await CniDriver.start(cluster.nodes[0]!);
      try {
        for (let c = 1; c <= Number(v.churns); c++) {
          const r = await churn(core, driver, { node: first, namespace: 'fp-churn', adds: Number(v.adds), live: Number(v.live), round: c });
          const line = `churn ${c}: ${r.addMs.length} ADD + ${r.delMs.length} DEL in ${(r.wallMs / 1000).toFixed(1)} s; coil ADD p50 / p95 ${pct(r.addMs, 50).toFixed(2)} / ${pct(r.addMs, 95).toFixed(2)} ms, DEL p50 ${pct(r.delMs, 50).toFixed(2)} ms`;
          notes.push(line);
          log(line);
          await settle();
          note('coild', `after churn ${c} (${c * Number(v.adds)} ADD + DEL in all)`, await measure(cluster, 'coild', [first]), GOALS.coildChurn);
        }
      } finally {
        await driver.stop();
      }
    }

    if (Number(v.pods) > 0) {
      log(`starting ${v.pods} pods on ${first}`);
      await cluster.applyWorkload('fp-pods', 'web', Number(v.pods), { nodeName: first });
      await cluster.waitForPods('fp-pods', 'app=web', Number(v.pods), 900_000);
      await settle();
      note('coild', `${v.pods} pods on the node`, await measure(cluster, 'coild', [first]), GOALS.coildChurn);
      note('coil-controller', `${v.pods} pods on a node`, await measure(cluster, 'coil-controller'), GOALS.controller);
    }

    if (Number(v.clients) > 0) {
      log(`an Egress with ${v.clients} client Pods`);
      await egressWithClients(cluster, 'fp-egress', Number(v.clients));
      let found: { node: string; mem: ContainerMemory }[] = [];
      const until = Date.now() + 180_000;
      while (found.length === 0 && Date.now() < until) {
        found = await measure(cluster, 'coil-egress').catch(() => []);
        if (found.length === 0) await sleep(1000);
      }
      if (found.length === 0) throw new Error('coil-egress did not start within 180 s');
      await settle();
      const egressPod = JSON.parse(await cluster.kubectl(['get', 'pods', '-n', 'fp-egress', '-o', 'json'])) as { items: { metadata: { name: string } }[] };
      const logs = await cluster.kubectl(['logs', '-n', 'fp-egress', egressPod.items[0]!.metadata.name]).catch((e: Error) => e.message);
      const watch = /the kernel lacks/.test(logs) ? 'no FoU in this kernel: unready, no client watch'
        : /initial client sync done/.test(logs) ? 'client watch synced' : 'client watch not synced';
      note('coil-egress', `${v.clients} client Pods (${watch})`, await measure(cluster, 'coil-egress'), GOALS.egress);
    }

    if (Number(v['version-runs']) > 0) {
      const t = await versionTimes(Number(v['version-runs']));
      notes.push(`VERSION (hyperfine, ${v['version-runs']} runs each, one run): coil median ${t.coil.median.toFixed(2)} ms (mean ${t.coil.mean.toFixed(2)}), ptp median ${t.ptp.median.toFixed(2)} ms (mean ${t.ptp.mean.toFixed(2)}); ratio ${t.ratio.toFixed(2)} (goal ≤ ${GOALS.versionRatio}: ${t.ratio <= GOALS.versionRatio ? 'met' : 'not met'})`);
    }
    const load = (await readFile('/proc/loadavg', 'utf8')).trim();
    process.stdout.write(`### lab-footprint at ${head}, ${new Date().toISOString()}, ${cluster.nodes.length} nodes, loadavg at the end ${load}, ${((performance.now() - t0) / 1000).toFixed(0)} s\n\n`
      + `${HEADER}\n${rows.map(rowLine).join('\n')}\n\n${notes.map((n) => `- ${n}`).join('\n')}\n`);
  } finally {
    log('tearing the lab down');
    await cluster.stop();
  }
}

await runBench(FLAGS, main);
