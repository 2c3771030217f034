/**
 * Benchmark (not a test): how long Kubernetes takes to take a lost NAT pod out of its Egress
 * Service and to put it (or its replacement) back — the delay Coil's egress path waits for,
 * since its client tunnels point at the Service's ClusterIP and kube-proxy picks the NAT pod
 * (docs/egress-failover.md#measured). Real parts only: the real-node lab (hack/lab/cluster.ts:
 * kubelet, containerd, kube-proxy in iptables mode on 3 nodes; kube-controller-manager's
 * EndpointSlice and node-lifecycle controllers with the lab's flags), coil installed by helm, and
 * an Egress of 3 NAT pods that our controller turns into a Deployment. Run it as root under the
 * machine's heavy lock (it runs a lab):
 *
 *   flock /tmp/coil-heavy.lock node dist/hack/bench/egress-k8s-delays.js [-k KINDS] [-n RUNS=3]
 *
 * Its lab is `coilbench-` in /tmp/coil-bench (pod-startup.ts's place); it is torn down when the
 * runs end, fail or are interrupted (SIGINT, SIGTERM). After a SIGKILL of this process:
 * `COIL_LAB_PREFIX=coilbench- COIL_LAB_DIR=/tmp/coil-bench node dist/hack/lab.js down`.
 *
 * Kinds of loss (`-k`, comma-separated, default all, run in this order):
 *   sigkill    the NAT pod's main process SIGKILLed on its node (kubelet restarts the container);
 *   sigstop    the process stopped (SIGSTOP) until its endpoint is not ready, then SIGCONT;
 *   graceful   the pod deleted with its default grace period (the ReplicaSet makes another);
 *   scale      the Egress scaled from 3 to 2 NAT pods (`kubectl scale egress`), then back to 3;
 *   node-lost  the NAT pod's node frozen (every process of it, kubelet and its relay to the
 *              apiserver included) and its link down; then back (KubeNode.setLost).
 * Each run's target is a ready NAT pod, the one with the fewest container restarts (so a SIGKILL
 * meets kubelet's first restart, not its crash-loop back-off) and, for node-lost, on a node not
 * lost before.
 *
 * Measured from the loss (this process's clock, just before the signal, the delete, the scale or
 * the freeze) to the first event of a watch on the Egress Service's EndpointSlices — what
 * kube-proxy and coild see — where the lost pod's endpoint is not ready, not serving,
 * terminating, gone; and to the first poll (every 100 ms, `iptables-save -t nat` in another node's
 * network namespace) where kube-proxy's DNAT rules for the Service no longer lead to it. Back:
 * from the SIGKILL, the SIGCONT, the deletion, the scale-up or the node's return to its (or its
 * replacement's) endpoint ready again, and in the rules again. For node-lost, also the Node's
 * Ready condition leaving True (its lastTransitionTime: 1 s resolution). A measure that did not
 * happen within its wait is left out and counted.
 *
 * The NAT pods' readiness probe: coil-egress's `/readyz` fails on this kernel (no FoU), so the
 * Egress's `spec.template` gives the `egress` container a readiness probe on `/healthz` of the same
 * server (port `health`) with the period, timeout and thresholds of the default one (10 s, 1 s,
 * 3 failures, 1 success); docs/egress-failover.md#measured says why the timings are those of a
 * production NAT pod.
 */
