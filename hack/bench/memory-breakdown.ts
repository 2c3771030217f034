/**
 * Benchmark (not a test): where coild's and coil-egress's idle memory goes, by cause, from the
 * runtime's own statistics (hack/bench/memory-probe.ts, preloaded into each: `bun:jsc` heapStats
 * and memoryUsage, and /proc/self/smaps summed by kind) — docs/performance.md#footprint.
 *
 * 1. The runtime's floor: an empty program (`setInterval` only) on the same runtime, the `coil`
 *    executable's Bun, with the same probe.
 * 2. coild on a netns node against the real control plane and IPAM controller
 *    (test/netns/node-lab.ts), as hack/bench/footprint.ts runs it: after one ADD and DEL through
 *    the real `coil` executable and `--settle` seconds, a report before and after a full GC.
 * 3. What a cached object adds: `--pods` Pods bound to the node (the fields a kubelet-run Pod has:
 *    labels, an owner, one container, status with conditions, IPs and a container status; made
 *    through the API, so with managedFields), then `--namespaces` Namespaces; after each, a report
 *    after a full GC; the heap's growth divided by the count is the bytes each object costs in
 *    coild's cache (with its index entries and the watch's buffers gone after the GC).
 * 4. coil-egress (bundle, Bun) started by hack/bench/footprint.ts's way, idle, with the probe.
 *
 * Usage (root, after `npm run build && bash hack/build-cni.sh`):
 *   node dist/hack/bench/memory-breakdown.js [--pods=110] [--namespaces=100] [--settle=10]
 * Output: the reports' figures as markdown tables (stdout); the raw reports' directory (stderr).
 */
import { readFile, readdir } from 'node:fs/promises';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { NodeLab, labSkipReason, COIL_BIN } from '../../test/netns/node-lab.js';
import { REPO_ROOT } from '../../test/envtest/control-plane.js';
import { Kinds } from '../../src/api/v2/kinds.js';
import { defineFlags, type FlagValues } from '../../src/runtime/flag-table.js';
import { runBench } from './bench-flags.js';

const PROBE = join(REPO_ROOT, 'dist/hack/bench/memory-probe.js');
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** One probe report (memory-probe.ts). */
interface Report {
  why: string; vmRssKb: number; rssAnonKb: number; rssFileKb: number;
  smaps: Record<string, { rss: number; anon: number; maps: number }>;
  heap: { heapSize: number; heapCapacity: number; extraMemorySize: number; objectCount: number };
  afterGc?: { heap: { heapSize: number; heapCapacity: number; extraMemorySize: number; objectCount: number }; objectTypes: Record<string, number>; bytesByClass?: Record<string, { bytes: number; count: number }> };
  objectTypes: Record<string, number>;
  jscMemory: { current: number; peak: number; currentCommit: number };
  process: { rss: number; heapTotal: number; heapUsed: number; external: number; arrayBuffers: number };
}

/** Sends SIGUSR2 to `pid` and waits for the probe's next report under `out`. */
async function probe(pid: number, out: string): Promise<Report> {
  const dir = join(out, '..');
  const base = out.slice(dir.length + 1);
  const count = async (): Promise<number> => (await readdir(dir)).filter((f) => f.startsWith(`${base}.`) && f.endsWith('.json')).length;
  const n = await count();
  process.kill(pid, 'SIGUSR2');
  for (let i = 0; i < 200 && (await count()) === n; i++) await sleep(50);
  await sleep(100);
  return JSON.parse(await readFile(`${out}.${n}.json`, 'utf8')) as Report;
}

const mb = (kb: number): string => (kb / 1024).toFixed(1);
const mbB = (b: number): string => (b / 1024 / 1024).toFixed(1);

