/**
 * The netns tier's lab: a real control plane, the IPAM controller (`dist/src/controller/main.js`)
 * and, per fake node, a host netns and a coild child (`dist/src/node-agent/main.js
 * --host-netns`). coild itself runs in the test's netns, so it reaches the apiserver on
 * 127.0.0.1; every kernel change it makes goes to the node's netns. Pods are netns plus a Pod
 * object with `spec.nodeName` (nothing schedules or deletes them: the lab does). The built `coil`
 * executable is run exactly as containerd runs it: CNI_* env + netconf on stdin.
 *
 * {@link NodeLab.stop} removes every process, netns and temp dir, also after a failure.
 */
import { afterEach } from 'node:test';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, statSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { coilCrds } from '../../src/api/v2/crd.js';
import type { AddressPoolSpec } from '../../src/api/v2/addresspool.js';
import { ANN_POOL, FIN_COIL } from '../../src/api/v2/keys.js';
import { IpRunner } from '../../src/netlink/iproute2/ip-runner.js';
import { TestNetnsSet, type TestNetns } from './test-netns.js';
import type { IpamSnapshot } from '../../src/node-agent/ipam/introspection.js';
import { RtnetlinkPodNetwork } from '../../src/node-agent/podnet/pod-network-rtnetlink.js';
import type { PodNetworkEntry } from '../../src/node-agent/podnet/pod-network.js';
import { Kinds } from '../../src/api/v2/kinds.js';
import { ApiTransport } from '../../src/runtime/api-transport.js';
import { Client } from '../../src/runtime/client.js';
import { ControlPlane, REPO_ROOT, eventually, freePort } from '../envtest/control-plane.js';
import { ManagedProcess, waitFor } from '../envtest/process.js';

/** The coil executable built by hack/build-cni.sh. */
export const COIL_BIN = join(REPO_ROOT, 'dist/bin/coil');

/**
 * coil-egress as the image runs it: its bundle (hack/build-cni.sh) on the Bun runtime inside
 * `coil` (README, "coild's runtime"); `COIL_EGRESS_RUNTIME=node` runs tsc's output on Node 24.
 * @returns the argv (program first) and the environment variables to add
 */
export function coilEgressCommand(runtime: 'bun' | 'node' = process.env.COIL_EGRESS_RUNTIME === 'node' ? 'node' : 'bun'): { argv: string[]; env: Record<string, string> } {
  if (runtime === 'node') return { argv: [NODE, join(REPO_ROOT, 'dist/src/egress-agent/main.js')], env: {} };
  return { argv: [COIL_BIN, '--no-install', freshBundle('egress-agent')], env: { BUN_BE_BUN: '1' } };
}

/** `dist/src/<program>/main.bundle.cjs`, refused when older than tsc's main.js (see coildBundle). */
function freshBundle(program: string): string {
  const bundle = join(REPO_ROOT, `dist/src/${program}/main.bundle.cjs`);
  const main = join(REPO_ROOT, `dist/src/${program}/main.js`);
  if (!existsSync(bundle) || statSync(bundle).mtimeMs < statSync(main).mtimeMs) {
    throw new Error(`${bundle} is missing or older than ${main}: run bash hack/build-cni.sh`);
  }
  return bundle;
}

/**
 * coild's bundle for the Bun runtime (hack/build-cni.sh), as the image runs it. Refused when it is
 * older than tsc's output, so a test never runs yesterday's coild.
 */
export function coildBundle(): string {
  return freshBundle('node-agent');
}
const NODE = join(REPO_ROOT, 'node_modules/.bin/node');

/** One fake node: its host netns and coild. */
export interface LabNode {
  readonly name: string;
  readonly ns: TestNetns;
  readonly ipv4: string;
  readonly socketPath: string;
  readonly healthPort: number;
  readonly metricsPort: number;
  readonly logFile: string;
  coild?: ManagedProcess;
}

/** One fake pod: netns + Pod object + the container id the runtime would use. */
export interface LabPod {
  readonly name: string;
  readonly namespace: string;
  readonly ns: TestNetns;
  readonly containerId: string;
}

