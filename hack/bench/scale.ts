/**
 * Benchmark (not a test): coil's control side against the real control plane at N simulated
 * nodes, for each N of `--nodes` — the growth curve, not one point (docs/performance.md#scale).
 *
 * Per N, a fresh etcd + kube-apiserver + kube-controller-manager (test/envtest/control-plane.ts;
 * KCM's garbage collector removes the BlockRequests of a deleted Node), coil-controller as
 * shipped (hack/image/entrypoint.sh under the name coil-controller: the image's node flags; leader
 * election on; webhooks served and registered, the AddressPool created through them), and N
 * nodes:
 * - Node objects kept Ready by kwok (hack/bench/kwok.ts: its node Stages only — Ready, then a
 *   Lease renewed every 10 s as a kubelet's; no Pod Stage, so kwok never writes a Pod);
 * - per node a coild stand-in (hack/bench/scale-node.ts): coild's cache with coild's selectors,
 *   BlockRequester, NodeIpam, BlockReleaser and NodeGc over the node's own connections;
 * - Pods as API objects bound to the nodes (no containers); each node's stand-in allocates on its
 *   own Pod watch and writes the Pod's IP (kubelet), and frees on delete.
 *
 * Phases, each printed as a table:
 * 1. start: N coilds list and watch at once (time until every cache synced);
 * 2. cold start: every node asks for its first block at once → to `Complete` (seen in the node's
 *    cache) and to the block in the node's cache, p50/p99/max; duplicate and lost blocks; the
 *    apiserver's CPU profile over it, grouped (apiserver-profile.ts). Once per
 *    `--controller-concurrency` value (coil-controller restarted with that
 *    `--blockrequest-max-concurrent-reconciles` before each), so their ratios come from one run;
 * 3. steady churn, after a fill of `--pods-per-node` Pods on every node (fewer when the first
 *    round shows the machine's memory would not hold them; each failed ADD retried by the kubelet
 *    stand-in after 10–15 s, as a kubelet's pod worker does): `--churn-rate` pod creates/deletes per second across the nodes for
 *    `--churn` → BlockRequest latency, ADD latency, API requests per second by verb and resource
 *    (server side: apiserver_request_total; the nodes' own share counted client side), watches
 *    open, coil-controller RSS and CPU;
 * 4. leader handover: coil-controller SIGKILLed under churn and started again (its Lease must
 *    expire first) → time until BlockRequests are answered again; no request answered by two blocks;
 * 5. scale-down: 20 % of the Nodes deleted at once (their coilds stopped first) → time until
 *    every block of theirs is gone; blocks of live nodes touched (must be 0);
 * 6. apiserver restart with every node waiting: the apiserver stopped for `--outage`, every live
 *    node starts an ADD (retried every second as a kubelet would), the apiserver comes back →
 *    time until all are served, LISTs during the recovery, and the retryNow hurry's share of them.
 *
 * Usage: node dist/hack/bench/scale.js [--nodes=100,500,1000] [--churn=60s] [--churn-rate=20] …
 *        (--help lists the flags). Run under `flock /tmp/coil-heavy.lock` on a shared machine.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdir, mkdtemp, open, readdir, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import type { KubeConfig, V1Pod } from '@kubernetes/client-node';
import { connect as http2Connect } from 'node:http2';
import 'reflect-metadata';
import type { AddressBlock } from '../../src/api/v2/addressblock.js';
import { coilCrds } from '../../src/api/v2/crd.js';
import { FIN_COIL, LABEL_NODE, LABEL_REQUEST } from '../../src/api/v2/keys.js';
import { Kinds } from '../../src/api/v2/kinds.js';
import { addEgress } from '../../src/controller/egress-registry.js';
import { addIpam } from '../../src/controller/ipam-registry.js';
import { ApiTransport } from '../../src/runtime/api-transport.js';
import { Client } from '../../src/runtime/client.js';
import { ConfigError } from '../../src/runtime/flags.js';
import { defineFlags } from '../../src/runtime/flag-table.js';
import { runBench } from './bench-flags.js';
import { Informer } from '../../src/runtime/informer.js';
import { silentLogger } from '../../src/runtime/logging.js';
import { Registry } from '../../src/runtime/registry.js';
import { ControlPlane, eventually, freePort, REPO_ROOT } from '../../test/envtest/control-plane.js';
import { registerWebhooks } from '../../test/envtest/controller-support.js';
import { CountingTransport, diff, durationQuantile, rateLines, serverCounts, total, type Counts, type ServerCounts } from './api-counts.js';
import { adminTlsOptions, goBinary, groupProfile, readProfile, takeCpuProfile } from './apiserver-profile.js';
import { KWOK_NODE_ANNOTATION, Kwok } from './kwok.js';
import { SimNode, type SimNodeSettings } from './scale-node.js';
import { coldStartCensus, type Release } from './cold-start-census.js';

const FLAGS = defineFlags('scale', {
  nodes: { kind: 'string', default: '100', help: 'comma-separated node counts, one run each (e.g. 100,500,1000)' },
  phases: { kind: 'string', default: 'cold,churn,handover,scaledown,apiserver', help: 'phases to run after the start, in this order' },
  churn: { kind: 'duration', default: '60s', help: 'length of the steady-churn phase' },
  'churn-rate': { kind: 'int', default: 20, min: 1, help: 'pod creates + deletes per second across all nodes (Kubernetes\' steady-state limit is 20)' },
  'pods-per-node': { kind: 'int', default: 6, min: 1, help: 'mean pods per node the churn hovers around (fewer if the machine\'s memory would not hold them: see the fill)' },
  'fill-timeout': { kind: 'duration', default: '20m', help: 'how long the fill before the churn may take until every Pod has its address' },
  'block-size-bits': { kind: 'int', default: 2, max: 10, help: 'the AddressPool\'s blockSizeBits (small blocks: more BlockRequests per pod)' },
  'low-water-mark': { kind: 'int', default: 1, help: 'coild --low-water-mark of the stand-ins' },
  'cooling-period': { kind: 'duration', default: '30s', help: 'coild --cooling-period of the stand-ins' },
  'block-release-grace': { kind: 'duration', default: '20s', help: 'coild --block-release-grace of the stand-ins' },
  'alloc-timeout': { kind: 'duration', default: '60s', help: 'how long the benchmark\'s ADDs wait for a block (coild: --alloc-timeout 30s; Coil 10s)' },
  'node-gc-interval': { kind: 'duration', default: '5m', help: 'coild --addressblock-gc-interval of the stand-ins' },
  'gc-interval': { kind: 'duration', default: '1h', help: 'coil-controller --gc-interval' },
  outage: { kind: 'duration', default: '10s', help: 'how long the apiserver stays down in the apiserver phase' },
  'start-concurrency': { kind: 'int', default: 100, min: 1, help: 'node stand-ins starting at once' },
  out: { kind: 'string', default: '', help: 'append each run\'s figures as one JSON line to this file' },
  'controller-concurrency': { kind: 'string', default: '', help: 'comma-separated coil-controller --blockrequest-max-concurrent-reconciles values: the cold start runs once per value (the controller restarted with it), the later phases with the first (default: the controller\'s own default)' },
  'profile-seconds': { kind: 'int', default: 0, help: 'length of the apiserver CPU profile taken at each cold start\'s begin (0: N/100 + 5 s, at most --alloc-timeout)' },
  'out-dir': { kind: 'string', default: '', help: 'directory kept for the run\'s files (apiserver CPU profiles); default a new one under the temp dir, printed' },
  'drop-block': { kind: 'int', default: 0, min: 0, help: 'the census\'s own check, with --phases=cold only: after the cold start with this number (1: the first --controller-concurrency value\'s) served every node, stop one node\'s coild stand-in and delete its block, a node that lost its block and cannot ask again, which that cold start must count lost (0: none)' },
});

type Settings = ReturnType<typeof FLAGS.parse>;
const POOL = 'default';
const NS = 'scale';
const SYSTEM_NS = 'kube-system';
/** Nodes whose kubelet stand-ins share one connection (Cluster.kubeletFor): 50 connections at 5,000 nodes. */
const NODES_PER_KUBELET_CONNECTION = 100;

// ---------------------------------------------------------------- small helpers

/** Nearest-rank percentile of `values` (unsorted), NaN when empty. */
function pct(values: readonly number[], q: number): number {
  if (values.length === 0) return NaN;
  const s = [...values].sort((a, b) => a - b);
  return s[Math.max(1, Math.ceil(q * s.length)) - 1]!;
}

function ms(v: number): string {
  return Number.isNaN(v) ? '—' : v >= 10_000 ? `${(v / 1000).toFixed(1)} s` : `${v.toFixed(0)} ms`;
}

function dist(values: readonly number[]): string {
  return `n=${values.length} p50 ${ms(pct(values, 0.5))} p99 ${ms(pct(values, 0.99))} max ${ms(pct(values, 1))}`;
}

/** Runs `fn` over `items` with at most `limit` in flight. */
async function pool<T>(items: readonly T[], limit: number, fn: (item: T, i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, async () => {
    while (next < items.length) {
      const i = next++;
      await fn(items[i]!, i);
    }
  }));
}

const sleep = (t: number) => new Promise((r) => setTimeout(r, t));

/** `fn`, tried again (up to 5 times, 1 s apart) when the loaded apiserver drops the call. */
async function retried<T>(fn: () => Promise<T>): Promise<T> {
  for (let i = 1; ; i++) {
    try {
      return await fn();
    } catch (err) {
      if (i >= 5) throw err;
      await sleep(1000);
    }
  }
}

/** RSS (MB) and CPU seconds (user + system) of `pid`. */
async function procStats(pid: number): Promise<{ rssMb: number; cpuS: number }> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  const rss = Number(/VmRSS:\s+(\d+) kB/.exec(status)![1]) / 1024;
  const stat = (await readFile(`/proc/${pid}/stat`, 'utf8')).split(') ')[1]!.split(' ');
  // Fields 14 and 15 (utime, stime), counted from field 3 after the comm: indices 11 and 12.
  return { rssMb: rss, cpuS: (Number(stat[11]) + Number(stat[12])) / 100 };
}