function smapsTable(rows: [string, Report][]): string {
  const kinds = [...new Set(rows.flatMap(([, r]) => Object.keys(r.smaps)))].filter((k) => rows.some(([, r]) => (r.smaps[k]?.rss ?? 0) >= 64));
  const lines = [`| RSS by kind (MB) | ${rows.map(([l]) => l).join(' | ')} |`, `|---|${rows.map(() => '---').join('|')}|`];
  for (const k of kinds) lines.push(`| ${k} | ${rows.map(([, r]) => mb(r.smaps[k]?.rss ?? 0)).join(' | ')} |`);
  lines.push(`| **VmRSS** | ${rows.map(([, r]) => `**${mb(r.vmRssKb)}**`).join(' | ')} |`);
  lines.push(`| JS heap size / capacity, before GC | ${rows.map(([, r]) => `${mbB(r.heap.heapSize)} / ${mbB(r.heap.heapCapacity)}`).join(' | ')} |`);
  lines.push(`| JS heap size after a full GC | ${rows.map(([, r]) => (r.afterGc ? mbB(r.afterGc.heap.heapSize) : '')).join(' | ')} |`);
  lines.push(`| extra memory (outside the JS heap: buffers, external strings) | ${rows.map(([, r]) => mbB(r.heap.extraMemorySize)).join(' | ')} |`);
  lines.push(`| JS objects (after GC) | ${rows.map(([, r]) => r.afterGc?.heap.objectCount ?? r.heap.objectCount).join(' | ')} |`);
  lines.push(`| bmalloc/mimalloc current commit (jsc memoryUsage) | ${rows.map(([, r]) => mbB(r.jscMemory.currentCommit)).join(' | ')} |`);
  return lines.join('\n');
}

/** The JS heap's bytes by object class after GC (heap snapshot), the top `n`, with the floor's beside. */
function typesTable(label: string, r: Report, floor: Report, n = 24): string {
  const t = r.afterGc?.bytesByClass ?? {};
  const f = floor.afterGc?.bytesByClass ?? {};
  const rows = Object.entries(t).sort((a, b) => b[1].bytes - a[1].bytes).slice(0, n);
  const kb = (b: number): string => (b / 1024).toFixed(0);
  return [`| JS heap by class (${label}, after GC, heap snapshot) | objects | KiB | in the empty program: objects, KiB |`, '|---|---|---|---|',
    ...rows.map(([k, c]) => `| ${k} | ${c.count} | ${kb(c.bytes)} | ${f[k]?.count ?? 0}, ${kb(f[k]?.bytes ?? 0)} |`)].join('\n');
}

/** Objects and bytes of the classes that grew between two reports (heap snapshots), per `per` objects added. */
function growthTable(label: string, before: Report, after: Report, per: number, n = 10): string {
  const b = before.afterGc?.bytesByClass ?? {};
  const a = after.afterGc?.bytesByClass ?? {};
  const rows = Object.keys(a).map((k) => [k, (a[k]!.bytes - (b[k]?.bytes ?? 0)) / per, (a[k]!.count - (b[k]?.count ?? 0)) / per] as const)
    .sort((x, y) => y[1] - x[1]).slice(0, n);
  return [`| ${label}: growth by class | bytes each | objects each |`, '|---|---|---|', ...rows.map(([k, by, c]) => `| ${k} | ${by.toFixed(0)} | ${c.toFixed(1)} |`)].join('\n');
}

/** A Pod object with the fields a kubelet-run Pod of a Deployment has. */
function realisticPod(name: string, namespace: string, node: string, ip: string): { spec: Record<string, unknown>; status: Record<string, unknown>; metadata: Record<string, unknown> } {
  const now = new Date().toISOString();
  return {
    metadata: {
      name, namespace, labels: { app: 'web', 'pod-template-hash': '5d8f7c9b6d' }, generateName: 'web-5d8f7c9b6d-',
      ownerReferences: [{ apiVersion: 'apps/v1', kind: 'ReplicaSet', name: 'web-5d8f7c9b6d', uid: '0b5c9a4e-3f6e-4f0a-9c1d-2e7b8a6f5d4c', controller: true, blockOwnerDeletion: true }],
    },
    spec: {
      nodeName: node, restartPolicy: 'Always', terminationGracePeriodSeconds: 30, dnsPolicy: 'ClusterFirst', schedulerName: 'default-scheduler', serviceAccountName: 'default',
      containers: [{ name: 'web', image: 'coil.local/busybox:1', command: ['sh', '-c', 'trap exit TERM; sleep 1d & wait'], resources: {}, terminationMessagePath: '/dev/termination-log', terminationMessagePolicy: 'File', imagePullPolicy: 'IfNotPresent' }],
      tolerations: [{ key: 'node.kubernetes.io/not-ready', operator: 'Exists', effect: 'NoExecute', tolerationSeconds: 300 }, { key: 'node.kubernetes.io/unreachable', operator: 'Exists', effect: 'NoExecute', tolerationSeconds: 300 }],
    },
    status: {
      phase: 'Running', hostIP: '10.250.0.9', hostIPs: [{ ip: '10.250.0.9' }], podIP: ip, podIPs: [{ ip }], startTime: now, qosClass: 'BestEffort',
      conditions: ['PodReadyToStartContainers', 'Initialized', 'Ready', 'ContainersReady', 'PodScheduled'].map((type) => ({ type, status: 'True', lastProbeTime: null, lastTransitionTime: now })),
      containerStatuses: [{ name: 'web', ready: true, started: true, restartCount: 0, image: 'coil.local/busybox:1', imageID: 'sha256:6fd955f66c231c1a946653170d096a28ac2b2052a02080c0b84ec082a07f7d12', containerID: 'containerd://8a2c4e6f0b1d3f5a7c9e1b3d5f7a9c1e3b5d7f9a1c3e5b7d9f1a3c5e7b9d1f3a', state: { running: { startedAt: now } }, lastState: {} }],
    },
  };
}