import 'reflect-metadata';
import { execFile } from 'node:child_process';
import { loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import * as k8s from '@kubernetes/client-node';
import { eventually } from '../../test/envtest/control-plane.js';
import { Cluster } from '../lab/cluster.js';
import { ctr } from '../lab/containerd.js';
import type { KubeNode } from '../lab/kube-node.js';
import { defineFlags, type FlagValues } from '../../src/runtime/flag-table.js';
import { runBench } from './bench-flags.js';
import { percentile } from './pod-startup.js';

const run = promisify(execFile);
const PLACE = { prefix: 'coilbench-', dir: '/tmp/coil-bench' };
const NS = 'bench-egress';
const EGRESS = 'nat';
const REPLICAS = 3;
const FOU_PORT = 5555;
const SELECTOR = `app.kubernetes.io/instance=${EGRESS},app.kubernetes.io/component=egress`;
const KINDS = ['sigkill', 'sigstop', 'graceful', 'scale', 'node-lost'] as const;
type Kind = (typeof KINDS)[number];

/**
 * The readiness probe the bench's NAT pods get: `/healthz` instead of `/readyz` (which fails on a
 * kernel without FoU), every other field Kubernetes' default, as the controller's default probe has.
 */
export const BENCH_READINESS_PROBE: k8s.V1Probe = {
  httpGet: { path: '/healthz', port: 'health' },
  periodSeconds: 10, timeoutSeconds: 1, failureThreshold: 3, successThreshold: 1,
};

/** One endpoint of the Egress Service as the EndpointSlices show it. */
interface EndpointState {
  readonly ip: string;
  readonly ready: boolean;
  readonly serving: boolean;
  readonly terminating: boolean;
}

/** A change of one pod's endpoint (undefined: gone from every slice), at `t` (performance.now() ms). */
interface EndpointEvent {
  readonly t: number;
  readonly pod: string;
  readonly state: EndpointState | undefined;
}

/** The Egress Service's endpoints by pod, kept by a watch on its EndpointSlices, with every change logged. */
class SliceView {
  readonly events: EndpointEvent[] = [];
  private readonly slices = new Map<string, k8s.V1EndpointSlice>();
  private state = new Map<string, EndpointState>();
  private req: { abort(): void } | undefined;
  private stopped = false;

  constructor(private readonly kubeConfig: k8s.KubeConfig) {}

  /** Lists the slices, then watches them from that version; a watch that ends is started again. */
  async start(): Promise<void> {
    const list = await this.kubeConfig.makeApiClient(k8s.DiscoveryV1Api).listNamespacedEndpointSlice({ namespace: NS, labelSelector: `kubernetes.io/service-name=${EGRESS}` });
    this.slices.clear();
    for (const s of list.items) this.slices.set(s.metadata!.name!, s);
    this.update(performance.now());
    const watch = new k8s.Watch(this.kubeConfig);
    this.req = await watch.watch(`/apis/discovery.k8s.io/v1/namespaces/${NS}/endpointslices`,
      { labelSelector: `kubernetes.io/service-name=${EGRESS}`, resourceVersion: list.metadata?.resourceVersion, allowWatchBookmarks: true },
      (type: string, slice: k8s.V1EndpointSlice) => {
        const now = performance.now();
        if (type === 'BOOKMARK') return;
        if (type === 'DELETED') this.slices.delete(slice.metadata!.name!);
        else this.slices.set(slice.metadata!.name!, slice);
        this.update(now);
      },
      () => { if (!this.stopped) void this.start().catch((err: unknown) => console.error(`slice watch: ${String(err)}`)); }) as { abort(): void };
  }

  stop(): void {
    this.stopped = true;
    this.req?.abort();
  }

  /** The endpoints now, by pod name. */
  get endpoints(): ReadonlyMap<string, EndpointState> {
    return this.state;
  }

  private update(t: number): void {
    const next = new Map<string, EndpointState>();
    for (const slice of this.slices.values()) {
      if (slice.addressType !== 'IPv4') continue;
      for (const e of slice.endpoints ?? []) {
        const pod = e.targetRef?.name;
        if (!pod) continue;
        const ready = e.conditions?.ready ?? true;
        next.set(pod, { ip: e.addresses[0]!, ready, serving: e.conditions?.serving ?? ready, terminating: e.conditions?.terminating ?? false });
      }
    }
    for (const pod of new Set([...this.state.keys(), ...next.keys()])) {
      const a = this.state.get(pod);
      const b = next.get(pod);
      if (JSON.stringify(a) !== JSON.stringify(b)) this.events.push({ t, pod, state: b });
    }
    this.state = next;
  }

  /** First logged change of `pod` at or after `from` that satisfies `pred`; its time, or undefined. */
  first(pod: string, from: number, pred: (s: EndpointState | undefined) => boolean): number | undefined {
    return this.events.find((e) => e.pod === pod && e.t >= from && pred(e.state))?.t;
  }

  /** Waits until a change of `pod` at or after `from` satisfies `pred` (see {@link first}); its time, or undefined after `timeoutMs`. */
  async waitFirst(pod: string, from: number, pred: (s: EndpointState | undefined) => boolean, timeoutMs: number): Promise<number | undefined> {
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      const t = this.first(pod, from, pred);
      if (t !== undefined || performance.now() > deadline) return t;
      await sleep(50);
    }
  }

  /** Waits (polling the view, 50 ms) until `pred` holds; false after `timeoutMs`. */
  async until(pred: (endpoints: ReadonlyMap<string, EndpointState>) => boolean, timeoutMs: number): Promise<boolean> {
    const deadline = performance.now() + timeoutMs;
    while (!pred(this.state)) {
      if (performance.now() > deadline) return false;
      await sleep(50);
    }
    return true;
  }
}