/** RSS max (MB) and CPU (core) of one process over a sampling window. */
interface ProcFigures {
  rssMax: number;
  rssLast: number;
  cores: number;
}

/**
 * Samples the RSS of each process of `pids` every second until stopped; returns per process its
 * RSS max and last and the cores it used. Resolves once the first sample is taken (the window
 * starts there, not when the event loop, busy with the phase, gets to it); a process restarted
 * meanwhile (a new pid) adds the CPU of each of its lives, a life begun in the window all of it.
 */
async function sampler(pids: () => Record<string, number | undefined> | Promise<Record<string, number | undefined>>): Promise<() => Promise<Record<string, ProcFigures>>> {
  const rss = new Map<string, number[]>();
  const cpu = new Map<string, Map<number, { first: number; last: number }>>();
  let first = true;
  const once = async () => {
    for (const [name, pid] of Object.entries(await pids())) {
      if (!pid) continue;
      try {
        const s = await procStats(pid);
        rss.set(name, [...(rss.get(name) ?? []), s.rssMb]);
        const lives = cpu.get(name) ?? new Map<number, { first: number; last: number }>();
        const life = lives.get(pid) ?? { first: first ? s.cpuS : 0, last: s.cpuS };
        life.last = s.cpuS;
        lives.set(pid, life);
        cpu.set(name, lives);
      } catch { /* restarting */ }
    }
    first = false;
  };
  await once();
  const t0 = performance.now();
  let stopped = false;
  const loop = (async () => {
    while (!stopped) {
      await sleep(1000);
      if (!stopped) await once();
    }
  })();
  return async () => {
    stopped = true;
    await once();
    const secs = (performance.now() - t0) / 1000;
    await loop;
    const out: Record<string, ProcFigures> = {};
    for (const [name, values] of rss) {
      const used = [...(cpu.get(name)?.values() ?? [])].reduce((a, l) => a + l.last - l.first, 0);
      out[name] = { rssMax: Math.max(0, ...values), rssLast: values[values.length - 1] ?? NaN, cores: used / secs };
    }
    return out;
  };
}

/** Sum and count of the controller's blockrequest reconcile time and queue wait (its /metrics). */
async function controllerTimes(port: number): Promise<{ reconcileSum: number; reconcileCount: number; queueSum: number; queueCount: number; workers: number }> {
  // '' (NaN figures) while the controller is not there to answer.
  const text = await fetch(`http://127.0.0.1:${port}/metrics`).then((r) => r.text(), () => '');
  const v = (re: RegExp) => Number(re.exec(text)?.[1] ?? NaN);
  return {
    reconcileSum: v(/^controller_runtime_reconcile_time_seconds_sum\{controller="blockrequest"\} (\S+)$/m),
    reconcileCount: v(/^controller_runtime_reconcile_time_seconds_count\{controller="blockrequest"\} (\S+)$/m),
    queueSum: v(/^workqueue_queue_duration_seconds_sum\{[^}]*controller="blockrequest"[^}]*\} (\S+)$/m),
    queueCount: v(/^workqueue_queue_duration_seconds_count\{[^}]*controller="blockrequest"[^}]*\} (\S+)$/m),
    // The workers the running controller has (its own gauge): the flag as it reached the process.
    workers: v(/^controller_runtime_max_concurrent_reconciles\{controller="blockrequest"\} (\S+)$/m),
  };
}

/** Mean reconcile time and queue wait of the blockrequest controller between two scrapes. */
function meanTimes(before: Awaited<ReturnType<typeof controllerTimes>>, b: Awaited<ReturnType<typeof controllerTimes>>): string {
  const m = meanFigures(before, b);
  return `${Number.isNaN(b.workers) ? '' : `${b.workers} workers: `}${m.reconciles} reconciles, mean ${m.reconcileMeanMs.toFixed(0)} ms each after a mean ${m.queueMeanMs.toFixed(0)} ms in the queue`;
}

/** {@link meanTimes} as numbers (ms). */
function meanFigures(before: Awaited<ReturnType<typeof controllerTimes>>, b: Awaited<ReturnType<typeof controllerTimes>>): { reconciles: number; reconcileMeanMs: number; queueMeanMs: number } {
  // Before its first reconcile the controller exports no series for it: zero.
  const a = Object.fromEntries(Object.entries(before).map(([k, v]) => [k, Number.isNaN(v) ? 0 : v])) as typeof before;
  const r = (b.reconcileSum - a.reconcileSum) / (b.reconcileCount - a.reconcileCount);
  const q = (b.queueSum - a.queueSum) / (b.queueCount - a.queueCount);
  return { reconciles: b.reconcileCount - a.reconcileCount, reconcileMeanMs: r * 1000, queueMeanMs: q * 1000 };
}

/**
 * The apiserver's SETTINGS_MAX_CONCURRENT_STREAMS: calls one HTTP/2 connection carries at once
 * (the rest wait for a stream), read from a connection of the admin's credentials.
 */
async function apiserverMaxStreams(kc: KubeConfig): Promise<number | undefined> {
  const session = http2Connect(kc.getCurrentCluster()!.server, adminTlsOptions(kc));
  try {
    return await new Promise<number | undefined>((resolve, reject) => {
      session.once('remoteSettings', (st) => resolve(st.maxConcurrentStreams));
      session.once('error', reject);
      setTimeout(() => resolve(undefined), 10_000).unref();
    });
  } catch {
    return undefined;
  } finally {
    session.close();
  }
}

/** Pids of the control plane's processes, found by their command lines. */
async function planePids(cp: ControlPlane): Promise<Record<'apiserver' | 'etcd' | 'kcm', number | undefined>> {
  const out: Record<'apiserver' | 'etcd' | 'kcm', number | undefined> = { apiserver: undefined, etcd: undefined, kcm: undefined };
  for (const d of await readdir('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    const cmd = await readFile(`/proc/${d}/cmdline`, 'utf8').catch(() => '');
    if (cmd.includes('kube-apiserver') && cmd.includes(`--secure-port=${cp.apiPort}`)) out.apiserver = Number(d);
    else if (cmd.includes('etcd') && cmd.includes(`--listen-client-urls=${cp.etcdEndpoint}`)) out.etcd = Number(d);
    else if (cmd.includes('kube-controller-manager') && cmd.includes(cp.kubeconfigPath)) out.kcm = Number(d);
  }
  return out;
}

/** CPU seconds used by each process of the run between {@link start} and {@link stop}. */
class CpuWindow {
  private before = new Map<string, number>();
  private t0 = 0;
  private self0 = process.cpuUsage();

  constructor(private readonly cp: ControlPlane, private readonly ownPids: () => Record<string, number | undefined>) {}

  private async read(): Promise<Map<string, number>> {
    const pids = { ...(await planePids(this.cp)), ...this.ownPids() };
    const out = new Map<string, number>();
    for (const [k, pid] of Object.entries(pids)) if (pid) out.set(k, await procStats(pid).then((x) => x.cpuS, () => NaN));
    return out;
  }

  async start(): Promise<void> {
    this.before = await this.read();
    this.t0 = performance.now();
    this.self0 = process.cpuUsage();
  }

  /** Cores used by each (a process restarted meanwhile counts from its start) and by this process (the stand-ins). */
  async stop(): Promise<string> {
    const after = await this.read();
    const secs = (performance.now() - this.t0) / 1000;
    const self = process.cpuUsage(this.self0);
    const parts = [...after].map(([k, v]) => `${k} ${((v - (this.before.get(k) ?? 0) > 0 && this.before.has(k) ? v - this.before.get(k)! : v) / secs).toFixed(2)}`);
    parts.push(`stand-ins (this process) ${((self.user + self.system) / 1e6 / secs).toFixed(2)}`);
    return `${parts.join(', ')} core; load average ${loadavg()[0]!.toFixed(1)}`;
  }
}

// ---------------------------------------------------------------- the cluster

/** coil-controller as shipped: the image's entrypoint script under the name coil-controller. */
class Controller {
  proc: ChildProcess | undefined;
  readonly ports = { metrics: 0, health: 0, webhook: 0 };
  private starts = 0;
  /** Exits the benchmark did not cause (e.g. the Lease lost while the apiserver was down), each restarted after 1 s as its Deployment's kubelet would. */
  readonly exits: { at: number; code: number | null; signal: string | null }[] = [];
  private killing = false;
  private stopped = false;
  /** Stops that did not end within the grace period and were SIGKILLed (kill). */
  readonly hung: { at: number; signal: string }[] = [];
  /** `--blockrequest-max-concurrent-reconciles` of its next start; undefined: the controller's default. */
  concurrency: number | undefined;

  constructor(private readonly cp: ControlPlane, private readonly dir: string, private readonly settings: Settings) {}

  async prepare(): Promise<void> {
    this.ports.metrics = await freePort();
    this.ports.health = await freePort();
    this.ports.webhook = await freePort();
    await symlink(join(REPO_ROOT, 'hack/image/entrypoint.sh'), join(this.dir, 'coil-controller'));
    const cert = await this.cp.newServingCert();
    await writeFile(join(this.dir, 'tls.crt'), cert.certPem);
    await writeFile(join(this.dir, 'tls.key'), cert.keyPem, { mode: 0o600 });
  }

  async start(): Promise<void> {
    const env: NodeJS.ProcessEnv = { ...process.env, NODE_ENV: 'production', COIL_ROOT: REPO_ROOT, PATH: `${dirname(process.execPath)}:${process.env.PATH ?? ''}` };
    for (const k of Object.keys(env)) if (k === 'NODE_OPTIONS' || k.startsWith('MALLOC_')) delete env[k];
    const log = await open(join(this.dir, `controller-${++this.starts}.log`), 'w');
    this.proc = spawn(join(this.dir, 'coil-controller'), [
      `--kubeconfig=${this.cp.kubeconfigPath}`,
      `--cert-dir=${this.dir}`,
      `--webhook-addr=127.0.0.1:${this.ports.webhook}`,
      `--metrics-addr=127.0.0.1:${this.ports.metrics}`,
      `--health-addr=127.0.0.1:${this.ports.health}`,
      '--secure-endpoints=false',
      `--leader-election-namespace=${SYSTEM_NS}`,
      `--gc-interval=${this.settings['gc-interval']}ms`,
      '--log-level=info',
      ...(this.concurrency === undefined ? [] : [`--blockrequest-max-concurrent-reconciles=${this.concurrency}`]),
    ], { env, stdio: ['ignore', log.fd, log.fd] });
    const proc = this.proc;
    proc.once('exit', (code, signal) => {
      void log.close();
      if (this.killing || this.stopped || this.proc !== proc) return;
      this.exits.push({ at: performance.now(), code, signal });
      setTimeout(() => void (this.stopped || this.proc !== proc ? undefined : this.start()), 1000);
    });
  }

  async ready(): Promise<void> {
    await eventually(async () => (await fetch(`http://127.0.0.1:${this.ports.health}/readyz`)).status === 200, { timeoutMs: 180_000, intervalMs: 200 });
  }

  /** Waits until this process holds the Lease (its `leader_election_master_status` is 1). */
  async leading(): Promise<void> {
    await eventually(async () => /^leader_election_master_status\{[^}]*\} 1$/m.test(await (await fetch(`http://127.0.0.1:${this.ports.metrics}/metrics`)).text()), { timeoutMs: 180_000, intervalMs: 200 });
  }

  /**
   * Stops it cleanly (SIGTERM: it releases its Lease) and starts it again with `concurrency`;
   * resolves once the new one is ready and leads.
   */
  async restartWith(concurrency: number | undefined): Promise<void> {
    await this.kill('SIGTERM');
    this.concurrency = concurrency;
    await this.start();
    await this.ready();
    await this.leading();
  }

  /** Kills it (the benchmark's doing: not restarted); `final` also stops any restart for good. */
  async kill(signal: NodeJS.Signals = 'SIGKILL', final = false): Promise<void> {
    if (final) this.stopped = true;
    const p = this.proc;
    if (!p || p.exitCode !== null || p.signalCode !== null) return;
    this.killing = true;
    const exited = new Promise((r) => p.once('exit', r));
    p.kill(signal);
    // A process that has not exited by its grace period (the controller's --graceful-shutdown, 20 s,
    // plus 5 s) is SIGKILLed, as the kubelet does after terminationGracePeriodSeconds: seen once on
    // Node 24, a process.exit after "manager stopped" that never ended (the main thread joining a V8
    // worker that waited for a GC).
    const grace = signal === 'SIGKILL' ? undefined : setTimeout(() => {
      this.hung.push({ at: performance.now(), signal });
      p.kill('SIGKILL');
    }, 25_000);
    await exited;
    clearTimeout(grace);
    this.killing = false;
  }

  /** Warnings and errors in all of its logs so far, by message. */
  async warnings(): Promise<Map<string, number>> {
    const out = new Map<string, number>();
    for (let i = 1; i <= this.starts; i++) {
      const text = await readFile(join(this.dir, `controller-${i}.log`), 'utf8').catch(() => '');
      for (const line of text.split('\n')) {
        if (!line.startsWith('{')) continue;
        try {
          const r = JSON.parse(line) as { level: number; msg: string; err?: { message?: string } };
          if (r.level < 40) continue;
          const key = `${r.msg}${r.err?.message ? `: ${r.err.message.replace(/req-[\w.-]+/g, 'req-…').slice(0, 120)}` : ''}`;
          out.set(key, (out.get(key) ?? 0) + 1);
        } catch { /* not a log record */ }
      }
    }
    return out;
  }
}