/** What one run of the coil executable printed. */
export interface CoilRun {
  readonly code: number | null;
  readonly stdout: string;
  readonly json: Record<string, unknown> | undefined;
  readonly ms: number;
}

/**
 * Watches the tests of the enclosing suite (node:test's `t.passed`, read in an afterEach hook) and
 * returns what the suite's `after` hook calls before stopping the lab: the lab's logs (coild,
 * apiserver, controller) on stderr when one of the tests failed, nothing otherwise.
 */
export function labLogsOnFailure(): (lab: NodeLab | undefined) => Promise<void> {
  let failed = false;
  afterEach((t) => {
    // Node 24 sets `passed` on a finished test's context; @types/node declares it on suites only.
    if ((t as { passed?: boolean }).passed === false) failed = true;
  });
  return async (lab) => {
    if (failed && lab) process.stderr.write(`${await lab.logs()}\n`);
  };
}

/** Why this tier cannot run here, or undefined. */
export function labSkipReason(): string | undefined {
  if (process.getuid?.() !== 0) return 'netns tests need root (uid 0)';
  if (!existsSync(COIL_BIN)) return `${COIL_BIN} is missing: run hack/build-cni.sh`;
  if (!existsSync(join(REPO_ROOT, 'dist/src/controller/main.js'))) return 'dist/src/controller/main.js is missing: build first';
  return undefined;
}

export class NodeLab {
  readonly admin: Client;
  readonly ip = new IpRunner();
  private readonly netns = new TestNetnsSet();
  private readonly nodes: LabNode[] = [];
  private controller: ManagedProcess | undefined;

  private constructor(
    readonly cp: ControlPlane,
    readonly dir: string,
  ) {
    this.admin = new Client(new ApiTransport(cp.kubeConfig), 'netns-test');
  }

  /**
   * Control plane with Coil's CRDs and the IPAM controller (no webhooks, no leader election).
   * @param o.controllerArgs extra controller flags (e.g. `--blockrequest-ttl=0`: a controller that,
   *   like Coil's, never deletes answered BlockRequests)
   */
  static async start(o: { controllerArgs?: readonly string[] } = {}): Promise<NodeLab> {
    const cp = await ControlPlane.start({ crds: coilCrds() });
    const lab = new NodeLab(cp, await mkdtemp(join(tmpdir(), 'coil-netns-')));
    try {
      lab.controller = await ManagedProcess.start({
        name: 'coil-controller', command: NODE, logFile: join(lab.dir, 'controller.log'),
        args: [join(REPO_ROOT, 'dist/src/controller/main.js'), '--kubeconfig', cp.kubeconfigPath, '--enable-webhooks=false', '--leader-elect=false', '--metrics-addr=0', '--health-addr=0', '--secure-endpoints=false', '--node-notready-reclaim=0', ...(o.controllerArgs ?? [])],
      });
    } catch (err) {
      await lab.stop();
      throw err;
    }
    return lab;
  }

  async createPool(name: string, spec: Partial<AddressPoolSpec> & Pick<AddressPoolSpec, 'subnets'>): Promise<void> {
    await this.admin.create(Kinds.AddressPool, { metadata: { name }, spec: { blockSizeBits: 5, ...spec } });
  }

  /**
   * The README's clean-up after an uninstall: every AddressBlock and the pool `name` deleted, their
   * finalizers released first (as the chart's post-delete hook does); resolves once both are gone.
   */
  async deleteBlocksAndPool(name: string): Promise<void> {
    for (const blk of await this.admin.list(Kinds.AddressBlock)) {
      await this.admin.removeFinalizer(Kinds.AddressBlock, blk, FIN_COIL);
      await this.admin.delete(Kinds.AddressBlock, { name: blk.metadata!.name! });
    }
    const pool = (await this.admin.get(Kinds.AddressPool, { name }))!;
    await this.admin.removeFinalizer(Kinds.AddressPool, pool, FIN_COIL);
    await this.admin.delete(Kinds.AddressPool, { name });
    await eventually(async () => (await this.admin.list(Kinds.AddressBlock)).length === 0 && !(await this.admin.get(Kinds.AddressPool, { name })));
  }