/** Starts an empty program on `coil`'s Bun with the probe; returns its idle report. */
async function emptyProgram(out: string): Promise<Report> {
  const child = spawn(COIL_BIN, ['--no-install', '--preload', PROBE, '-e', 'setInterval(() => {}, 1 << 30)'], {
    env: { ...process.env, BUN_BE_BUN: '1', COIL_MEMORY_PROBE_OUT: out }, stdio: 'ignore',
  });
  try {
    await sleep(3000);
    return await probe(child.pid!, out);
  } finally {
    child.kill('SIGKILL');
  }
}

const FLAGS = defineFlags('memory-breakdown', {
  pods: { kind: 'int', default: 110, min: 1, help: 'Pods bound to the node for the per-Pod cost' },
  namespaces: { kind: 'int', default: 100, min: 1, help: 'Namespaces for the per-Namespace cost' },
  settle: { kind: 'int', default: 10, min: 0, help: 'seconds before each report' },
  churns: { kind: 'int', default: 0, min: 0, help: 'churns of --adds ADD + DEL after the cache figures, a report after each (growth: a leak)' },
  adds: { kind: 'int', default: 1000, min: 1, help: 'ADDs (and DELs) of each churn, at most 110 pods attached' },
});

/** `adds` ADDs and DELs on `node`, one at a time, at most `live` attached (oldest deleted first). */
async function churn(lab: NodeLab, node: Parameters<NodeLab['runCoil']>[0], round: number, adds: number, live = 110): Promise<void> {
  const up: Awaited<ReturnType<NodeLab['createPod']>>[] = [];
  const del = async (): Promise<void> => {
    const pod = up.shift()!;
    const r = await lab.runCoil(node, 'DEL', pod);
    if (r.code !== 0) throw new Error(`DEL ${pod.name} failed: ${r.stdout}`);
    await lab.dropPod(pod);
    // No kubelet confirms the graceful delete of a Pod bound to this node: without this the Pod
    // stays Terminating, in the API and in coild's cache, and a churn looks like a leak.
    const res = await lab.cp.request('DELETE', `/api/v1/namespaces/${pod.namespace}/pods/${pod.name}?gracePeriodSeconds=0`);
    if (res.status !== 200 && res.status !== 404) throw new Error(`delete ${pod.name}: ${res.status} ${res.body}`);
  };
  for (let i = 0; i < adds; i++) {
    if (up.length >= live) await del();
    const pod = await lab.createPod(node, 'bench', `churn-${round}-${i}`);
    const r = await lab.runCoil(node, 'ADD', pod);
    if (r.code !== 0) throw new Error(`ADD ${pod.name} failed: ${r.stdout}`);
    up.push(pod);
  }
  while (up.length > 0) await del();
}