/** Everything of one run. */
class Cluster {
  readonly nodes = new Map<string, SimNode>();
  readonly nodeCounts: Counts = new Map();
  /** Watch events the stand-ins' caches delivered, by kind. */
  readonly watchEvents: Counts = new Map();
  readonly messages = new Map<string, number>();
  /** retryNow hurries: informers listed again because an ADD waited. */
  hurriedLists = 0;
  readonly events = { created: [] as { node: string; at: number; ms: number }[], answered: [] as { node: string; at: number; ms: number; result: string }[], added: [] as { at: number; ms: number }[], addFailed: [] as { at: number; err: string }[], addRetried: 0, released: new Set<string>(), releases: [] as Release[] };
  /**
   * The kubelet stand-ins' connections (their Pod status writes), one per
   * {@link NODES_PER_KUBELET_CONNECTION} nodes: over one HTTP/2 connection at most the apiserver's
   * SETTINGS_MAX_CONCURRENT_STREAMS calls run at once, the rest wait for a stream, so one
   * connection for every kubelet would make 30,000 status writes queue behind each other.
   */
  private readonly kubelets: Client[] = [];
  /** Pods per node (what the benchmark created and has not deleted). */
  readonly pods = new Map<string, string[]>();
  blocks!: Informer<AddressBlock>;
  kwok!: Kwok;
  controller!: Controller;
  client!: Client;
  /** The census's lists of every AddressBlock (blockCensus): their own connection, a 180 s timeout. */
  censusClient!: Client;
  transport!: ApiTransport;
  private podSeq = 0;
  /** Pods per node the churn hovers around: `--pods-per-node`, or fewer when the fill found the machine's memory short (fill). */
  podsPerNode: number;

  constructor(readonly cp: ControlPlane, readonly dir: string, readonly n: number, readonly s: Settings) {
    this.podsPerNode = s['pods-per-node'];
  }

  /** The processes of the run besides the control plane's (planePids): coil-controller and kwok. */
  pids(): Record<string, number | undefined> {
    return { controller: this.controller.proc?.pid, kwok: this.kwok?.pid };
  }

  /** Pods the benchmark created and has not deleted. */
  podCount(): number {
    return [...this.pods.values()].reduce((a, l) => a + l.length, 0);
  }

  count(msg: string, rec?: { informers?: unknown[] }): void {
    this.messages.set(msg, (this.messages.get(msg) ?? 0) + 1);
    if (rec?.informers) this.hurriedLists += rec.informers.length;
  }

  nodeSettings(): SimNodeSettings {
    const s = this.s;
    return {
      pool: POOL, allocTimeoutMs: s['alloc-timeout'], coolingMs: s['cooling-period'], blockReleaseGraceMs: s['block-release-grace'],
      lowWaterMark: s['low-water-mark'], gcIntervalMs: s['node-gc-interval'], namespace: SYSTEM_NS,
    };
  }

  /** The kubelet connection of the `i`-th node. */
  kubeletFor(i: number): Client {
    const k = Math.floor(i / NODES_PER_KUBELET_CONNECTION);
    while (this.kubelets.length <= k) this.kubelets.push(new Client(new ApiTransport(this.cp.kubeConfig), 'kubelet'));
    return this.kubelets[k]!;
  }

  /** Connections the kubelet stand-ins write over. */
  get kubeletConnections(): number {
    return this.kubelets.length;
  }

  newNode(name: string, i: number): SimNode {
    const t = new CountingTransport(this.cp.kubeConfig, this.nodeCounts);
    const ev = this.events;
    return new SimNode(name, t, this.nodeSettings(), {
      onAnswered: (node, result, ms) => ev.answered.push({ node, at: performance.now(), ms, result }),
      onReleased: (node, names) => {
        names.forEach((b) => ev.released.add(b));
        ev.releases.push({ node, at: performance.now() });
      },
      onAdded: (_node, _pod, ms) => ev.added.push({ at: performance.now(), ms }),
      onWatchEvent: (kind) => this.watchEvents.set(kind, (this.watchEvents.get(kind) ?? 0) + 1),
      onAddFailed: (_node, _pod, err) => ev.addFailed.push({ at: performance.now(), err: String((err as Error)?.message ?? err).slice(0, 100) }),
      onAddRetried: () => ev.addRetried++,
    }, (msg, rec) => this.count(msg, rec as { informers?: unknown[] }), this.kubeletFor(i));
  }

  /** Creates a Pod on `node` (bound: no scheduler). */
  async createPod(node: string): Promise<void> {
    const name = `p${++this.podSeq}-${node}`;
    const list = this.pods.get(node) ?? [];
    list.push(name);
    this.pods.set(node, list);
    await this.client.create(Kinds.Pod, { metadata: { name, namespace: NS }, spec: { nodeName: node, containers: [{ name: 'c', image: 'none' }] } } as V1Pod).catch(() => {
      list.splice(list.indexOf(name), 1);
    });
  }

  /** Deletes a random Pod of `node` at once (no kubelet confirms a graceful delete here). */
  async deletePod(node: string): Promise<void> {
    const list = this.pods.get(node) ?? [];
    if (list.length === 0) return;
    const name = list.splice(Math.floor(Math.random() * list.length), 1)[0]!;
    await this.transport.request({ method: 'DELETE', path: `/api/v1/namespaces/${NS}/pods/${name}`, body: { gracePeriodSeconds: 0 } }).catch(() => undefined);
  }

  /** Churn at `rate` ops/s across the live nodes until `signal` aborts. */
  async churn(rate: number, signal: AbortSignal): Promise<number> {
    const target = this.podsPerNode;
    const names = () => [...this.nodes.keys()];
    let ops = 0;
    const inflight = new Set<Promise<void>>();
    const t0 = performance.now();
    while (!signal.aborted) {
      const all = names();
      const node = all[Math.floor(Math.random() * all.length)]!;
      const have = this.pods.get(node)?.length ?? 0;
      const create = have === 0 || (have < 2 * target && Math.random() < 0.5 + (target - have) / (4 * target));
      const p = (create ? this.createPod(node) : this.deletePod(node)).finally(() => inflight.delete(p));
      inflight.add(p);
      ops++;
      const due = t0 + (ops * 1000) / rate;
      const wait = due - performance.now();
      if (wait > 0) await sleep(wait);
    }
    await Promise.all(inflight);
    return ops;
  }
}

// ---------------------------------------------------------------- one run

interface RunFigures {
  n: number;
  [k: string]: unknown;
}

/** Stops what a run started when the benchmark is interrupted (Ctrl-C, SIGTERM, timeout). */
let cleanup: (() => Promise<void>) | undefined;
for (const sig of ['SIGINT', 'SIGTERM'] as const) {
  process.once(sig, () => {
    console.error(`${sig}: stopping the control plane and the controller`);
    void (cleanup?.() ?? Promise.resolve()).finally(() => process.exit(130));
  });
}