/**
 * The pod addresses kube-proxy's iptables rules in `node` send the Egress Service to: the DNAT
 * targets of the KUBE-SEP chains its KUBE-SVC chain jumps to (parsed from `iptables-save -t nat`,
 * pure).
 */
export function serviceTargets(iptablesSave: string, service: string, port: number): Set<string> {
  const lines = iptablesSave.split('\n');
  // `-A KUBE-SERVICES -d <clusterIP>/32 -p udp -m comment --comment "<ns>/<name> cluster IP" … -j KUBE-SVC-…`
  // (older kube-proxies write "<ns>/<name>: cluster IP").
  const comment = new RegExp(`--comment "?${service.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}:? cluster IP"?`);
  const svcChain = lines.filter((l) => l.startsWith('-A KUBE-SERVICES ') && comment.test(l)).map((l) => / -j (KUBE-SVC-\S+)/.exec(l)?.[1]).find((c) => !!c);
  const out = new Set<string>();
  if (!svcChain) return out;
  const seps = new Set(lines.filter((l) => l.startsWith(`-A ${svcChain} `)).map((l) => / -j (KUBE-SEP-\S+)/.exec(l)?.[1]).filter((s): s is string => !!s));
  for (const l of lines) {
    const m = /^-A (KUBE-SEP-\S+) .* -j DNAT .*--to-destination ([\d.]+):(\d+)/.exec(l);
    if (m && seps.has(m[1]!) && Number(m[3]) === port) out.add(m[2]!);
  }
  return out;
}

/** Polls (every 100 ms) what the Service leads to in `node`'s rules, logging each change. */
class RulesPoller {
  readonly changes: { t: number; targets: Set<string> }[] = [];
  private running = true;
  private readonly done: Promise<void>;

  constructor(readonly node: KubeNode) {
    this.done = this.loop();
  }

  private async loop(): Promise<void> {
    let last = '';
    while (this.running) {
      const { stdout } = await run('nsenter', [`--net=${this.node.spec.node.netnsPath}`, 'iptables-save', '-t', 'nat'], { maxBuffer: 64 << 20 }).catch(() => ({ stdout: '' }));
      const t = performance.now();
      const targets = serviceTargets(stdout, `${NS}/${EGRESS}`, FOU_PORT);
      const key = [...targets].sort().join(',');
      if (stdout && key !== last) {
        this.changes.push({ t, targets });
        last = key;
      }
      await sleep(100);
    }
  }

  /** The latest targets seen. */
  get targets(): Set<string> {
    return this.changes.at(-1)?.targets ?? new Set();
  }

  /** First change at or after `from` where `pred` holds. */
  first(from: number, pred: (targets: Set<string>) => boolean): number | undefined {
    return this.changes.find((c) => c.t >= from && pred(c.targets))?.t;
  }