  async createNamespace(name: string, pool?: string): Promise<void> {
    const body = { apiVersion: 'v1', kind: 'Namespace', metadata: { name, ...(pool && { annotations: { [ANN_POOL]: pool } }) } };
    const res = await this.cp.request('POST', '/api/v1/namespaces', body);
    if (res.status !== 201) throw new Error(`create namespace ${name}: ${res.status} ${res.body}`);
  }

  /** A node netns and Node object with `ipv4` as InternalIP; coild is started separately. */
  async addNode(name: string, ipv4: string): Promise<LabNode> {
    const ns = await this.netns.create('node');
    await this.admin.create(Kinds.Node, { metadata: { name } });
    await this.admin.patchStatus(Kinds.Node, { name }, { addresses: [{ type: 'InternalIP', address: ipv4 }] });
    const node: LabNode = { name, ns, ipv4, socketPath: join(this.dir, `${name}.sock`), healthPort: await freePort(), metricsPort: await freePort(), logFile: join(this.dir, `coild-${name}.log`) };
    this.nodes.push(node);
    return node;
  }

  /**
   * Starts coild for `node` and waits for `/readyz`. coild runs as it does in the image: on the Bun
   * runtime inside the `coil` executable (README, "coild's runtime"); `COIL_COILD_RUNTIME=node`
   * runs it on Node 24 with its helpers instead.
   * @param env extra environment, e.g. `COIL_POD_NAMESPACE`/`COIL_POD_NAME` (coild's own Pod, whose
   *   owning DaemonSet tells an uninstall from a restart)
   */
  async startCoild(node: LabNode, extraArgs: readonly string[] = [], env: Record<string, string> = {}): Promise<void> {
    const onBun = process.env.COIL_COILD_RUNTIME !== 'node';
    node.coild = await ManagedProcess.start({
      name: `coild-${node.name}`, command: onBun ? COIL_BIN : NODE, logFile: node.logFile,
      env: { ...process.env, COIL_NODE_NAME: node.name, ...(onBun ? { BUN_BE_BUN: '1' } : {}), ...env },
      args: [
        ...(onBun ? ['--no-install', ...(process.env.COIL_COILD_BUN_FLAGS ?? '').split(' ').filter(Boolean), process.env.COIL_COILD_SCRIPT || coildBundle()] : [join(REPO_ROOT, 'dist/src/node-agent/main.js')]), '--kubeconfig', this.cp.kubeconfigPath, '--host-netns', node.ns.path,
        '--socket', node.socketPath, `--metrics-addr=127.0.0.1:${node.metricsPort}`, `--health-addr=127.0.0.1:${node.healthPort}`, '--secure-endpoints=false', ...extraArgs,
      ],
    });
    await waitFor(`coild ${node.name} ready`, async () => (await fetch(`http://127.0.0.1:${node.healthPort}/readyz`)).ok, { process: node.coild, timeoutMs: 30_000 });
  }

  /** Kills coild (SIGKILL by default: a crash). */
  async stopCoild(node: LabNode, signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    await node.coild?.stop({ signal, graceMs: 5_000 });
    node.coild = undefined;
  }

  /** PID of the IPAM controller, while it runs. */
  get controllerPid(): number | undefined {
    return this.controller?.pid;
  }

  /** Stops the IPAM controller (e.g. so its GC does not react to a Node deletion). */
  async stopController(): Promise<void> {
    await this.controller?.stop({ graceMs: 3_000 });
    this.controller = undefined;
  }

  /** A netns of the lab's own (removed by {@link stop}), e.g. for an egress pod. */
  netnsOf(role: string): Promise<TestNetns> {
    return this.netns.create(role);
  }

  /** A pod netns and a Pod object on `node`. */
  async createPod(node: LabNode, namespace: string, name: string): Promise<LabPod> {
    const ns = await this.netns.create('pod');
    await this.admin.create(Kinds.Pod, { metadata: { name, namespace }, spec: { nodeName: node.name, containers: [{ name: 'c', image: 'pause' }] } });
    return { name, namespace, ns, containerId: randomBytes(32).toString('hex') };
  }

  /** Removes a pod made by {@link createPod}: its netns (and the veth end inside) and its Pod object. */
  async dropPod(pod: LabPod): Promise<void> {
    await this.netns.remove(pod.ns);
    await this.admin.delete(Kinds.Pod, { namespace: pod.namespace, name: pod.name });
  }