async function run(n: number, s: Settings): Promise<RunFigures> {
  const fig: RunFigures = { n };
  const dir = await mkdtemp(join(tmpdir(), 'coil-scale-'));
  const cp = await ControlPlane.start({ crds: coilCrds(), controllerManager: true });
  cleanup = async () => {
    await c.controller?.kill('SIGKILL', true);
    await c.kwok?.stop();
    await cp.stop();
    await rm(dir, { recursive: true, force: true });
  };
  const c = new Cluster(cp, dir, n, s);
  const adminTransport = new ApiTransport(cp.kubeConfig);
  c.transport = adminTransport;
  c.client = new Client(adminTransport, 'scale-bench');
  c.censusClient = new Client(new ApiTransport(cp.kubeConfig, { requestTimeoutMs: 180_000 }), 'scale-census');
  const client = c.client;
  const print = (title: string, rows: [string, string][]) => {
    console.log(`\n### N=${n}: ${title}`);
    console.log('| figure | value |\n|---|---|');
    for (const [k, v] of rows) console.log(`| ${k} | ${v} |`);
  };
  try {
    // --- control side
    c.controller = new Controller(cp, dir, s);
    c.controller.concurrency = concurrencies(s)[0];
    await c.controller.prepare();
    const registry = addEgress(addIpam(new Registry(), { addressPool: false, blockRequest: false, gc: false }), { egress: false, access: false });
    await registerWebhooks(cp, registry, c.controller.ports.webhook, 'coilv2');
    await c.controller.start();
    await c.controller.ready();
    await client.create(Kinds.AddressPool, { metadata: { name: POOL }, spec: { blockSizeBits: s['block-size-bits'], subnets: [{ ipv4: '10.128.0.0/9' }] } });
    await client.create(Kinds.Namespace, { metadata: { name: NS } });

    // --- nodes: objects, made Ready and kept so (Lease) by kwok
    const names = Array.from({ length: n }, (_, i) => `node-${String(i).padStart(5, '0')}`);
    c.kwok = new Kwok(cp.kubeconfigPath, dir);
    await c.kwok.start();
    const tNodes = performance.now();
    await pool(names, 32, async (name) => {
      await retried(() => client.create(Kinds.Node, { metadata: { name, labels: { 'kubernetes.io/hostname': name }, annotations: { [KWOK_NODE_ANNOTATION.key]: KWOK_NODE_ANNOTATION.value } } }));
    });
    const createdS = (performance.now() - tNodes) / 1000;
    const kwokNodes = async () => {
      const ready = (await retried(() => client.list(Kinds.Node))).filter((x) => x.status?.conditions?.some((k) => k.type === 'Ready' && k.status === 'True')).length;
      const leases = (await retried(() => client.list(Kinds.Lease, { namespace: 'kube-node-lease' }))).length;
      return { ready, leases };
    };
    await eventually(async () => {
      const k = await kwokNodes();
      return k.ready === n && k.leases === n;
    }, { timeoutMs: 600_000, intervalMs: 2000 }).catch(async (err) => {
      throw new Error(`kwok did not make the ${n} Nodes Ready with a Lease (${JSON.stringify(await kwokNodes())}): ${String(err)}\n${await c.kwok.tail()}`);
    });
    const nodesS = (performance.now() - tNodes) / 1000;

    // Observer of every block (one more watch on the apiserver, the benchmark's).
    c.blocks = new Informer(Kinds.AddressBlock, new ApiTransport(cp.kubeConfig), silentLogger());
    c.blocks.onEvent((e) => {
      if (e.type !== 'ADDED') return;
      const node = e.object.metadata?.labels?.[LABEL_NODE] ?? '';
      const sent = c.nodes.get(node)?.client.sentAt.get(e.object.metadata?.labels?.[LABEL_REQUEST] ?? '');
      const at = performance.now();
      c.events.created.push({ node, at, ms: sent === undefined ? NaN : at - sent });
    });
    c.blocks.start();
    await c.blocks.waitForSync();

    // --- phase: start (N coilds list and watch)
    const before0 = await serverCounts(cp);
    const tStart = performance.now();
    const startRes = await processSampler(c);
    const syncMs: number[] = [];
    await pool(names, s['start-concurrency'], async (name, i) => {
      const node = c.newNode(name, i);
      c.nodes.set(name, node);
      const t0 = performance.now();
      await node.start();
      syncMs.push(performance.now() - t0);
    });
    const startS = (performance.now() - tStart) / 1000;
    const after0 = await serverCounts(cp);
    const maxStreams = await apiserverMaxStreams(cp.kubeConfig);
    const startResources = await startRes('start', print);
    fig.start = { kubeletConnections: c.kubeletConnections, maxStreams, nodesCreatedS: createdS, nodesReadyS: nodesS, allSyncedS: startS, syncP50: pct(syncMs, 0.5), syncP99: pct(syncMs, 0.99), watches: after0.watches, resources: startResources };
    print('start', [
      ['Node objects created (32 at a time), then all Ready with a Lease by kwok', `${createdS.toFixed(1)} s, ${nodesS.toFixed(1)} s`],
      [`coild stand-ins started, ${s['start-concurrency']} at a time, until every cache synced`, `${startS.toFixed(1)} s (per node ${dist(syncMs)})`],
      ['watches open (apiserver)', `${after0.watches} (${(after0.watches / n).toFixed(1)} per node)`],
      ['kubelet stand-ins\' connections (Pod status writes), the apiserver\'s HTTP/2 streams per connection', `${c.kubeletConnections} (${NODES_PER_KUBELET_CONNECTION} nodes each), ${maxStreams ?? 'unknown'}`],
      ['LISTs during the start (apiserver)', `${total(diff(after0.requests, before0.requests), /^LIST /)}`],
    ]);

    const phases: Record<string, (c: Cluster, print: Print) => Promise<object>> = { cold: (cc, p) => coldStart(cc, p, outDir, 1), churn: steadyChurn, handover, scaledown: scaleDown, apiserver: apiserverRestart };
    for (const phase of s.phases.split(',').map((p) => p.trim()).filter(Boolean)) {
      if (!phases[phase]) throw new ConfigError(`--phases: unknown phase ${phase}`);
      if (phase === 'cold') {
        Object.assign(fig, await coldStarts(c, print, outDir));
        continue;
      }
      const res = await processSampler(c);
      fig[phase] = await phases[phase](c, print);
      Object.assign(fig[phase] as object, { resources: await res(phase, print) });
    }
    const warnings = await c.controller.warnings();
    fig.controllerWarnings = Object.fromEntries(warnings);
    if (c.controller.hung.length > 0) warnings.set(`did not exit within 25 s of ${c.controller.hung.map((h) => h.signal).join(', ')}: SIGKILLed`, c.controller.hung.length);
    print('coil-controller warnings and errors over the whole run', [...warnings].sort((a, b) => b[1] - a[1]).slice(0, 12).map(([k, v]) => [k.replace(/\|/g, '/'), String(v)]));
    const nodeWarn = [...c.messages].filter(([k]) => !/^(requested a new address block|block request answered|an ADD waits)/.test(k)).sort((a, b) => b[1] - a[1]).slice(0, 12);
    print('coild stand-ins: other log messages (info and above)', nodeWarn.map(([k, v]) => [k, String(v)]));
    return fig;
  } finally {
    await c.kwok?.stop();
    await Promise.allSettled([...c.nodes.values()].map((x) => x.stop()));
    await c.blocks?.stop();
    await c.controller?.kill('SIGTERM', true);
    await cp.stop();
    if (!process.env.COIL_SCALE_KEEP) await rm(dir, { recursive: true, force: true });
  }
}

type Print = (title: string, rows: [string, string][]) => void;

/**
 * Samples every process of the run during one phase; its stop prints and returns the Pods alive
 * at the end and each process's RSS max and cores (kwok apart: a cost the real cluster has not).
 */
async function processSampler(c: Cluster): Promise<(phase: string, print: Print) => Promise<object>> {
  const stop = await sampler(async () => ({ ...c.pids(), ...(await planePids(c.cp)), 'bench (stand-ins)': process.pid }));
  return async (phase, print) => {
    const procs = await stop();
    const pods = c.podCount();
    const row = (label: string, key: string): [string, string] => {
      const p = procs[key];
      return [label, p ? `${p.rssMax.toFixed(0)} MB, ${p.cores.toFixed(3)} core` : '—'];
    };
    print(`${phase}: Pods and processes (RSS max, CPU over the phase)`, [
      ['Pods on the live nodes at the end of the phase (the benchmark\'s; coil-controller caches every live Pod)', String(pods)],
      row('coil-controller', 'controller'),
      row('kube-apiserver', 'apiserver'),
      row('etcd', 'etcd'),
      row('kube-controller-manager', 'kcm'),
      row('kwok (the Nodes\' heartbeats: not a cost of a real cluster)', 'kwok'),
      row('the benchmark (every coild stand-in)', 'bench (stand-ins)'),
    ]);
    return { pods, ...procs };
  };
}

/** Watchers the apiserver terminated between two scrapes, by resource. */
function terminatedText(after: ServerCounts, before: ServerCounts): string {
  const d = diff(after.terminated, before.terminated);
  return total(d) === 0 ? '0' : [...d].sort((a, b) => b[1] - a[1]).map(([k, v]) => `${k} ${v}`).join(', ');
}

/** Mutating calls (the SLO's: p99 ≤ 1 s), all and coil's kinds only. */
const MUTATING = /^(POST|PUT|PATCH|DELETE|APPLY) /;
const NOT_WATCH = /^(?!WATCH)/;
const MUTATING_COIL = /^(POST|PUT|PATCH|DELETE|APPLY) (addressblocks|blockrequests|addresspools)/;