async function main(v: FlagValues<typeof FLAGS.specs>): Promise<void> {
  const skip = labSkipReason();
  if (skip) throw new Error(skip);
  const lab = await NodeLab.start();
  const dir = lab.dir;
  process.stderr.write(`memory-breakdown: reports in ${dir}\n`);
  const settle = (): Promise<void> => sleep(Number(v.settle) * 1000);
  try {
    const floor = await emptyProgram(join(dir, 'empty'));
    await lab.createPool('default', { subnets: [{ ipv4: '10.100.0.0/16' }], blockSizeBits: 5 });
    await lab.createNamespace('bench');
    const node = await lab.addNode('breakdown-node', '10.250.0.9');
    const out = join(dir, 'coild');
    process.env.COIL_COILD_BUN_FLAGS = `--preload ${PROBE}`;
    await lab.startCoild(node, [], { COIL_MEMORY_PROBE_OUT: out });
    delete process.env.COIL_COILD_BUN_FLAGS;
    const first = await lab.createPod(node, 'bench', 'first');
    if ((await lab.runCoil(node, 'ADD', first)).code !== 0 || (await lab.runCoil(node, 'DEL', first)).code !== 0) throw new Error(`first ADD/DEL failed\n${await lab.logs()}`);
    await lab.dropPod(first);
    await settle();
    const pid = node.coild!.pid!;
    const preload = JSON.parse(await readFile(`${out}.0.json`, 'utf8')) as Report;
    await probe(pid, out); // the first full GC after start leaves garbage the next one finds
    const idle = await probe(pid, out);

    await lab.createNamespace('pods');
    for (let i = 0; i < Number(v.pods); i++) {
      const p = realisticPod(`web-5d8f7c9b6d-${String(i).padStart(5, '0')}`, 'pods', node.name, `10.100.1.${i % 250}`);
      await lab.admin.create(Kinds.Pod, { metadata: p.metadata, spec: p.spec } as never);
      await lab.admin.patchStatus(Kinds.Pod, { namespace: 'pods', name: p.metadata.name as string }, p.status);
    }
    await settle();
    const withPods = await probe(pid, out);
    for (let i = 0; i < Number(v.namespaces); i++) await lab.createNamespace(`tenant-${String(i).padStart(4, '0')}`);
    await settle();
    const withNs = await probe(pid, out);
    const json = async (kind: string, items: unknown[]): Promise<string> => {
      const sizes = items.map((o) => JSON.stringify(o).length);
      return `${kind}: ${items.length}, JSON ${sizes.length ? Math.round(sizes.reduce((a, b) => a + b, 0) / sizes.length) : 0} bytes each`;
    };
    const pods = (await lab.admin.list(Kinds.Pod)).filter((p) => p.spec?.nodeName === node.name);
    // The heap's total moves with code the GC drops as it ages (FunctionCodeBlocks of functions
    // not run lately), so an object's cost is the growth of the classes that grew.
    const grown = (b: Report, a: Report): number => Object.entries(a.afterGc?.bytesByClass ?? {})
      .reduce((sum, [k, c]) => sum + Math.max(0, c.bytes - (b.afterGc?.bytesByClass?.[k]?.bytes ?? 0)), 0);
    const perPod = grown(idle, withPods) / Number(v.pods);
    const perNs = grown(withPods, withNs) / Number(v.namespaces);
    const churned: [string, Report][] = [];
    for (let c = 1; c <= Number(v.churns); c++) {
      await churn(lab, node, c, Number(v.adds));
      await settle();
      churned.push([`after churn ${c}`, await probe(pid, out)]);
      process.stderr.write(`memory-breakdown: churn ${c} done\n`);
    }
    const churnTables = churned.map(([label, r], i) => growthTable(`${label} against ${i === 0 ? 'the Namespaces step' : `churn ${i}`}`, i === 0 ? withNs : churned[i - 1]![1], r, 1, 12)).join('\n\n');
    const load = (await readFile('/proc/loadavg', 'utf8')).trim();
    process.stdout.write(`### memory-breakdown, ${new Date().toISOString()}, loadavg ${load}\n\n`
      + `${smapsTable([['empty program (floor)', floor], ['coild at its preload', preload], ['coild idle', idle], [`coild, ${v.pods} Pods on the node`, withPods], [`coild, + ${v.namespaces} Namespaces`, withNs], ...churned])}\n\n`
      + `${churnTables ? `${churnTables}\n\n` : ''}`
      + `${typesTable('coild idle', idle, floor)}\n\n`
      + `${growthTable(`${v.pods} Pods`, idle, withPods, Number(v.pods))}\n\n${growthTable(`${v.namespaces} Namespaces`, withPods, withNs, Number(v.namespaces))}\n\n`
      + `- heap growth per cached Pod (after GC, the classes that grew): ${Math.round(perPod)} bytes; per Namespace: ${Math.round(perNs)} bytes\n`
      + `- in the API: ${await json('Pods on the node', pods)}; ${await json('Namespaces', await lab.admin.list(Kinds.Namespace))}; ${await json('AddressBlocks', await lab.admin.list(Kinds.AddressBlock))}; ${await json('AddressPools', await lab.admin.list(Kinds.AddressPool))}\n`);
  } finally {
    await lab.stop();
  }
}

await runBench(FLAGS, main);