  /**
   * Runs the coil executable as containerd does (env + netconf on stdin).
   * @param opts.env replaces/extends the CNI_* variables (a value of '' removes the variable)
   * @param opts.stdin raw stdin instead of the netconf
   */
  runCoil(node: LabNode, command: string, pod: LabPod, opts: { cniVersion?: string; env?: Record<string, string>; stdin?: string; netconf?: Record<string, unknown> } = {}): Promise<CoilRun> {
    const env: Record<string, string> = {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      CNI_COMMAND: command, CNI_CONTAINERID: pod.containerId, CNI_NETNS: pod.ns.path, CNI_IFNAME: 'eth0', CNI_PATH: '/opt/cni/bin',
      CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=${pod.namespace};K8S_POD_NAME=${pod.name};K8S_POD_INFRA_CONTAINER_ID=${pod.containerId};K8S_POD_UID=${pod.containerId.slice(0, 8)}`,
      ...opts.env,
    };
    for (const [k, v] of Object.entries(env)) if (v === '') delete env[k];
    const stdin = opts.stdin ?? JSON.stringify({ cniVersion: opts.cniVersion ?? '1.0.0', name: 'k8s-pod-network', type: 'coil', socket: node.socketPath, ...opts.netconf });
    return new Promise((resolve, reject) => {
      const start = performance.now();
      const child = spawn(COIL_BIN, [], { env, stdio: ['pipe', 'pipe', 'ignore'] });
      let stdout = '';
      child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
      child.on('error', reject);
      child.on('close', (code) => {
        let json: Record<string, unknown> | undefined;
        try {
          json = stdout.trim() === '' ? undefined : (JSON.parse(stdout) as Record<string, unknown>);
        } catch {
          json = undefined;
        }
        resolve({ code, stdout, json, ms: performance.now() - start });
      });
      child.stdin.end(stdin);
    });
  }

  /** coild's `/ipam` snapshot. */
  async snapshot(node: LabNode): Promise<IpamSnapshot> {
    const res = await fetch(`http://127.0.0.1:${node.healthPort}/ipam`);
    if (!res.ok) throw new Error(`/ipam: ${res.status}`);
    return (await res.json()) as IpamSnapshot;
  }

  /** Coil pod interfaces in the node's netns (alias + table-116 routes), read independently of coild. */
  hostPods(node: LabNode): Promise<PodNetworkEntry[]> {
    return new RtnetlinkPodNetwork({ ip: this.ip, hostNetns: node.ns.path }).list();
  }

  /** Names of the AddressBlocks labelled with `node`, from the API server. */
  async blocksOf(node: LabNode): Promise<string[]> {
    const list = await this.admin.list(Kinds.AddressBlock, { labelSelector: `coil.cybozu.com/node=${node.name}` });
    return list.map((b) => b.metadata!.name!).sort();
  }

  /** `ip -j <args>` in a netns, parsed. */
  async ipJson<T>(ns: TestNetns, args: readonly string[]): Promise<T> {
    const { stdout } = await this.ip.exec([this.ip.ipPath, '-j', ...args], { netns: ns.path });
    return JSON.parse(stdout || '[]') as T;
  }

  /** Logs of coild and the controller (printed by suites on failure). */
  async logs(): Promise<string> {
    const tails = await Promise.all([
      ...this.nodes.map(async (n) => `--- coild ${n.name}\n${n.coild ? await n.coild.logTail(40) : '(not running)'}`),
      this.controller ? this.controller.logTail(20).then((t) => `--- controller\n${t}`) : '',
    ]);
    return tails.join('\n');
  }

  /** Stops every process and removes every netns and the temp dir; never throws. */
  async stop(): Promise<void> {
    await Promise.all(this.nodes.map((n) => n.coild?.stop({ graceMs: 3_000 }).catch(() => undefined)));
    await this.controller?.stop({ graceMs: 3_000 }).catch(() => undefined);
    await this.netns.cleanup();
    await this.cp.stop().catch(() => undefined);
    await rm(this.dir, { recursive: true, force: true }).catch(() => undefined);
  }
}