/** Blocks of the observer cache by node, and requests answered by more than one block. */
async function blockCensus(c: Cluster): Promise<{ byNode: Map<string, AddressBlock[]>; doubled: number; total: number }> {
  const byNode = new Map<string, AddressBlock[]>();
  const byReq = new Map<string, number>();
  // A fresh list, not the benchmark's own watch: at 2,000 nodes the apiserver closes that watcher
  // too in the cold start, and its cache lagged by hundreds of blocks when read.
  // Its own connection with a long timeout: at N=2,000 on a loaded machine one list of every
  // block took the apiserver more than the transport's default 30 s, five times in a row.
  const all = await retried(() => c.censusClient.list(Kinds.AddressBlock));
  for (const b of all) {
    const node = b.metadata?.labels?.[LABEL_NODE] ?? '';
    byNode.set(node, [...(byNode.get(node) ?? []), b]);
    const req = b.metadata?.labels?.[LABEL_REQUEST];
    if (req) byReq.set(req, (byReq.get(req) ?? 0) + 1);
  }
  return { byNode, doubled: [...byReq.values()].filter((v) => v > 1).length, total: all.length };
}

/**
 * That kwok left every Pod to coil (hack/bench/kwok.ts): Pods with a kwok field manager, and Pods
 * whose IP is not the one their node's stand-in allocated and wrote; both must be 0. Nodes with a
 * kwok field manager show kwok did manage the Nodes.
 */
async function kwokCheck(c: Cluster): Promise<{ pods: number; podsByKwok: number; podsWithOtherIp: number; nodesByKwok: number }> {
  const byKwok = (o: { metadata?: { managedFields?: { manager?: string }[] } }) => o.metadata?.managedFields?.some((f) => /kwok/i.test(f.manager ?? '')) ?? false;
  const pods = await retried(() => c.client.list(Kinds.Pod, { namespace: NS }));
  let otherIp = 0;
  for (const pod of pods) {
    const ip = pod.status?.podIP;
    if (!ip) continue;
    const mine = c.nodes.get(pod.spec?.nodeName ?? '')?.ipam.lookup(pod.metadata!.uid!, 'eth0')?.ipv4;
    if (mine !== ip) otherIp++;
  }
  const nodes = await retried(() => c.client.list(Kinds.Node));
  return { pods: pods.length, podsByKwok: pods.filter(byKwok).length, podsWithOtherIp: otherIp, nodesByKwok: nodes.filter(byKwok).length };
}

/** `--controller-concurrency` as numbers; [undefined] for the controller's default. */
function concurrencies(s: Settings): (number | undefined)[] {
  if (!s['controller-concurrency'].trim()) return [undefined];
  const values = s['controller-concurrency'].split(',').map((x) => x.trim());
  if (values.some((x) => !/^\d+$/.test(x) || Number(x) < 1 || Number(x) > 1024)) throw new ConfigError(`--controller-concurrency: expected integers in [1, 1024], got ${JSON.stringify(s['controller-concurrency'])}`);
  return values.map(Number);
}

/**
 * The cold start once per `--controller-concurrency` value, coil-controller restarted with it
 * before (SIGTERM, so it releases its Lease and the new one leads at once). Between two, the
 * benchmark waits until the nodes released the blocks of the last one (empty blocks go after
 * max(grace, cooling)) so that each starts from the same state; the later phases run with the
 * first value. `cold` in the figures is the first value's, `coldByConcurrency` all.
 */
async function coldStarts(c: Cluster, print: Print, outDir: string): Promise<{ cold: object; coldByConcurrency?: Record<string, object> }> {
  const values = concurrencies(c.s);
  const by: Record<string, object> = {};
  for (const [i, v] of values.entries()) {
    if (v !== c.controller.concurrency) await c.controller.restartWith(v);
    const res = await processSampler(c);
    const f = await coldStart(c, print, outDir, i + 1);
    Object.assign(f, { concurrency: v ?? 'default', resources: await res(`cold (concurrency ${v ?? 'default'})`, print) });
    by[String(v ?? 'default')] = f;
    if (i < values.length - 1) await blocksSettled(c);
  }
  if (values.length > 1 && c.controller.concurrency !== values[0]) await c.controller.restartWith(values[0]);
  return { cold: by[String(values[0] ?? 'default')]!, ...(values.length > 1 ? { coldByConcurrency: by } : {}) };
}

/** Waits out the nodes' release of the empty blocks a cold start gave them: max(grace, cooling) + 5 s, then until the block count held for 5 s. */
async function blocksSettled(c: Cluster): Promise<void> {
  const t0 = performance.now();
  await sleep(Math.max(c.s['block-release-grace'], c.s['cooling-period']) + 5000);
  let last = -1;
  let since = performance.now();
  await eventually(() => {
    const n = c.blocks.list().length;
    if (n !== last) {
      last = n;
      since = performance.now();
    }
    return performance.now() - since >= 5000;
  }, { timeoutMs: 600_000, intervalMs: 500 }).catch(() => undefined);
  console.log(`\n(waited ${((performance.now() - t0) / 1000).toFixed(0)} s for the nodes to release the cold start's blocks: ${last} blocks left)`);
}

/** Seconds of the cold start's apiserver profile: `--profile-seconds`, else N/100 + 5, at most the ADDs' timeout. */
function profileSeconds(c: Cluster): number {
  return c.s['profile-seconds'] || Math.min(Math.ceil(c.n / 100) + 5, Math.ceil(c.s['alloc-timeout'] / 1000));
}

/** Takes the apiserver's CPU profile over the cold start into `file` and prints it grouped; never throws (a note instead). */
async function apiserverProfile(c: Cluster, seconds: number, file: string, print: Print, title: string): Promise<object> {
  try {
    await takeCpuProfile(c.cp.kubeConfig, seconds, file);
  } catch (err) {
    console.log(`\n(no apiserver CPU profile: ${(err as Error).message})`);
    return { error: (err as Error).message };
  }
  const go = goBinary();
  if (!go) {
    console.log(`\n(apiserver CPU profile kept in ${file}; no Go toolchain here to read it: /usr/local/go/bin/go or go on PATH)`);
    return { file };
  }
  try {
    const p = await readProfile(go, file);
    const groups = groupProfile(p);
    print(`${title}: the apiserver's CPU profile, first ${seconds} s (${p.totalS.toFixed(1)} CPU-s sampled = ${(p.totalS / seconds).toFixed(2)} core; ${file})`, groups.map((g) => [
      g.name, `${g.flatPct.toFixed(1)} % as leaf${g.cumPct === undefined ? '' : `, ${g.cumPct.toFixed(1)} % under its entry point`}${g.top.length ? ` (${g.top.join(', ')})` : ''}`,
    ]));
    return { file, totalS: p.totalS, seconds, groups: Object.fromEntries(groups.map((g) => [g.name, { flatPct: g.flatPct, cumPct: g.cumPct }])) };
  } catch (err) {
    console.log(`\n(apiserver CPU profile kept in ${file}, not read: ${(err as Error).message})`);
    return { file, error: (err as Error).message };
  }
}

/** One cold start, the `nth` of the run (1-based; `--drop-block` names one). */
async function coldStart(c: Cluster, print: Print, outDir: string, nth: number): Promise<object> {
  const label = `concurrency ${c.controller.concurrency ?? 'default'}`;
  const profSeconds = profileSeconds(c);
  const profiling = apiserverProfile(c, profSeconds, join(outDir, `apiserver-cold-n${c.n}-c${c.controller.concurrency ?? 'default'}.pprof`), print, `cold start, ${label}`);
  const before = await serverCounts(c.cp);
  const cpu = new CpuWindow(c.cp, () => c.pids());
  await cpu.start();
  const times0 = await controllerTimes(c.controller.ports.metrics);
  const firstComplete = new Map<string, number>();
  const mark = c.events.created.length;
  const t0 = performance.now();
  const outcomes = await Promise.all([...c.nodes.values()].map(async (node) => {
    try {
      const o = await node.requestBlock(c.s['alloc-timeout']);
      return { node: node.name, kind: o.kind, ms: performance.now() - t0 };
    } catch (err) {
      return { node: node.name, kind: `error ${(err as Error).message.slice(0, 60)}`, ms: performance.now() - t0 };
    }
  }));
  const wallMs = performance.now() - t0;
  const cpuText = await cpu.stop();
  const times1 = await controllerTimes(c.controller.ports.metrics);
  const timesText = meanTimes(times0, times1);
  for (const e of c.events.created.slice(mark)) if (!firstComplete.has(e.node)) firstComplete.set(e.node, e.at - t0);
  const dropped = c.s['drop-block'] === nth ? await dropOneBlock(c) : undefined;
  await sleep(2000);
  const census = await blockCensus(c);
  const after = await serverCounts(c.cp);
  const inCache = outcomes.filter((o) => o.kind === 'allocated').map((o) => o.ms);
  const notAllocated = outcomes.filter((o) => o.kind !== 'allocated');
  const kinds = new Map<string, number>();
  for (const o of notAllocated) kinds.set(o.kind, (kinds.get(o.kind) ?? 0) + 1);
  // Releases of this cold start only: each earlier one ends with every node releasing its block.
  // Nodes not served within the wait are late (the "not served" row), not lost.
  const served = new Set(outcomes.filter((o) => o.kind === 'allocated').map((o) => o.node));
  const { duplicates: dup, lost: missing, unserved, releasedOwn } = coldStartCensus(c.nodes.keys(), (n) => served.has(n), (n) => census.byNode.get(n)?.length ?? 0, c.events.releases, t0);
  const completeMs = [...firstComplete.values()];
  const over10 = inCache.filter((v) => v > 10_000).length;
  const d = diff(after.requests, before.requests);
  print(`cold start (${c.nodes.size} nodes ask for a block at once; coil-controller --blockrequest-max-concurrent-reconciles: ${c.controller.concurrency ?? 'its default'})`, [
    ['to the answer (its AddressBlock created; the bench\'s watch)', dist(completeMs)],
    ['to the block in the node\'s cache', dist(inCache)],
    ['all served after', ms(wallMs)],
    ['not served', notAllocated.length === 0 ? '0' : [...kinds].map(([k, v]) => `${v} ${k}`).join(', ')],
    ['served after more than 10 s (Coil\'s alloc timeout)', String(over10)],
    ['nodes with more than one block (duplicates)', String(dup)],
    ['nodes served a block and without one now (lost; not counting those that released their empty block after the grace in this cold start)', `${missing}${releasedOwn ? ` (${releasedOwn} released their own)` : ''}${unserved ? ` (${unserved} not served and without a block: late)` : ''}${dropped ? ` (--drop-block: ${dropped} deleted by the bench)` : ''}`],
    ['requests answered by two blocks', String(census.doubled)],
    ['API requests during the phase (apiserver)', `${total(d)}: ${rateLines(d, 1, 1).slice(0, 6).map((l) => l.replace(/\s+/g, ' ').replace('/s', '')).join('; ')}`],
    ['apiserver\'s own latency of coil\'s mutating calls, p50 / p99 (bucket bound)', `${durationQuantile(after, before, MUTATING_COIL, 0.5)} / ${durationQuantile(after, before, MUTATING_COIL, 0.99)} s`],
    ['watchers the apiserver closed for falling behind (apiserver_terminated_watchers_total)', terminatedText(after, before)],
    ['apiserver\'s own latency of all calls but WATCH, p50 / p99 (bucket bound)', `${durationQuantile(after, before, NOT_WATCH, 0.5)} / ${durationQuantile(after, before, NOT_WATCH, 0.99)} s`],
    ['coil-controller\'s blockrequest controller', timesText],
    ['CPU while the nodes waited', cpuText],
  ]);
  const profile = await profiling;
  return { ...meanFigures(times0, times1), profile, allP99S: durationQuantile(after, before, NOT_WATCH, 0.99), terminated: Object.fromEntries(diff(after.terminated, before.terminated)), mutatingP99S: durationQuantile(after, before, MUTATING_COIL, 0.99), cpu: cpuText, controller: timesText, wallMs, completeP50: pct(completeMs, 0.5), completeP99: pct(completeMs, 0.99), completeMax: pct(completeMs, 1), cacheP50: pct(inCache, 0.5), cacheP99: pct(inCache, 0.99), cacheMax: pct(inCache, 1), notServed: notAllocated.length, over10, duplicates: dup, lost: missing, unserved, releasedOwn, doubled: census.doubled };
}

