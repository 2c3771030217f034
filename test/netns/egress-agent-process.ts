/**
 * The real coil-egress program in a NAT pod's network namespace, for the failover bench
 * (egress-failover-bench.ts): its own entrypoint (the Bun bundle the image runs, or tsc's output
 * with `COIL_EGRESS_RUNTIME=node`: node-lab.ts's `coilEgressCommand`), with its flags and
 * environment as the Egress controller gives them, against a stand-in of the one API call it makes
 * (the cluster-wide list and watch of Pods, client-pod-source.ts). The stand-in is plain HTTP in
 * the node's netns, reached from the NAT pod over its veth, and answers every list with the client
 * pods it holds and every watch with an open stream that stays silent: the client set does not
 * change during a run.
 *
 * Also: the kubelet's part in a NAT pod whose process dies or hangs ({@link Kubelet}), and what a
 * restart of coil-egress changed in the pod's netns ({@link natState}).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { writeFile } from 'node:fs/promises';
import { createServer, get as httpGet, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import type { V1Pod } from '@kubernetes/client-node';
import type { IpRunner } from '../../src/netlink/iproute2/ip-runner.js';
import { sleep } from '../../src/runtime/clock.js';
import { coilEgressCommand } from './node-lab.js';
import type { TestNetns } from './test-netns.js';

/** A stand-in of the API server's `GET /api/v1/pods` (list, and watch that stays open and silent). */
export class PodListStandIn {
  private server: Server | undefined;
  private readonly watches = new Set<ServerResponse>();
  /** Lists served: each coil-egress start lists once. */
  lists = 0;

  constructor(private readonly pods: readonly V1Pod[]) {}

  /** Listens on every address of this netns. @returns the port */
  async start(): Promise<number> {
    const server = createServer((req, res) => {
      const url = new URL(req.url ?? '/', 'http://stand-in');
      if (req.method !== 'GET' || url.pathname !== '/api/v1/pods') {
        res.writeHead(404, { 'content-type': 'application/json' }).end(JSON.stringify({ kind: 'Status', code: 404, message: `the stand-in serves GET /api/v1/pods only, not ${req.method} ${url.pathname}` }));
        return;
      }
      if (url.searchParams.get('watch') === 'true') {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.flushHeaders();
        this.watches.add(res);
        res.on('close', () => this.watches.delete(res));
        return;
      }
      this.lists++;
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ kind: 'PodList', apiVersion: 'v1', metadata: { resourceVersion: '1' }, items: this.pods }));
    });
    this.server = server;
    server.listen(0, '::');
    await once(server, 'listening');
    return (server.address() as AddressInfo).port;
  }

  async stop(): Promise<void> {
    for (const r of this.watches) r.destroy();
    await new Promise((r) => this.server?.close(r));
  }
}

/** Writes a kubeconfig for `server` (plain HTTP, no credentials: the stand-in asks for none). @returns its path */
export async function writeKubeconfig(dir: string, name: string, server: string): Promise<string> {
  const path = join(dir, `${name}.kubeconfig`);
  await writeFile(path, JSON.stringify({
    apiVersion: 'v1', kind: 'Config', 'current-context': 'bench',
    // client-node refuses plain HTTP unless TLS verification is skipped explicitly.
    clusters: [{ name: 'bench', cluster: { server, 'insecure-skip-tls-verify': true } }],
    users: [{ name: 'bench', user: {} }],
    contexts: [{ name: 'bench', context: { cluster: 'bench', user: 'bench' } }],
  }));
  return path;
}

/** Options of {@link CoilEgressProcess}. */
export interface CoilEgressProcessOptions {
  ns: TestNetns;
  /** The NAT pod's address (COIL_POD_ADDRESSES), also where its /readyz is asked from the node. */
  address: string;
  kubeconfig: string;
  backend: 'nftables' | 'iptables';
  /** Port of /healthz and /readyz (the Egress controller's 8081). */
  healthPort?: number;
  /** Called with each line coil-egress logs (stdout and stderr). */
  onLog?: (line: string) => void;
}

/** One NAT pod's coil-egress: started, signalled and restarted as kubelet does with a container. */
export class CoilEgressProcess {
  process: ChildProcess | undefined;
  /** Starts so far (1 after the first). */
  starts = 0;

  constructor(private readonly o: CoilEgressProcessOptions) {}

  /** The NAT pod's netns. */
  get ns(): TestNetns {
    return this.o.ns;
  }