  /** Waits until a change at or after `from` satisfies `pred`; its time, or undefined after `timeoutMs`. */
  async waitFirst(from: number, pred: (targets: Set<string>) => boolean, timeoutMs: number): Promise<number | undefined> {
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      const t = this.first(from, pred);
      if (t !== undefined || performance.now() > deadline) return t;
      await sleep(50);
    }
  }

  async until(pred: (targets: Set<string>) => boolean, timeoutMs: number): Promise<boolean> {
    const deadline = performance.now() + timeoutMs;
    while (!pred(this.targets)) {
      if (performance.now() > deadline) return false;
      await sleep(50);
    }
    return true;
  }

  async stop(): Promise<void> {
    this.running = false;
    await this.done;
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const load = () => loadavg().map((l) => l.toFixed(2)).join(' ');

/** The measures of one kind: name → one value (ms) per run where it happened. */
type Measures = Map<string, number[]>;

class Bench {
  readonly results = new Map<Kind, Measures>();
  readonly missing = new Map<string, number>();
  /** Nodes already lost (a node-lost run picks another). */
  private readonly lostNodes = new Set<string>();
  private lostNow: KubeNode | undefined;

  constructor(readonly cluster: Cluster, readonly view: SliceView) {}

  private record(kind: Kind, measure: string, from: number, at: number | undefined): void {
    const m = this.results.get(kind) ?? new Map<string, number[]>();
    this.results.set(kind, m);
    if (at === undefined) {
      this.missing.set(`${kind}: ${measure}`, (this.missing.get(`${kind}: ${measure}`) ?? 0) + 1);
      return;
    }
    m.set(measure, [...(m.get(measure) ?? []), at - from]);
  }

  private pods = async (): Promise<k8s.V1Pod[]> =>
    (await this.cluster.api(k8s.CoreV1Api).listNamespacedPod({ namespace: NS, labelSelector: SELECTOR })).items.filter((p) => !p.metadata?.deletionTimestamp);

  /** Waits until the Egress has `count` ready, non-terminating endpoints, and every node's rules lead to exactly them. */
  async settle(count = REPLICAS): Promise<void> {
    const ok = await this.view.until((eps) => [...eps.values()].filter((e) => e.ready && !e.terminating).length === count && eps.size === count, 300_000);
    if (!ok) throw new Error(`the Egress did not get back to ${count} ready endpoints in 5 min: ${JSON.stringify([...this.view.endpoints])}`);
    const ips = new Set([...this.view.endpoints.values()].map((e) => e.ip));
    for (const node of this.cluster.nodes) {
      await eventually(async () => {
        const { stdout } = await run('nsenter', [`--net=${node.spec.node.netnsPath}`, 'iptables-save', '-t', 'nat'], { maxBuffer: 64 << 20 });
        const t = serviceTargets(stdout, `${NS}/${EGRESS}`, FOU_PORT);
        return t.size === ips.size && [...ips].every((ip) => t.has(ip));
      }, { timeoutMs: 60_000, intervalMs: 250 });
    }
    await sleep(2000);
  }

  /** A ready NAT pod with the fewest restarts (name order breaks ties), not on `avoidNodes`. */
  private async target(avoidNodes: ReadonlySet<string> = new Set()): Promise<{ pod: k8s.V1Pod; name: string; ip: string; node: KubeNode }> {
    const ready = (await this.pods()).filter((p) => p.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') && !avoidNodes.has(p.spec!.nodeName!));
    const restarts = (p: k8s.V1Pod) => p.status?.containerStatuses?.[0]?.restartCount ?? 0;
    ready.sort((a, b) => restarts(a) - restarts(b) || a.metadata!.name!.localeCompare(b.metadata!.name!));
    const pod = ready[0];
    if (!pod) throw new Error(`no ready NAT pod off ${[...avoidNodes].join(',') || 'nothing'}`);
    return { pod, name: pod.metadata!.name!, ip: pod.status!.podIP!, node: this.cluster.node(pod.spec!.nodeName!) };
  }

  /** Host PID of the pod's `egress` container's main process (containerd's task, in the node). */
  private async mainPid(pod: k8s.V1Pod, node: KubeNode): Promise<number> {
    const id = pod.status?.containerStatuses?.find((c) => c.name === 'egress')?.containerID?.replace(/^containerd:\/\//, '');
    if (!id) throw new Error(`${pod.metadata?.name}: no egress container id`);
    const line = (await ctr(node.host, ['tasks', 'ls'], { bin: node.ctrBin })).split('\n').find((l) => l.startsWith(`${id} `) || l.split(/\s+/)[0] === id);
    const pid = Number(line?.split(/\s+/)[1]);
    if (!pid) throw new Error(`${pod.metadata?.name}: no task ${id} on ${node.name}`);
    return pid;
  }

  /** A node other than `node` that is not lost: where kube-proxy's rules are watched. */
  private observer(node: KubeNode): KubeNode {
    return this.cluster.nodes.find((n) => n !== node && n !== this.lostNow)!;
  }

  private gone = (s: EndpointState | undefined) => s === undefined;
  private notReady = (s: EndpointState | undefined) => !s || !s.ready;

  /** The down measures of `pod` (address `ip`) after a loss at `t0`. */
  private recordDown(kind: Kind, pod: string, ip: string, t0: number, rules: RulesPoller, measures: readonly ('not ready' | 'not serving' | 'terminating' | 'gone')[]): void {
    const preds = { 'not ready': this.notReady, 'not serving': (s: EndpointState | undefined) => !s || !s.serving, terminating: (s: EndpointState | undefined) => !!s?.terminating, gone: this.gone };
    for (const m of measures) this.record(kind, `slice: ${m}`, t0, this.view.first(pod, t0, preds[m]));
    this.record(kind, 'rules: out (kube-proxy, another node)', t0, rules.first(t0, (t) => !t.has(ip)));
  }

  async sigkill(i: number): Promise<void> {
    const { pod, name, ip, node } = await this.target();
    const pid = await this.mainPid(pod, node);
    const rules = new RulesPoller(this.observer(node));
    try {
      await rules.until((t) => t.has(ip), 10_000);
      const t0 = performance.now();
      process.kill(pid, 'SIGKILL');
      const down = await this.view.waitFirst(name, t0, this.notReady, 60_000);
      const up = await this.view.waitFirst(name, down ?? t0, (s) => !!s?.ready, 120_000);
      await rules.waitFirst(up ?? t0, (t) => t.has(ip), 30_000);
      this.recordDown('sigkill', name, ip, t0, rules, ['not ready']);
      const back = this.view.first(name, this.view.first(name, t0, this.notReady) ?? Infinity, (s) => !!s?.ready);
      this.record('sigkill', 'back: slice ready', t0, back);
      this.record('sigkill', 'back: rules in', t0, rules.first(back ?? Infinity, (t) => t.has(ip)));
      console.log(`  sigkill #${i} ${name} on ${node.name} (pid ${pid}): ${this.describe(name, t0)}`);
    } finally {
      await rules.stop();
    }
  }

  async sigstop(i: number): Promise<void> {
    const { pod, name, ip, node } = await this.target();
    const pid = await this.mainPid(pod, node);
    const restartsBefore = pod.status?.containerStatuses?.[0]?.restartCount ?? 0;
    const rules = new RulesPoller(this.observer(node));
    try {
      await rules.until((t) => t.has(ip), 10_000);
      const t0 = performance.now();
      process.kill(pid, 'SIGSTOP');
      const down = await this.view.waitFirst(name, t0, this.notReady, 90_000);
      const tCont = performance.now();
      try {
        process.kill(pid, 'SIGCONT');
      } catch {
        // kubelet's liveness probe restarted the container meanwhile: the process is gone.
      }
      if (down === undefined) console.log(`  sigstop #${i}: ${name} still ready 90 s after SIGSTOP`);
      const up = await this.view.waitFirst(name, tCont, (s) => !!s?.ready, 120_000);
      await rules.waitFirst(up ?? tCont, (t) => t.has(ip), 30_000);
      this.recordDown('sigstop', name, ip, t0, rules, ['not ready']);
      const back = this.view.first(name, tCont, (s) => !!s?.ready);
      this.record('sigstop', 'back: slice ready (from SIGCONT)', tCont, back);
      this.record('sigstop', 'back: rules in (from SIGCONT)', tCont, rules.first(back ?? Infinity, (t) => t.has(ip)));
      const after = (await this.pods()).find((p) => p.metadata?.name === name)?.status?.containerStatuses?.[0]?.restartCount ?? 0;
      console.log(`  sigstop #${i} ${name} on ${node.name} (pid ${pid}; SIGCONT at +${((tCont - t0) / 1000).toFixed(1)} s; container restarts ${restartsBefore} → ${after}): ${this.describe(name, t0)}`);
    } finally {
      await rules.stop();
    }
  }

  async graceful(i: number): Promise<void> {
    const { name, ip, node } = await this.target();
    const before = new Set(this.view.endpoints.keys());
    const rules = new RulesPoller(this.observer(node));
    try {
      await rules.until((t) => t.has(ip), 10_000);
      const t0 = performance.now();
      await this.cluster.api(k8s.CoreV1Api).deleteNamespacedPod({ name, namespace: NS });
      await this.view.until((eps) => !eps.has(name) && [...eps.entries()].filter(([p, e]) => !before.has(p) && e.ready).length === 1, 180_000);
      const fresh = [...this.view.endpoints.entries()].find(([p]) => !before.has(p));
      await rules.until((t) => !!fresh && t.has(fresh[1].ip), 30_000);
      this.recordDown('graceful', name, ip, t0, rules, ['not ready', 'terminating', 'not serving', 'gone']);
      const back = fresh ? this.view.first(fresh[0], t0, (s) => !!s?.ready) : undefined;
      this.record('graceful', 'back: replacement ready', t0, back);
      this.record('graceful', 'back: replacement in rules', t0, fresh ? rules.first(t0, (t) => t.has(fresh[1].ip)) : undefined);
      console.log(`  graceful #${i} ${name} on ${node.name}: ${this.describe(name, t0)}; replacement ${fresh?.[0]}: ${fresh ? this.describe(fresh[0], t0) : '-'}`);
    } finally {
      await rules.stop();
    }
  }

  async scale(i: number): Promise<void> {
    const before = new Map(this.view.endpoints);
    // Every node's rules: the pod that goes is the ReplicaSet's choice, on any node.
    const pollers = this.cluster.nodes.map((n) => new RulesPoller(n));
    try {
      const t0 = performance.now();
      await this.cluster.kubectl(['scale', 'egress', EGRESS, '-n', NS, `--replicas=${REPLICAS - 1}`]);
      await this.view.until((eps) => eps.size === REPLICAS - 1, 180_000);
      const removed = [...before.keys()].find((p) => !this.view.endpoints.has(p));
      if (!removed) throw new Error('scale-down removed no endpoint');
      const ip = before.get(removed)!.ip;
      const removedNode = (await this.cluster.api(k8s.CoreV1Api).listNamespacedPod({ namespace: NS })).items.find((p) => p.metadata?.name === removed)?.spec?.nodeName;
      const rules = pollers.find((p) => p.node.name !== removedNode) ?? pollers[0]!;
      await rules.waitFirst(t0, (t) => !t.has(ip), 30_000);
      this.recordDown('scale', removed, ip, t0, rules, ['not ready', 'terminating', 'not serving', 'gone']);
      await this.settle(REPLICAS - 1);

      const known = new Set(this.view.endpoints.keys());
      const t1 = performance.now();
      await this.cluster.kubectl(['scale', 'egress', EGRESS, '-n', NS, `--replicas=${REPLICAS}`]);
      await this.view.until((eps) => [...eps.entries()].some(([p, e]) => !known.has(p) && e.ready), 180_000);
      const added = [...this.view.endpoints.entries()].find(([p]) => !known.has(p));
      if (!added) throw new Error('scale-up added no endpoint');
      await rules.until((t) => t.has(added[1].ip), 30_000);
      this.record('scale', 'up: new endpoint in slice', t1, this.view.first(added[0], t1, (s) => !!s));
      this.record('scale', 'up: new endpoint ready', t1, this.view.first(added[0], t1, (s) => !!s?.ready));
      this.record('scale', 'up: new endpoint in rules', t1, rules.first(t1, (t) => t.has(added[1].ip)));
      console.log(`  scale #${i}: down removed ${removed} (${removedNode}): ${this.describe(removed, t0)}; up added ${added[0]}: ${this.describe(added[0], t1)}`);
    } finally {
      await Promise.all(pollers.map((p) => p.stop()));
    }
  }

  async nodeLost(i: number): Promise<void> {
    const { name, ip, node } = await this.target(this.lostNodes);
    this.lostNodes.add(node.name);
    const rules = new RulesPoller(this.observer(node));
    const core = this.cluster.api(k8s.CoreV1Api);
    try {
      await rules.until((t) => t.has(ip), 10_000);
      const wall0 = Date.now();
      const t0 = performance.now();
      this.lostNow = node;
      await node.setLost(true);
      const down = await this.view.waitFirst(name, t0, this.notReady, 150_000);
      await rules.waitFirst(t0, (t) => !t.has(ip), 30_000);
      const ready = (await core.readNode({ name: node.name })).status?.conditions?.find((c) => c.type === 'Ready');
      const nodeNotReady = ready && ready.status !== 'True' && ready.lastTransitionTime ? new Date(ready.lastTransitionTime).getTime() - wall0 : undefined;
      const tBack = performance.now();
      await node.setLost(false);
      this.lostNow = undefined;
      if (down === undefined) console.log(`  node-lost #${i}: ${name} still ready 150 s after ${node.name} was lost`);
      const up = await this.view.waitFirst(name, tBack, (s) => !!s?.ready, 180_000);
      await rules.waitFirst(up ?? tBack, (t) => t.has(ip), 30_000);
      this.recordDown('node-lost', name, ip, t0, rules, ['not ready', 'terminating', 'gone']);
      this.record('node-lost', `Node Ready ≠ True (lastTransitionTime, ±1 s)`, 0, nodeNotReady);
      const back = this.view.first(name, tBack, (s) => !!s?.ready);
      this.record('node-lost', 'back: slice ready (from the node\'s return)', tBack, back);
      this.record('node-lost', 'back: rules in (from the node\'s return)', tBack, rules.first(back ?? Infinity, (t) => t.has(ip)));
      console.log(`  node-lost #${i} ${name} on ${node.name} (Node ${ready?.status} ${ready?.reason ?? ''} at +${nodeNotReady === undefined ? '?' : (nodeNotReady / 1000).toFixed(1)} s; back at +${((tBack - t0) / 1000).toFixed(1)} s): ${this.describe(name, t0)}`);
    } finally {
      if (this.lostNow) await this.lostNow.setLost(false).catch(() => undefined);
      this.lostNow = undefined;
      await rules.stop();
    }
  }

  /** Every logged change of `pod` since `t0`, as `+1.2 s ready=false serving=true terminating=false`. */
  private describe(pod: string, t0: number): string {
    return this.view.events.filter((e) => e.pod === pod && e.t >= t0)
      .map((e) => `+${((e.t - t0) / 1000).toFixed(2)} s ${e.state ? `r=${e.state.ready} s=${e.state.serving} t=${e.state.terminating}` : 'gone'}`).join(', ') || 'no change';
  }

  /** Recovers a lost node if a run failed with it lost (the teardown needs it thawed). */
  async restore(): Promise<void> {
    await this.lostNow?.setLost(false).catch(() => undefined);
    this.lostNow = undefined;
  }
}

/** The result table (markdown): per kind and measure, p50 and max in seconds and the runs it happened in. */
export function table(results: ReadonlyMap<string, ReadonlyMap<string, readonly number[]>>, runs: number): string {
  const s = (ms: number) => (ms / 1000).toFixed(2);
  const rows = ['| loss | measure (from the loss) | p50 (s) | max (s) | runs | values (s) |', '|---|---|---:|---:|---:|---|'];
  for (const [kind, measures] of results) {
    for (const [measure, values] of measures) {
      rows.push(`| ${kind} | ${measure} | ${s(percentile(values, 50))} | ${s(Math.max(...values))} | ${values.length}/${runs} | ${values.map(s).join(', ')} |`);
    }
  }
  return rows.join('\n');
}

const FLAGS = defineFlags('egress-k8s-delays', {
  kinds: { kind: 'string', short: 'k', default: KINDS.join(','), help: `kinds of loss, comma-separated (${KINDS.join(', ')})` },
  runs: { kind: 'int', short: 'n', default: 3, min: 1, help: 'runs of each kind' },
});

async function main(values: FlagValues<typeof FLAGS.specs>): Promise<void> {
  const kinds = values.kinds.split(',').map((k) => k.trim()).filter(Boolean);
  for (const k of kinds) if (!(KINDS as readonly string[]).includes(k)) throw new Error(`--kinds: unknown kind ${JSON.stringify(k)} (kinds: ${KINDS.join(', ')})`);
  if (kinds.filter((k) => k === 'node-lost').length && values.runs > 3) throw new Error('--runs: node-lost loses a different node each run, and the lab has 3');
  const runs = values.runs;
  console.log(`load at start ${load()}`);
  const t0 = performance.now();
  const cluster = await Cluster.up({ ...PLACE, nodes: 3, log: (m) => console.error(`  lab: ${m} (${((performance.now() - t0) / 1000).toFixed(1)} s)`) });
  let bench: Bench | undefined;
  const view = new SliceView(cluster.cp.kubeConfig);
  // One teardown, whether the runs end, fail or are interrupted: a lost node thawed first (a
  // frozen process handles no signal), then the lab stopped and checked.
  let teardown: Promise<void> | undefined;
  const tearDown = () => (teardown ??= (async () => {
    await bench?.restore();
    view.stop();
    await cluster.stop();
    const left = await Cluster.leftovers(PLACE);
    if (Object.values(left).some((v) => (Array.isArray(v) ? v.length > 0 : v))) console.error(`left on the machine: ${JSON.stringify(left)}`);
  })());
  const onSignal = (signal: NodeJS.Signals) => {
    console.error(`${signal}: tearing the lab down`);
    void tearDown().catch((err: unknown) => console.error(String(err))).finally(() => process.exit(130));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    await cluster.kubectl(['apply', '-f', '-'], [
      JSON.stringify({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS } }),
      JSON.stringify({
        apiVersion: 'coil.cybozu.com/v2', kind: 'Egress', metadata: { name: EGRESS, namespace: NS },
        spec: { replicas: REPLICAS, destinations: ['0.0.0.0/0'], template: { spec: { containers: [{ name: 'egress', readinessProbe: BENCH_READINESS_PROBE }] } } },
      }),
    ].join('\n'));
    await eventually(async () => (await cluster.api(k8s.CoreV1Api).readNamespacedService({ name: EGRESS, namespace: NS }).then(() => true, () => false)), { timeoutMs: 60_000, intervalMs: 500 });
    await view.start();
    bench = new Bench(cluster, view);
    await bench.settle();
    const pods = (await cluster.api(k8s.CoreV1Api).listNamespacedPod({ namespace: NS, labelSelector: SELECTOR })).items;
    const probe = pods[0]?.spec?.containers.find((c) => c.name === 'egress');
    console.log(`NAT pods: ${pods.map((p) => `${p.metadata?.name} ${p.status?.podIP} on ${p.spec?.nodeName}`).join('; ')}`);
    console.log(`their egress container: readiness ${JSON.stringify(probe?.readinessProbe)}, liveness ${JSON.stringify(probe?.livenessProbe)}, terminationGracePeriodSeconds ${pods[0]?.spec?.terminationGracePeriodSeconds}`);
    console.log(`lab up in ${((performance.now() - t0) / 1000).toFixed(1)} s, load ${load()}`);
    for (const kind of KINDS.filter((k) => kinds.includes(k))) {
      for (let i = 1; i <= runs; i++) {
        if (kind === 'sigkill') await bench.sigkill(i);
        else if (kind === 'sigstop') await bench.sigstop(i);
        else if (kind === 'graceful') await bench.graceful(i);
        else if (kind === 'scale') await bench.scale(i);
        else await bench.nodeLost(i);
        await bench.settle();
      }
      console.log(`${kind} done, load ${load()}`);
    }
    console.log(`\nSUMMARY (${runs} runs of each kind, load at the end ${load()})\n${table(bench.results, runs)}`);
    if (bench.missing.size) console.log(`not seen within the wait: ${[...bench.missing].map(([m, n]) => `${m} (${n})`).join('; ')}`);
  } finally {
    await tearDown();
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await runBench(FLAGS, main);
