/**
 * Benchmark (not a test) of the real-node lab (hack/lab/cluster.ts): what a user of `npm run lab`
 * waits for, and what pods cost on a real kubelet + containerd node with coil. Run it as root
 * under the machine's heavy lock (it runs a lab):
 *
 *   flock /tmp/coil-heavy.lock node dist/hack/bench/pod-startup.js [--nodes=3] [--burst=30]
 *     [--one-node=110] [--cold=true|false]
 *
 * 1. lab start, cold: dist/image removed and the image built in an empty image cache
 *    (COIL_IMAGE_CACHE_DIR: mmdebstrap base, buildah bud, archives), then the lab up to every node
 *    Ready with coild Ready; warm: the same again with the archives already built. Both are
 *    `Cluster.up` wall time; the Go-built binaries and the control plane are cached in both (setup
 *    builds them once per machine, like the control plane for envtest).
 * 2. the coil image's size: compressed (the archive's layer blobs) and unpacked (the layers' tar
 *    streams, what containerd's snapshotter writes).
 * 3. pod startup, burst: one Deployment of N replicas (default 30) created at once over all nodes;
 *    per pod, from the moment the pod is first seen by a watch (ADDED) to the first event where it
 *    is Ready with a podIP: p50/p95/max, and the whole burst's wall time from the Deployment's apply.
 * 4. the same for M pods (default 110, kubelet's default maxPods) of one Deployment pinned to one node.
 * 5. coild's RSS in its pod on that node afterwards (VmRSS of the coild process, found through the
 *    node's pod cgroups), with its peak (VmHWM).
 *
 * Times are from this process's clock (watch events arrive within milliseconds of the apiserver
 * writing them), not creationTimestamp, whose resolution is one second.
 */
import 'reflect-metadata';
import { readFile, rm, mkdtemp } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as k8s from '@kubernetes/client-node';
import { REPO_ROOT } from '../../test/envtest/control-plane.js';
import { Cluster } from '../lab/cluster.js';
import { processesIn } from '../lab/cgroups.js';
import { readOciArchive, unpackedSize } from '../image/oci.js';
import { defineFlags, type FlagValues } from '../../src/runtime/flag-table.js';
import { runBench } from './bench-flags.js';

const PLACE = { prefix: 'coilbench-', dir: '/tmp/coil-bench' };

/** p-th percentile (nearest rank) of `values` (pure). */
export function percentile(values: readonly number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

const secs = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
const mb = (bytes: number) => `${(bytes / 1e6).toFixed(1)} MB`;
const load = () => loadavg().map((l) => l.toFixed(2)).join(' ');

/** Brings the lab up; resolves with it and the wall time in ms. */
async function timedUp(nodes: number): Promise<{ cluster: Cluster; ms: number }> {
  const t0 = performance.now();
  const cluster = await Cluster.up({ ...PLACE, nodes, log: (m) => console.error(`  lab: ${m} (${secs(performance.now() - t0)})`) });
  return { cluster, ms: performance.now() - t0 };
}

/** Startup of each pod of Deployment `namespace/name` with `replicas`, created now. */
async function podStartup(cluster: Cluster, namespace: string, name: string, replicas: number, nodeName?: string): Promise<{ perPod: number[]; wallMs: number }> {
  const seen = new Map<string, number>();
  const ready = new Map<string, number>();
  let done!: () => void;
  const allReady = new Promise<void>((resolve) => (done = resolve));
  const watch = new k8s.Watch(cluster.cp.kubeConfig);
  await cluster.kubectl(['create', 'namespace', namespace]);
  const req = await watch.watch(`/api/v1/namespaces/${namespace}/pods`, { labelSelector: `app=${name}` }, (_type: string, pod: k8s.V1Pod) => {
    const now = performance.now();
    const key = pod.metadata!.name!;
    if (!seen.has(key)) seen.set(key, now);
    const isReady = !!pod.status?.podIP && !!pod.status.conditions?.some((c) => c.type === 'Ready' && c.status === 'True');
    if (isReady && !ready.has(key)) {
      ready.set(key, now);
      if (ready.size === replicas) done();
    }
  }, () => undefined);
  const t0 = performance.now();
  await cluster.applyWorkload(namespace, name, replicas, nodeName ? { nodeName } : {});
  const timeout = setTimeout(() => done(), 900_000);
  await allReady;
  clearTimeout(timeout);
  const wallMs = performance.now() - t0;
  (req as { abort(): void }).abort();
  if (ready.size !== replicas) throw new Error(`${namespace}/${name}: only ${ready.size} of ${replicas} pods Ready after 15 min`);
  return { perPod: [...ready].map(([pod, at]) => at - seen.get(pod)!), wallMs };
}

function report(label: string, r: { perPod: number[]; wallMs: number }): string {
  return `${label}: created → Ready with an IP p50 ${secs(percentile(r.perPod, 50))}, p95 ${secs(percentile(r.perPod, 95))}, max ${secs(Math.max(...r.perPod))}; all ${r.perPod.length} Ready ${secs(r.wallMs)} after the apply (load ${load()})`;
}

/**
 * Memory of coild on `node`: VmRSS and VmHWM (bytes) of its main process (the one running
 * node-agent/main.js, plain or bundled), and VmRSS summed over its pod's processes.
 * @throws Error when no coild process is in the node's pod cgroups
 */
export async function coildMemory(node: string): Promise<{ rss: number; hwm: number; podRss: number }> {
  const kb = async (pid: number, field: string) => {
    const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '');
    return Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? 0) * 1024;
  };
  for (const pid of await processesIn(`/${node}/kubepods`)) {
    const cmd = (await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '')).split('\0');
    if (!cmd.some((a) => /\/node-agent\/main(\.bundle)?\.c?js$/.test(a))) continue;
    // The pod's cgroup (pids hierarchy): <node>/kubepods/<qos>/pod<uid>/<container>; its parent is the pod.
    const cgroup = (await readFile(`/proc/${pid}/cgroup`, 'utf8')).split('\n').find((l) => l.split(':')[1] === 'pids')?.split(':')[2] ?? '';
    const pod = cgroup.slice(0, cgroup.lastIndexOf('/'));
    let podRss = 0;
    for (const p of await processesIn(pod)) podRss += await kb(p, 'VmRSS');
    return { rss: await kb(pid, 'VmRSS'), hwm: await kb(pid, 'VmHWM'), podRss };
  }
  throw new Error(`no coild process in the pod cgroups of ${node}`);
}