  /** Starts coil-egress in the NAT pod's netns (a new container: kubelet's start or restart). */
  start(): void {
    const { argv, env } = coilEgressCommand();
    const p = spawn('ip', ['netns', 'exec', this.o.ns.name, ...argv,
      `--kubeconfig=${this.o.kubeconfig}`, `--backend=${this.o.backend}`, '--fou-port=5555', '--metrics-addr=0',
      `--health-addr=:${this.o.healthPort ?? 8081}`, '--api-http2=false', '--log-level=info'], {
      env: { ...process.env, ...env, COIL_POD_ADDRESSES: this.o.address, COIL_POD_NAMESPACE: 'internet', COIL_EGRESS_NAME: 'nat', HOSTNAME: `nat-${this.o.ns.name}` },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    for (const s of [p.stdout, p.stderr]) {
      let rest = '';
      s.on('data', (b: Buffer) => {
        const lines = (rest + b.toString()).split('\n');
        rest = lines.pop() ?? '';
        for (const l of lines) this.o.onLog?.(l);
      });
    }
    this.process = p;
    this.starts++;
  }

  /** True while the process has not exited. */
  running(): boolean {
    return !!this.process && this.process.exitCode === null && this.process.signalCode === null;
  }

  signal(signal: NodeJS.Signals): void {
    this.process?.kill(signal);
  }

  /** Resolves when the process exited (at once when it has). */
  async exited(): Promise<void> {
    if (this.process && this.running()) await once(this.process, 'exit');
  }

  /** Why the last readiness check failed. */
  private notReady = 'not asked yet';

  /**
   * True when its /readyz answers 200, asked from the node as kubelet's readiness probe asks: a new
   * connection each time (kubelet's prober keeps none alive), with 5 s to answer instead of
   * kubelet's 1 s (the VM under TCG on a loaded machine is that slow).
   */
  ready(): Promise<boolean> {
    return new Promise((resolve) => {
      const req = httpGet({ host: this.o.address, port: this.o.healthPort ?? 8081, path: '/readyz', agent: false, timeout: 5_000 }, (res) => {
        let body = '';
        res.on('data', (b: Buffer) => { body += b.toString(); });
        res.on('end', () => {
          this.notReady = `${res.statusCode} ${body.slice(0, 200)}`;
          resolve(res.statusCode === 200);
        });
        res.on('error', (err) => { this.notReady = err.message; resolve(false); });
      });
      req.on('timeout', () => req.destroy(new Error('no answer within 5 s')));
      req.on('error', (err) => { this.notReady = err.message; resolve(false); });
    });
  }

  /**
   * Waits for /readyz, asking every `periodMs`.
   * @throws Error when the process exits first or `timeoutMs` passes
   */
  async waitReady(timeoutMs: number, periodMs = 100): Promise<void> {
    const until = Date.now() + timeoutMs;
    for (;;) {
      if (!this.running()) throw new Error(`coil-egress in ${this.o.ns.name} exited (${this.process?.exitCode ?? this.process?.signalCode}) before it was ready`);
      const was = this.notReady;
      const ok = await this.ready();
      if (this.notReady !== was) this.o.onLog?.(`(bench) /readyz: ${this.notReady}`);
      if (ok) return;
      if (Date.now() > until) throw new Error(`coil-egress in ${this.o.ns.name} not ready after ${timeoutMs} ms: /readyz ${this.notReady}`);
      await sleep(periodMs);
    }
  }
}

/**
 * kubelet's handling of a NAT pod's coil-egress container that dies or hangs, with the delays as
 * parameters (ms):
 * - **killed** (SIGKILL: a crash): the pod sync after PLEG's relist (every 1 s) sees the exit, the
 *   container turns not ready (`notReadyMs`) and is started again (`restartMs`): the first restart
 *   without back-off (kubelet's `doBackOff` finds no back-off entry for the container yet), later
 *   ones after 10 s, 20 s … 300 s (its crash-loop back-off, reset after 10 min of running). Each
 *   run of the bench restarts a container once, and the bench models the first restart only.
 * - **hung** (SIGSTOP): nothing until the probes fail: readiness after `readinessFailMs`
 *   (failureThreshold 3 × periodSeconds 10 s by default, which the NAT pods' probes keep), the
 *   container turns not ready; liveness (the same defaults) after `livenessFailMs`: kubelet kills the
 *   container as for a deletion — SIGTERM, which a stopped process does not act on, and SIGKILL
 *   after the grace period (`graceMs`, terminationGracePeriodSeconds: 30 s by default) — and
 *   restarts it (at once: the first restart).
 * - Back: the container turns ready at its first readiness probe that passes, and kubelet probes a
 *   not-ready container at once when it syncs the pod, then every period: the model asks /readyz
 *   every 100 ms from the restart on, a lower bound of kubelet's.
 */
export interface KubeletTimings {
  notReadyMs: number;
  restartMs: number;
  readinessFailMs: number;
  livenessFailMs: number;
  graceMs: number;
}

/** What happened to a NAT pod's container in a run, in ms after the signal. */
export interface ContainerEvents {
  notReadyAt?: number;
  killedAt?: number;
  restartedAt?: number;
  readyAt?: number;
}

/**
 * Plays kubelet for `pod` after `signal` hit it at `t0`: `onNotReady` when its endpoint turns not
 * ready, `onRestart` when its container starts again, `onReady` when its /readyz passes.
 * @returns the times of each step (ms after t0)
 * @throws Error when the restarted coil-egress is not ready within `readyTimeoutMs`
 */
export async function playKubelet(pod: CoilEgressProcess, signal: 'SIGKILL' | 'SIGSTOP', t0: number, k: KubeletTimings,
  hooks: { onNotReady: () => Promise<void>; onRestart?: () => void; onReady?: () => Promise<void> }, readyTimeoutMs = 60_000): Promise<ContainerEvents> {
  const at = (ms: number) => sleep(Math.max(0, ms - (Date.now() - t0)));
  const ev: ContainerEvents = {};
  const notReadyAt = signal === 'SIGKILL' ? k.notReadyMs : k.readinessFailMs;
  const steps: Array<[number, () => Promise<void>]> = [[notReadyAt, async () => { ev.notReadyAt = Date.now() - t0; await hooks.onNotReady(); }]];
  if (signal === 'SIGSTOP') {
    steps.push([k.livenessFailMs, async () => { pod.signal('SIGTERM'); }]);
    steps.push([k.livenessFailMs + k.graceMs, async () => { pod.signal('SIGKILL'); await pod.exited(); ev.killedAt = Date.now() - t0; }]);
  }
  const restartAt = signal === 'SIGKILL' ? k.restartMs : k.livenessFailMs + k.graceMs + k.restartMs;
  steps.push([restartAt, async () => {
    await pod.exited();
    pod.start();
    ev.restartedAt = Date.now() - t0;
    hooks.onRestart?.();
  }]);
  for (const [when, step] of steps.sort((a, b) => a[0] - b[0])) {
    await at(when);
    await step();
  }
  await pod.waitReady(readyTimeoutMs);
  ev.readyAt = Date.now() - t0;
  await hooks.onReady?.();
  return ev;
}

/** What of a NAT pod's data path a restart could change, read from its netns. */
export interface NatState {
  /** Peer link name → ifindex (a re-created link gets a new one). */
  links: Record<string, number>;
  /** `ip fou show` lines. */
  fou: string[];
  /**
   * Established TCP connections of the clients through the NAT (source among `clients`) in
   * conntrack, as `tcp src:sport > dst:dport`: entries that must outlive a restart. Not the
   * entries of closed connections (TIME_WAIT) or idle UDP flows, which expire on their own.
   */
  flows: string[];
}

/** Reads {@link NatState} of the netns `ns` for the client addresses `clients`. */
export async function natState(ip: IpRunner, ns: TestNetns, clients: readonly string[], family: 4 | 6): Promise<NatState> {
  const links = await ip.json<Array<{ ifname: string; ifindex: number }>>(['link', 'show'], { netns: ns.path });
  const fou = (await ip.exec([ip.ipPath, 'fou', 'show'], { netns: ns.path })).stdout.split('\n').filter(Boolean);
  const ct = (await ip.exec(['conntrack', '-L', '-f', family === 6 ? 'ipv6' : 'ipv4'], { netns: ns.path }).catch(() => ({ stdout: '' }))).stdout;
  const flows = ct.split('\n').map((l) => /^tcp\s+\d+\s+\d+\s+ESTABLISHED\s+src=(\S+) dst=(\S+) sport=(\d+) dport=(\d+)/.exec(l))
    .filter((m): m is RegExpExecArray => !!m && clients.includes(m[1]!))
    .map((m) => `tcp ${m[1]}:${m[3]} > ${m[2]}:${m[4]}`).sort();
  return { links: Object.fromEntries(links.filter((l) => /^fou[46]_/.test(l.ifname)).map((l) => [l.ifname, l.ifindex])), fou, flows };
}

/** What a restart changed: `kept` when nothing; else which parts. */
export function natStateChange(before: NatState, after: NatState): string {
  const changes: string[] = [];
  const relinked = Object.keys(before.links).filter((n) => after.links[n] !== before.links[n]);
  if (relinked.length > 0) changes.push(`peer links re-created or gone: ${relinked.join(', ')}`);
  if (before.fou.join() !== after.fou.join()) changes.push(`FoU ports ${before.fou.join('; ')} → ${after.fou.join('; ')}`);
  const gone = before.flows.filter((f) => !after.flows.includes(f));
  if (gone.length > 0) changes.push(`conntrack entries gone: ${gone.length} of ${before.flows.length}`);
  return changes.length === 0 ? `kept (${Object.keys(before.links).length} peer links, FoU port, ${before.flows.length} established client connections in conntrack)` : changes.join('; ');
}