/**
 * `--drop-block`: the first node (by name) that holds a block loses it: its coild stand-in is
 * stopped (a coild that is down; running, it would ask for a block again at once, being below its
 * low-water mark) and the block deleted past its finalizer, so that the census must count that node lost. The node
 * stays in the run, dead: hence `--phases=cold` only (main). Returns the block's name.
 * @throws Error when no node holds a block
 */
async function dropOneBlock(c: Cluster): Promise<string> {
  const blocks = (await retried(() => c.client.list(Kinds.AddressBlock))).sort((a, b) => (a.metadata?.labels?.[LABEL_NODE] ?? '').localeCompare(b.metadata?.labels?.[LABEL_NODE] ?? ''));
  const block = blocks[0];
  if (!block?.metadata?.name) throw new Error('--drop-block: no node holds a block to delete');
  await c.nodes.get(block.metadata.labels?.[LABEL_NODE] ?? '')?.stop();
  // Deleted and its finalizer removed (as an admin strips one), so that it is gone by the census.
  await c.client.delete(Kinds.AddressBlock, { name: block.metadata.name });
  const left = await c.client.get(Kinds.AddressBlock, { name: block.metadata.name });
  if (left) await c.client.removeFinalizer(Kinds.AddressBlock, left, FIN_COIL);
  await eventually(async () => (await c.client.get(Kinds.AddressBlock, { name: block.metadata!.name! })) === undefined, { timeoutMs: 30_000, intervalMs: 200 });
  return `${block.metadata.name} of ${block.metadata.labels?.[LABEL_NODE]}, whose stand-in was stopped,`;
}

/** RSS (bytes) of every process of the run: control plane, coil-controller, kwok, this process. */
async function runRssBytes(c: Cluster): Promise<number> {
  const pids = Object.values({ ...c.pids(), ...(await planePids(c.cp)), self: process.pid }).filter((p): p is number => !!p);
  const rss = await Promise.all(pids.map((p) => procStats(p).then((x) => x.rssMb * 1024 * 1024, () => 0)));
  return rss.reduce((a, b) => a + b, 0);
}

/** MemAvailable of the machine (bytes). */
async function memAvailable(): Promise<number> {
  return Number(/MemAvailable:\s+(\d+) kB/.exec(await readFile('/proc/meminfo', 'utf8'))![1]) * 1024;
}

/**
 * Fills every node with `--pods-per-node` Pods (one round across all nodes at a time, 64 creates
 * in flight) so the churn starts from a populated cluster, and waits until every one has its
 * address (the kubelet stand-in retries failed ADDs) or `--fill-timeout`. The first round
 * measures what a Pod costs in memory across every process of the run (apiserver and etcd store
 * it, the controller caches it, the node's cache holds it); when the remaining rounds would take
 * more than nine tenths of the machine's available memory, fewer Pods per node are made (never
 * fewer than 1) and the churn hovers around that count.
 */
async function fill(c: Cluster): Promise<{ seconds: number; blocks: number; pods: number; addressed: number; failed: number; retried: number; complete: boolean; memory: string; bytesPerPod: number }> {
  const t0 = performance.now();
  const markBlocks = c.events.created.length;
  const markAdded = c.events.added.length;
  const markFailed = c.events.addFailed.length;
  const markRetried = c.events.addRetried;
  const pods0 = c.podCount();
  const round = () => pool([...c.nodes.keys()], 64, (node) => c.createPod(node));
  const addressed = () => c.events.added.length - markAdded;
  const rss0 = await runRssBytes(c);
  await round();
  await eventually(() => addressed() >= c.podCount() - pods0, { timeoutMs: c.s['fill-timeout'], intervalMs: 500 }).catch(() => undefined);
  const bytesPerPod = Math.max(0, (await runRssBytes(c)) - rss0) / Math.max(1, c.podCount() - pods0);
  const avail = await memAvailable();
  const wanted = c.s['pods-per-node'];
  // Rounds that fit in nine tenths of what is available now. The first round's cost per Pod is an
  // upper bound (it includes the heaps' growth under its burst of BlockRequests and ADDs, which later
  // rounds reuse: 51 KiB a Pod at N=100, 448 KiB at N=500 with 1,083 ADDs retried), so this errs
  // towards fewer Pods only on a machine near its limit.
  const fits = 1 + Math.floor((0.9 * avail) / Math.max(1, bytesPerPod * c.nodes.size));
  c.podsPerNode = Math.max(1, Math.min(wanted, fits));
  const memory = `${(bytesPerPod / 1024).toFixed(0)} KiB a Pod, ${(avail / 2 ** 30).toFixed(1)} GiB available after the first round${c.podsPerNode < wanted ? `: ${wanted} a node would not fit, ${c.podsPerNode} do` : ''}`;
  if (c.podsPerNode < wanted) console.log(`fill: ${memory}`);
  for (let r = 1; r < c.podsPerNode; r++) await round();
  const complete = await eventually(() => addressed() >= c.podCount() - pods0, { timeoutMs: Math.max(1, c.s['fill-timeout'] - (performance.now() - t0)), intervalMs: 500 }).then(() => true, () => false);
  return {
    seconds: (performance.now() - t0) / 1000, blocks: c.events.created.length - markBlocks, pods: c.podCount() - pods0, addressed: addressed(), complete,
    failed: c.events.addFailed.length - markFailed, retried: c.events.addRetried - markRetried, memory, bytesPerPod,
  };
}