/** Pods (not terminating) kubelet runs on `node`. */
async function podsOn(cluster: Cluster, node: string): Promise<number> {
  const pods = await cluster.api(k8s.CoreV1Api).listPodForAllNamespaces({ fieldSelector: `spec.nodeName=${node}` });
  return pods.items.filter((p) => !p.metadata?.deletionTimestamp).length;
}

const FLAGS = defineFlags('pod-startup', {
  nodes: { kind: 'int', default: 3, min: 1, help: 'nodes of the lab' },
  burst: { kind: 'int', default: 30, help: 'pods started at once across the nodes' },
  'one-node': { kind: 'int', default: 110, help: 'pods started on one node' },
  cold: { kind: 'bool', default: true, help: 'also time the lab coming up from nothing' },
});

async function main(values: FlagValues<typeof FLAGS.specs>): Promise<void> {
  const nodes = Number(values.nodes);
  const lines: string[] = [`machine: ${(await readFile('/proc/cpuinfo', 'utf8')).split('\n').filter((l) => l.startsWith('processor')).length} cores, load at start ${load()}`];
  const print = (l: string) => {
    lines.push(l);
    console.log(l);
  };

  if (values.cold) {
    const imageCache = await mkdtemp(join(tmpdir(), 'coil-bench-image-'));
    await rm(join(REPO_ROOT, 'dist/image'), { recursive: true, force: true });
    process.env.COIL_IMAGE_CACHE_DIR = imageCache;
    try {
      const cold = await timedUp(nodes);
      print(`lab start, cold (image built from an empty image cache, ${nodes} nodes): ${secs(cold.ms)}`);
      await cold.cluster.stop();
    } finally {
      delete process.env.COIL_IMAGE_CACHE_DIR;
      await rm(imageCache, { recursive: true, force: true });
    }
  }
  const { cluster, ms } = await timedUp(nodes);
  print(`lab start, warm (images built, ${nodes} nodes): ${secs(ms)}`);
  try {
    const coil = [...cluster.images.values()].find((i) => i.ref.startsWith('ghcr.io/coil-ts/coil:'))!;
    const image = await readOciArchive(coil.archive);
    let packed = 0;
    let unpacked = 0;
    for (const layer of image.layers) {
      packed += layer.size;
      unpacked += await unpackedSize(coil.archive, layer);
    }
    print(`image ${coil.ref}: compressed ${mb(packed)}, unpacked ${mb(unpacked)} (${image.layers.length} layers)`);

    const burst = Number(values.burst);
    print(report(`${burst} pods of one Deployment over ${nodes} nodes`, await podStartup(cluster, 'bench-burst', 'burst', burst)));
    const node = cluster.nodes[0]!.name;
    const before = await coildMemory(node);
    print(`coild on ${node} with ${await podsOn(cluster, node)} pods on the node: RSS ${mb(before.rss)} (its pod: ${mb(before.podRss)})`);
    const many = Number(values['one-node']);
    print(report(`${many} pods of one Deployment on ${node}`, await podStartup(cluster, 'bench-node', 'node', many, node)));
    const after = await coildMemory(node);
    print(`coild on ${node} with ${await podsOn(cluster, node)} pods on the node: RSS ${mb(after.rss)}, peak ${mb(after.hwm)} (its pod: ${mb(after.podRss)})`);
  } finally {
    await cluster.stop();
  }
  console.log(`\nSUMMARY\n${lines.join('\n')}`);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await runBench(FLAGS, main);