async function steadyChurn(c: Cluster, print: Print): Promise<object> {
  const seconds = c.s.churn / 1000;
  const rate = c.s['churn-rate'];
  const filled = await fill(c);
  const fillS = filled.seconds;
  const fillBlocks = filled.blocks;
  await sleep(3000);
  const pods0 = [...c.pods.values()].reduce((a, l) => a + l.length, 0);
  const before = await serverCounts(c.cp);
  const nodeBefore = new Map(c.nodeCounts);
  const eventsBefore = new Map(c.watchEvents);
  const markC = c.events.created.length;
  const markA = c.events.answered.length;
  const markAdd = c.events.added.length;
  const markFail = c.events.addFailed.length;
  const stop = await sampler(() => ({ controller: c.controller.proc?.pid }));
  const cpu = new CpuWindow(c.cp, () => c.pids());
  await cpu.start();
  const times0 = await controllerTimes(c.controller.ports.metrics);
  const abort = new AbortController();
  const t0 = performance.now();
  const churning = c.churn(rate, abort.signal);
  await sleep(c.s.churn);
  abort.abort();
  const ops = await churning;
  const elapsed = (performance.now() - t0) / 1000;
  const cpuText = await cpu.stop();
  const timesText = meanTimes(times0, await controllerTimes(c.controller.ports.metrics));
  const after = await serverCounts(c.cp);
  const ctl = (await stop()).controller ?? { rssMax: NaN, rssLast: NaN, cores: NaN };
  const d = diff(after.requests, before.requests);
  const dn = diff(c.nodeCounts, nodeBefore);
  const de = diff(c.watchEvents, eventsBefore);
  const complete = c.events.created.slice(markC).map((e) => e.ms).filter((v) => !Number.isNaN(v));
  const answered = c.events.answered.slice(markA).map((e) => e.ms);
  const added = c.events.added.slice(markAdd).map((e) => e.ms);
  const failed = c.events.addFailed.slice(markFail);
  const nodeRate = total(dn) / elapsed / c.nodes.size;
  const census = await blockCensus(c);
  const kwok = await kwokCheck(c);
  print(`steady churn (${ops} pod creates/deletes in ${elapsed.toFixed(0)} s across ${c.nodes.size} nodes, ${pods0} pods at the start)`, [
    [`fill before the churn: ${c.podsPerNode} Pods on every node${c.podsPerNode < c.s['pods-per-node'] ? ` (of --pods-per-node=${c.s['pods-per-node']}: ${filled.memory})` : ''}`, `${fillS.toFixed(1)} s${filled.complete ? '' : ` (stopped at --fill-timeout)`}, ${filled.addressed} of ${filled.pods} Pods with an address, ${fillBlocks} blocks created, ADDs failed ${filled.failed} (each retried by the kubelet stand-in: ${filled.retried} retries)`],
    ['memory the fill cost per Pod (RSS of every process, first round)', filled.memory],
    ['BlockRequest create → its AddressBlock created (the bench\'s watch)', dist(complete)],
    ['BlockRequest create → block in the node\'s cache', dist(answered)],
    ['ADD (Pod seen → address)', dist(added)],
    ['ADDs failed', `${failed.length}${failed.length ? ` (${failed[0]!.err})` : ''}`],
    ['kwok left the Pods alone: Pods written by kwok / Pods whose IP is not their stand-in\'s (of all; Nodes kwok manages)', `${kwok.podsByKwok} / ${kwok.podsWithOtherIp} (of ${kwok.pods}; ${kwok.nodesByKwok} Nodes)`],
    ['blocks at the end', `${census.total} (${(census.total / c.nodes.size).toFixed(2)} per node), requests answered twice: ${census.doubled}`],
    ['coil-controller RSS max / at the end', `${ctl.rssMax.toFixed(0)} / ${ctl.rssLast.toFixed(0)} MB`],
    ['coil-controller CPU', `${ctl.cores.toFixed(3)} core`],
    ['watches open (apiserver)', String(after.watches)],
    ['API requests, all clients (apiserver)', `${(total(d) / elapsed).toFixed(1)}/s`],
    ['apiserver\'s own latency of mutating calls p99, coil\'s / all (bucket bound)', `${durationQuantile(after, before, MUTATING_COIL, 0.99)} / ${durationQuantile(after, before, MUTATING, 0.99)} s`],
    ['watchers the apiserver closed for falling behind', terminatedText(after, before)],
    ['coil-controller\'s blockrequest controller', timesText],
    ['CPU during the churn', cpuText],
    ['API requests of the coild stand-ins (client side)', `${(total(dn) / elapsed).toFixed(2)}/s = ${nodeRate.toFixed(4)}/s per node`],
    ['watch events the coild stand-ins received', `${(total(de) / elapsed).toFixed(1)}/s = ${(total(de) / elapsed / c.nodes.size).toFixed(3)}/s per node (AddressPool ${(((de.get('AddressPool') ?? 0) / elapsed) / c.nodes.size).toFixed(3)}/s per node)`],
  ]);
  console.log('\napiserver_request_total during the churn, by verb and resource (all clients):');
  for (const l of rateLines(d, elapsed, 0.05)) console.log(`  ${l}`);
  console.log('the coild stand-ins\' own calls (client side):');
  for (const l of rateLines(dn, elapsed, 0.01, c.nodes.size)) console.log(`  ${l}`);
  console.log('watch events the coild stand-ins received, by kind:');
  for (const l of rateLines(de, elapsed, 0.01, c.nodes.size)) console.log(`  ${l}`);
  return {
    cpu: cpuText, mutatingP99S: durationQuantile(after, before, MUTATING, 0.99), fillS, fillBlocks, fill: filled, podsPerNode: c.podsPerNode, ops, seconds: elapsed, completeP50: pct(complete, 0.5), completeP99: pct(complete, 0.99), answeredP50: pct(answered, 0.5), answeredP99: pct(answered, 0.99), requests: complete.length,
    addP50: pct(added, 0.5), addP99: pct(added, 0.99), addFailed: failed.length, rssMax: ctl.rssMax, rssLast: ctl.rssLast, cpuCores: ctl.cores, kwok, watches: after.watches,
    nodeEventsPerSecPerNode: total(de) / elapsed / c.nodes.size, nodeEventsByKind: Object.fromEntries([...de].map(([k, v]) => [k, v / elapsed / c.nodes.size])),
    apiPerSec: total(d) / elapsed, nodeApiPerSec: total(dn) / elapsed, nodeApiPerSecPerNode: nodeRate, blocks: census.total, doubled: census.doubled,
    apiByKey: Object.fromEntries([...d].map(([k, v]) => [k, v / elapsed])), nodeApiByKey: Object.fromEntries([...dn].map(([k, v]) => [k, v / elapsed])),
  };
}

async function handover(c: Cluster, print: Print): Promise<object> {
  const abort = new AbortController();
  const churning = c.churn(c.s['churn-rate'], abort.signal);
  await sleep(5000);
  const tKill = performance.now();
  await c.controller.kill('SIGKILL');
  await c.controller.start();
  // Probes: 20 nodes (or all, if fewer) ask for a block right after the kill.
  const probes = [...c.nodes.values()].slice(0, 20);
  const probeMs: number[] = [];
  const probing = Promise.all(probes.map(async (node) => {
    const o = await node.requestBlock(120_000).catch(() => ({ kind: 'error' }));
    if (o.kind === 'allocated') probeMs.push(performance.now() - tKill);
  }));
  const mark = c.events.created.length;
  await c.controller.ready();
  const readyMs = performance.now() - tKill;
  await eventually(() => c.events.created.slice(mark).some((e) => e.at > tKill), { timeoutMs: 180_000, intervalMs: 100 });
  const firstMs = c.events.created.slice(mark).find((e) => e.at > tKill)!.at - tKill;
  await probing;
  abort.abort();
  await churning;
  await sleep(3000);
  const census = await blockCensus(c);
  print('leader handover under churn (coil-controller SIGKILLed, a new one started at once)', [
    ['new controller ready (webhooks, caches)', ms(readyMs)],
    ['first BlockRequest answered after the kill', ms(firstMs)],
    [`${probes.length} probe requests made at the kill, all answered after`, `${ms(pct(probeMs, 1))} (${probeMs.length} answered)`],
    ['requests answered by two blocks', String(census.doubled)],
  ]);
  return { readyMs, firstAnswerMs: firstMs, probesAnsweredMs: pct(probeMs, 1), probesAnswered: probeMs.length, doubled: census.doubled };
}

async function scaleDown(c: Cluster, print: Print): Promise<object> {
  await sleep(2000);
  const all = [...c.nodes.keys()];
  const victims = all.filter((_, i) => i % 5 === 4);
  const victimSet = new Set(victims);
  const live = (b: AddressBlock) => !victimSet.has(b.metadata?.labels?.[LABEL_NODE] ?? '');
  const snapshot = new Map(c.blocks.list().filter(live).map((b) => [b.metadata!.name!, b.metadata!.uid!]));
  const theirs = () => c.blocks.list().filter((b) => !live(b)).length;
  const victimBlocks = theirs();
  await Promise.all(victims.map(async (v) => {
    await c.nodes.get(v)!.stop();
    c.nodes.delete(v);
  }));
  const t0 = performance.now();
  await pool(victims, 200, async (v) => void (await retried(() => c.client.delete(Kinds.Node, { name: v }))));
  const deletedMs = performance.now() - t0;
  await eventually(() => theirs() === 0, { timeoutMs: 600_000, intervalMs: 200 });
  const goneMs = performance.now() - t0;
  await sleep(2000);
  let touched = 0;
  const touchedNames: string[] = [];
  for (const [name, uid] of snapshot) {
    const now = c.blocks.get(name);
    // Released by its own node (the releaser's report), before or after the snapshot: not touched.
    if ((!now || now.metadata?.uid !== uid || now.metadata?.deletionTimestamp) && !c.events.released.has(name)) {
      touched++;
      touchedNames.push(`${name}${now ? ' (deleting)' : ' (gone)'}`);
    }
  }
  if (touchedNames.length > 0) console.log(`touched: ${touchedNames.slice(0, 10).join(', ')}`);
  for (const v of victims) c.pods.delete(v);
  print(`scale-down (${victims.length} of ${all.length} Nodes deleted at once, ${victimBlocks} blocks of theirs)`, [
    ['Node deletes sent (200 at a time)', ms(deletedMs)],
    ['every block of theirs gone after', ms(goneMs)],
    ['blocks of live nodes touched (not released by their own node)', String(touched)],
  ]);
  return { victims: victims.length, victimBlocks, deletesSentMs: deletedMs, goneMs, touched };
}

async function apiserverRestart(c: Cluster, print: Print): Promise<object> {
  await sleep(2000);
  const nodes = [...c.nodes.values()];
  const hurried0 = c.hurriedLists;
  const nodeBefore = new Map(c.nodeCounts);
  const sentAt0 = nodes.reduce((a, x) => a + x.client.sentAt.size, 0);
  const created = () => nodes.reduce((a, x) => a + x.client.sentAt.size, 0) - sentAt0;
  // Every node starts an ADD that needs a new block; a failed one is retried each second (kubelet).
  // The apiserver goes down once half of them have created their BlockRequest: those not answered
  // yet wait through the outage, the others retry their create.
  const served: number[] = [];
  let up = Infinity;
  let attempts = 0;
  const adds = Promise.all(nodes.map(async (node) => {
    const deadline = performance.now() + 600_000;
    while (performance.now() < deadline) {
      attempts++;
      try {
        const o = await node.requestBlock(c.s['alloc-timeout']);
        if (o.kind === 'allocated') {
          served.push(performance.now() - up);
          return;
        }
      } catch { /* the apiserver is down: kubelet retries the ADD */ }
      await sleep(1000);
    }
  }));
  await eventually(() => created() >= nodes.length / 2, { timeoutMs: 60_000, intervalMs: 5 });
  await c.cp.stopApiServer({ crash: true });
  const tDown = performance.now();
  const servedBefore = served.length;
  const atDown = new Map(c.nodeCounts);
  const hurriedAtDown = c.hurriedLists;
  await sleep(c.s.outage);
  const duringOutage = diff(c.nodeCounts, atDown);
  const hurriedOutage = c.hurriedLists - hurriedAtDown;
  const downS = (performance.now() - tDown) / 1000;
  await c.cp.startApiServer();
  up = performance.now();
  await adds;
  const allMs = performance.now() - up;
  const after = await serverCounts(c.cp); // counters restarted with the apiserver: all since it came back
  const dn = diff(c.nodeCounts, nodeBefore);
  const lists = after.requests;
  const nodeLists = total(dn, /^LIST (blockrequests|addressblocks)$/);
  const outageLists = total(duringOutage, /^LIST (blockrequests|addressblocks)$/);
  const hurried = c.hurriedLists - hurried0;
  const afterServed = served.filter((v) => v >= 0);
  print(`apiserver restart with every node waiting (${nodes.length} nodes each start an ADD, retried every second; the apiserver SIGKILLed once half had created their BlockRequest, down ${downS.toFixed(1)} s)`, [
    ['served before the apiserver went down', String(servedBefore)],
    ['all served after the apiserver came back', ms(allMs)],
    ['served after it came back', dist(afterServed)],
    ['ADD attempts (with the retries during the outage)', String(attempts)],
    ['the nodes\' LIST attempts of BlockRequests + AddressBlocks during the outage', `${outageLists} (${(outageLists / downS).toFixed(1)}/s), of which the retryNow hurry's ${hurriedOutage}`],
    ['LISTs since the apiserver came back (apiserver)', `${total(lists, /^LIST /)} (${rateLines(new Map([...lists].filter(([k]) => k.startsWith('LIST '))), 1, 1).slice(0, 7).map((l) => l.replace(/\s+/g, ' ').replace('/s', '')).join('; ')})`],
    ['the nodes\' LISTs of BlockRequests + AddressBlocks (client side, outage and after)', String(nodeLists)],
    ['of which the retryNow hurry\'s (an ADD waited a poll while the informer backed off)', `${hurried} (${nodeLists ? ((100 * hurried) / nodeLists).toFixed(0) : 0} %)`],
    ['watches open at the end', String(after.watches)],
    ['watchers the apiserver closed for falling behind, since it came back', terminatedText(after, { ...after, terminated: new Map() })],
    ['coil-controller exits during the phase (restarted after 1 s, as by its Deployment)', c.controller.exits.filter((e) => e.at >= tDown).map((e) => `code ${e.code}${e.signal ? ` ${e.signal}` : ''}`).join(', ') || '0'],
  ]);
  return { downS, servedBefore, allServedMs: allMs, servedP50: pct(afterServed, 0.5), servedP99: pct(afterServed, 0.99), served: served.length, lists: total(lists, /^LIST /), nodeLists, outageLists, outageListsPerS: outageLists / downS, hurriedOutage, hurried, watches: after.watches, terminated: Object.fromEntries(after.terminated), controllerExits: c.controller.exits.filter((e) => e.at >= tDown).length };
}

// ---------------------------------------------------------------- main

function growth(figs: RunFigures[]): void {
  if (figs.length < 2) return;
  const get = (f: RunFigures, path: string): number => {
    let v: unknown = f;
    for (const p of path.split('.')) v = (v as Record<string, unknown> | undefined)?.[p];
    return typeof v === 'number' ? v : NaN;
  };
  // A row's paths: one, or several shown joined by ' / '.
  const rows: [string, string | string[], (v: number) => string][] = [
    ['start: every cache synced', 'start.allSyncedS', (v) => `${v.toFixed(1)} s`],
    ['watches per node', 'start.watches', (v) => v.toFixed(0)],
    ['cold start → answered (block created) p99', 'cold.completeP99', ms],
    ['cold start → block in cache p50', 'cold.cacheP50', ms],
    ['cold start → block in cache p99', 'cold.cacheP99', ms],
    ['cold start → block in cache max', 'cold.cacheMax', ms],
    ['cold start duplicates / lost', ['cold.duplicates', 'cold.lost'], (v) => String(v)],
    ['cold start watchers terminated (BlockRequest)', 'cold.terminated.blockrequests', (v) => String(v)],
    ['cold start watchers terminated (AddressBlock)', 'cold.terminated.addressblocks', (v) => String(v)],
    ['churn BlockRequest → block created p50', 'churn.completeP50', ms],
    ['churn BlockRequest → block created p99', 'churn.completeP99', ms],
    ['churn BlockRequest → block in node cache p99', 'churn.answeredP99', ms],
    ['churn controller RSS max (MB)', 'churn.rssMax', (v) => v.toFixed(0)],
    ['churn controller CPU (core)', 'churn.cpuCores', (v) => v.toFixed(3)],
    ['churn API requests/s, all', 'churn.apiPerSec', (v) => v.toFixed(1)],
    ['churn coild requests/s per node', 'churn.nodeApiPerSecPerNode', (v) => v.toFixed(4)],
    ['churn watch events/s per node', 'churn.nodeEventsPerSecPerNode', (v) => v.toFixed(3)],
    ['handover: first answer after kill', 'handover.firstAnswerMs', ms],
    ['scale-down: blocks gone after', 'scaledown.goneMs', ms],
    ['scale-down: live blocks touched', 'scaledown.touched', (v) => String(v)],
    ['apiserver restart: all served after', 'apiserver.allServedMs', ms],
    ['apiserver restart: LISTs', 'apiserver.lists', (v) => String(v)],
    ['apiserver restart: retryNow lists', 'apiserver.hurried', (v) => String(v)],
    ['apiserver restart: node LIST attempts/s during the outage', 'apiserver.outageListsPerS', (v) => v.toFixed(1)],
    ['churn: Pods written by kwok', 'churn.kwok.podsByKwok', (v) => String(v)],
    ['churn: Pods whose IP is not their stand-in\'s', 'churn.kwok.podsWithOtherIp', (v) => String(v)],
  ];
  // The cold start per --controller-concurrency value (coldStarts), when more than one.
  for (const v of Object.keys((figs[0]?.coldByConcurrency as Record<string, object> | undefined) ?? {})) {
    rows.push(
      [`cold start, concurrency ${v}: → block in cache p50`, `coldByConcurrency.${v}.cacheP50`, ms],
      [`cold start, concurrency ${v}: → block in cache p99`, `coldByConcurrency.${v}.cacheP99`, ms],
      [`cold start, concurrency ${v}: served after more than 10 s`, `coldByConcurrency.${v}.over10`, (x) => String(x)],
      [`cold start, concurrency ${v}: duplicates / lost`, [`coldByConcurrency.${v}.duplicates`, `coldByConcurrency.${v}.lost`], (x) => String(x)],
      [`cold start, concurrency ${v}: apiserver p99 of coil's writes (s)`, `coldByConcurrency.${v}.mutatingP99S`, (x) => String(x)],
      [`cold start, concurrency ${v}: blockrequest reconcile mean`, `coldByConcurrency.${v}.reconcileMeanMs`, ms],
      [`cold start, concurrency ${v}: queue wait mean`, `coldByConcurrency.${v}.queueMeanMs`, ms],
      // Over the whole phase (which waits for the apiserver's profile): the cold start's own CPU is its table's "CPU while the nodes waited".
      [`cold start, concurrency ${v}: apiserver CPU over the phase (core)`, `coldByConcurrency.${v}.resources.apiserver.cores`, (x) => x.toFixed(3)],
      [`cold start, concurrency ${v}: coil-controller CPU over the phase (core)`, `coldByConcurrency.${v}.resources.controller.cores`, (x) => x.toFixed(3)],
      [`cold start, concurrency ${v}: apiserver CPU profiled (CPU-s)`, `coldByConcurrency.${v}.profile.totalS`, (x) => x.toFixed(1)],
    );
  }
  // Per phase: the Pods alive at its end and what each process used (processSampler).
  const mb = (v: number) => `${v.toFixed(0)} MB`;
  const core = (v: number) => v.toFixed(3);
  for (const phase of ['start', 'cold', 'churn', 'handover', 'scaledown', 'apiserver']) {
    rows.push(
      [`${phase}: Pods at its end`, `${phase}.resources.pods`, (v) => String(v)],
      [`${phase}: coil-controller RSS max`, `${phase}.resources.controller.rssMax`, mb],
      [`${phase}: coil-controller CPU (core)`, `${phase}.resources.controller.cores`, core],
      [`${phase}: kube-apiserver CPU (core)`, `${phase}.resources.apiserver.cores`, core],
      [`${phase}: kwok RSS max`, `${phase}.resources.kwok.rssMax`, mb],
      [`${phase}: kwok CPU (core)`, `${phase}.resources.kwok.cores`, core],
    );
  }
  console.log(`\n### growth with N\n| figure | ${figs.map((f) => `N=${f.n}`).join(' | ')} |\n|---|${figs.map(() => '---|').join('')}`);
  for (const [label, path, fmt] of rows) {
    const paths = typeof path === 'string' ? [path] : path;
    const vals = figs.map((f) => paths.map((p) => get(f, p)));
    if (vals.every((v) => v.every(Number.isNaN))) continue;
    const shown = path === 'start.watches' ? figs.map((f) => (get(f, path) / f.n).toFixed(1)) : vals.map((v) => v.map((x) => (Number.isNaN(x) ? '—' : fmt(x))).join(' / '));
    console.log(`| ${label} | ${shown.join(' | ')} |`);
  }
}

/** The directory kept for the run's files (`--out-dir`, else a new one under the temp dir). */
let outDir = '';

async function main(s: Settings): Promise<void> {
  const ns = s.nodes.split(',').map((x) => Number(x.trim()));
  if (ns.some((x) => !Number.isInteger(x) || x < 1)) throw new ConfigError(`--nodes: expected positive integers, got ${JSON.stringify(s.nodes)}`);
  const colds = concurrencies(s).length;
  if (s['drop-block'] > colds) throw new ConfigError(`--drop-block: ${s['drop-block']} names no cold start (there are ${colds}: one per --controller-concurrency value)`);
  if (s['drop-block'] > 0 && s.phases.split(',').map((p) => p.trim()).filter(Boolean).join(',') !== 'cold') throw new ConfigError(`--drop-block: needs --phases=cold (the node that lost its block stays dead), got ${JSON.stringify(s.phases)}`);
  outDir = s['out-dir'] || (await mkdtemp(join(tmpdir(), 'coil-scale-out-')));
  await mkdir(outDir, { recursive: true });
  console.log(`(the run's files — apiserver CPU profiles — go to ${outDir})`);
  console.log(`# coil scale benchmark — ${new Date().toISOString()}; ${JSON.stringify(s)}`);
  const figs: RunFigures[] = [];
  for (const n of ns) {
    const t0 = performance.now();
    const f = await run(n, s);
    f.wallS = (performance.now() - t0) / 1000;
    figs.push(f);
    if (s.out) await writeFile(s.out, `${JSON.stringify(f)}\n`, { flag: 'a' });
    growth(figs);
  }
}

await runBench(FLAGS, main);
