/**
 * The STAND-IN lab: coil's programs on netns "nodes" without kubelet or containerd, kept for the
 * e2e tests that still run on it (they move to the real-node lab, hack/lab/cluster.ts, next) and
 * for tests that need a synthetic CNI call. `npm run lab` runs the real-node lab, not this one.
 *
 * - a real control plane (etcd, kube-apiserver, kube-controller-manager) with the chart's CRDs,
 *   ServiceAccounts, RBAC and webhook configurations (webhooks pointed at the local controller);
 * - coil-controller as a local process, authenticated as the chart's `coil-controller`
 *   ServiceAccount;
 * - N nodes (network namespaces on a bridge), each with a Node object, coild running inside the
 *   node's namespace as the chart's `coild` ServiceAccount, and BIRD advertising table 119 over
 *   iBGP to the other nodes;
 * - a stand-in kubelet (stand-in-kubelet.ts) that makes pods through the real `coil` executable
 *   as libcni would; no container runtime, no pod sandbox.
 *
 * Every process runs under `setpriv --pdeathsig SIGKILL` (envtest's ManagedProcess); `down()`
 * (also on Ctrl-C) stops them and deletes every namespace and file the lab made.
 */
import { execFile } from 'node:child_process';
import { copyFile, mkdir, readFile, readdir, rm, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Server } from 'node:net';
import { promisify } from 'node:util';
import * as k8s from '@kubernetes/client-node';
import { parseAllDocuments } from 'yaml';
import { ControlPlane, REPO_ROOT, eventually, freePort } from '../../test/envtest/control-plane.js';
import { ManagedProcess, waitFor } from '../../test/envtest/process.js';
import { kubectl } from '../../test/envtest/tools.js';
import { prepareBird } from './bird.js';
import { applyChart, LAB_NAMESPACE, serviceAccountKubeconfig } from './credentials.js';
import { StandInKubelet, type LabPod, type PluginObserver } from './stand-in-kubelet.js';
import { unixToTcp } from './relay.js';
import { checkInvariants, type ClusterView, type Violation } from '../../test/invariants/check.js';
import { collectView, standInCniCache } from '../../test/invariants/collect.js';
import { Cluster, cniPluginsDir } from './cluster.js';
import { createTopology, ip, LAB_PREFIX, labNodes, type LabNode } from './topology.js';

/** Where the lab keeps its files (kubeconfigs, sockets, logs, BIRD configs). */
export const LAB_DIR = '/tmp/coil-lab';
/** The lab's default AddressPool range (also what BGP may carry). */
export const LAB_POD_RANGE = '10.120.0.0/16';
/** Port of the apiserver relay inside every node namespace. */
const NODE_APISERVER_PORT = 6443;
const COIL = join(REPO_ROOT, 'dist/bin/coil');
const SYSTEM_CNI_DIR = '/usr/lib/cni';
const run = promisify(execFile);

/** Options of {@link StandInLab.up}. */
export interface LabOptions {
  readonly nodes?: number;
  /** Progress messages (default: none). */
  readonly log?: (message: string) => void;
  /** Extra coild flags (e.g. a short --block-release-grace for tests). */
  readonly coildArgs?: readonly string[];
  /** Extra coil-controller flags. */
  readonly controllerArgs?: readonly string[];
  /** coil-controller replicas sharing the leader Lease (default 1). */
  readonly controllers?: number;
}

/** A running stand-in lab. */
export class StandInLab {
  readonly pods = new Map<string, LabPod>();
  private readonly coilds = new Map<string, ManagedProcess>();
  private readonly processes: ManagedProcess[] = [];
  private relay?: Server;
  /** coil-controller replicas (index → process); all share the Lease, one leads. */
  private readonly controllers = new Map<number, ManagedProcess>();
  private kubelet!: StandInKubelet;
  private controllerArgv: (replica: number) => string[] = () => [];
  private coildArgv = new Map<string, { args: string[]; env: NodeJS.ProcessEnv }>();
  /** Ports of each controller replica (index 0 serves the webhook the apiserver calls). */
  controllerPorts: { metrics: number; health: number; webhook: number }[] = [];

  private constructor(
    readonly cp: ControlPlane,
    readonly nodes: readonly LabNode[],
    private readonly log: (message: string) => void,
  ) {}

  /**
   * Brings the whole lab up: control plane, chart objects, controller, nodes with coild and
   * BIRD, and the default AddressPool. Does not create pods ({@link addPod}).
   * @throws Error after tearing down whatever was started.
   */
  static async up(options: LabOptions = {}): Promise<StandInLab> {
    const log = options.log ?? (() => undefined);
    await StandInLab.down();
    await mkdir(LAB_DIR, { recursive: true });
    log('starting etcd, kube-apiserver and kube-controller-manager');
    const crds = await chartCrds();
    const cp = await ControlPlane.start({ controllerManager: true, crds });
    const lab = new StandInLab(cp, labNodes(options.nodes ?? 3), log);
    try {
      // For `npm run lab -- check` and kubectl from another shell.
      await copyFile(cp.kubeconfigPath, join(LAB_DIR, 'admin.kubeconfig'));
      await lab.start(options);
      return lab;
    } catch (err) {
      await lab.stop();
      throw err;
    }
  }

  private async start(options: LabOptions): Promise<void> {
    // Webhook TLS for the local controller; the chart's webhook configurations point here.
    const certDir = join(LAB_DIR, 'certs');
    await mkdir(certDir, { recursive: true });
    const cert = await this.cp.newServingCert();
    await writeFile(join(certDir, 'tls.crt'), cert.certPem);
    await writeFile(join(certDir, 'tls.key'), cert.keyPem, { mode: 0o600 });
    for (let i = 0; i < (options.controllers ?? 1); i++) {
      this.controllerPorts.push({ metrics: await freePort(), health: await freePort(), webhook: await freePort() });
    }
    this.log('applying the chart: CRDs, ServiceAccounts, RBAC, webhook configurations');
    const { netconf } = await applyChart(this.cp, join(REPO_ROOT, 'charts/coil'), `https://127.0.0.1:${this.controllerPorts[0]!.webhook}`, cert.caPem);

    const controllerKubeconfig = await serviceAccountKubeconfig(this.cp, 'coil-controller', this.cp.server, join(LAB_DIR, 'coil-controller.kubeconfig'));
    this.controllerArgv = (replica) => [
      join(REPO_ROOT, 'dist/src/controller/main.js'),
      `--kubeconfig=${controllerKubeconfig}`,
      `--cert-dir=${certDir}`,
      `--webhook-addr=127.0.0.1:${this.controllerPorts[replica]!.webhook}`,
      `--metrics-addr=127.0.0.1:${this.controllerPorts[replica]!.metrics}`,
      `--health-addr=127.0.0.1:${this.controllerPorts[replica]!.health}`,
      '--secure-endpoints=false',
      `--leader-election-namespace=${LAB_NAMESPACE}`,
      '--gc-interval=10s',
      ...(options.controllerArgs ?? []),
    ];
    for (let i = 0; i < this.controllerPorts.length; i++) await this.startController(i);

    this.log('creating the default AddressPool (through the webhook)');
    await kubectl(this.cp.kubeconfigPath, ['apply', '-f', '-'], JSON.stringify({
      apiVersion: 'coil.cybozu.com/v2', kind: 'AddressPool', metadata: { name: 'default' },
      spec: { blockSizeBits: 5, subnets: [{ ipv4: LAB_POD_RANGE }] },
    }));

    this.log(`creating ${this.nodes.length} nodes (network namespaces on a bridge)`);
    await createTopology(this.nodes);
    this.relay = await unixToTcp(join(LAB_DIR, 'apiserver.sock'), '127.0.0.1', this.cp.apiPort);
    const cniBin = join(LAB_DIR, 'cni-bin');
    await linkCniExecutables(cniBin);
    const core = this.cp.kubeConfig.makeApiClient(k8s.CoreV1Api);
    const coildKubeconfig = await serviceAccountKubeconfig(this.cp, 'coild', `https://127.0.0.1:${NODE_APISERVER_PORT}`, join(LAB_DIR, 'coild.kubeconfig'));
    for (const node of this.nodes) {
      const dir = join(LAB_DIR, node.name);
      await mkdir(dir, { recursive: true });
      await this.registerNode(node);
      this.processes.push(await this.inNode(node, 'relay', [process.execPath, join(REPO_ROOT, 'dist/hack/lab/relay.js'), 'tcp-to-unix', `127.0.0.1:${NODE_APISERVER_PORT}`, join(LAB_DIR, 'apiserver.sock')]));
      this.coildArgv.set(node.name, {
        args: [
          process.execPath, join(REPO_ROOT, 'dist/src/node-agent/main.js'),
          `--kubeconfig=${coildKubeconfig}`, `--socket=${join(dir, 'coild.sock')}`,
          '--metrics-addr=127.0.0.1:9384', '--health-addr=127.0.0.1:9385', '--secure-endpoints=false',
          ...(options.coildArgs ?? []),
        ],
        env: { ...process.env, COIL_NODE_NAME: node.name },
      });
      await this.startCoild(node);
      this.processes.push(await this.inNode(node, 'bird', await prepareBird(node, this.nodes, LAB_POD_RANGE, dir)));
    }
    this.kubelet = new StandInKubelet({
      kubeConfig: this.cp.kubeConfig,
      netconf,
      cniPath: cniBin,
      socketOf: (node) => join(LAB_DIR, node.name, 'coild.sock'),
      cacheDir: join(LAB_DIR, 'cni-cache'),
    });
  }

  /** Creates the Node object of `node` with its InternalIP and a Ready condition. */
  private async registerNode(node: LabNode): Promise<void> {
    const core = this.cp.kubeConfig.makeApiClient(k8s.CoreV1Api);
    await core.createNode({ body: { metadata: { name: node.name, labels: { 'kubernetes.io/hostname': node.name } } } });
    await core.patchNodeStatus(
      { name: node.name, body: { status: { addresses: [{ type: 'InternalIP', address: node.ipv4 }], conditions: [{ type: 'Ready', status: 'True', reason: 'Lab', message: 'lab node' }] } } },
      k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
    );
  }

  /** Deletes the Node object of `node` (its coild should be stopped first). */
  async removeNode(node: LabNode): Promise<void> {
    await this.cp.kubeConfig.makeApiClient(k8s.CoreV1Api).deleteNode({ name: node.name });
  }

  /** Registers `node` again and starts its coild (after {@link removeNode}). */
  async addNode(node: LabNode): Promise<void> {
    await this.registerNode(node);
    await this.startCoild(node);
  }

  /**
   * Makes a pod vanish as when its node dies: its netns, Pod object and the kubelet's cache
   * entry go, and no CNI DEL runs.
   */
  async forgetPod(name: string): Promise<void> {
    const pod = this.pods.get(name);
    if (!pod) return;
    await ip(['netns', 'del', pod.netns]).catch(() => undefined);
    await eventually(async () => {
      await this.cp.kubeConfig.makeApiClient(k8s.CoreV1Api).deleteNamespacedPod({ name: pod.name, namespace: pod.namespace, gracePeriodSeconds: 0 })
        .catch((err: unknown) => { if (!(err instanceof k8s.ApiException && err.code === 404)) throw err; });
      return true;
    }, { timeoutMs: 60_000, intervalMs: 500 });
    await rm(join(LAB_DIR, 'cni-cache', `${pod.namespace}_${pod.name}.json`), { force: true });
    this.pods.delete(name);
  }

  /** Starts a process inside `node`'s network namespace, logging to the node's dir. */
  private inNode(node: LabNode, name: string, argv: readonly string[], env?: NodeJS.ProcessEnv): Promise<ManagedProcess> {
    return ManagedProcess.start({
      name: `${name}@${node.name}`,
      command: 'nsenter',
      args: [`--net=${node.netnsPath}`, ...argv],
      logFile: join(LAB_DIR, node.name, `${name}.log`),
      ...(env ? { env } : {}),
    });
  }

  /** Starts coil-controller replica `replica` (default 0) and waits for its /readyz. */
  async startController(replica = 0): Promise<void> {
    const proc = await ManagedProcess.start({
      name: `coil-controller-${replica}`, command: process.execPath, args: this.controllerArgv(replica),
      logFile: join(LAB_DIR, `coil-controller-${replica}.log`),
    });
    this.controllers.set(replica, proc);
    const url = `http://127.0.0.1:${this.controllerPorts[replica]!.health}/readyz`;
    await waitFor(`coil-controller-${replica} /readyz`, async () => (await fetch(url)).ok, { process: proc, timeoutMs: 60_000 });
  }

  /** Stops a coil-controller replica (default 0; SIGKILL with `crash`). */
  async stopController(options: { crash?: boolean; replica?: number } = {}): Promise<void> {
    const replica = options.replica ?? 0;
    await this.controllers.get(replica)?.stop(options.crash ? { signal: 'SIGKILL' } : {});
    this.controllers.delete(replica);
  }

  /** Index of the replica whose metrics say it leads, or undefined. */
  async leaderReplica(): Promise<number | undefined> {
    for (const replica of this.controllers.keys()) {
      const text = await fetch(`http://127.0.0.1:${this.controllerPorts[replica]!.metrics}/metrics`).then((r) => r.text(), () => '');
      if (/^leader_election_master_status\{[^}]*\} 1$/m.test(text)) return replica;
    }
    return undefined;
  }

  /** Starts coild on `node` and waits until its socket answers (its /readyz inside the node). */
  async startCoild(node: LabNode): Promise<void> {
    const spec = this.coildArgv.get(node.name)!;
    const proc = await this.inNode(node, 'coild', spec.args, spec.env);
    this.coilds.set(node.name, proc);
    await waitFor(`coild on ${node.name}`, async () => (await this.nodeHttp(node, 9385, '/readyz')).startsWith('ok'), { process: proc, timeoutMs: 60_000 });
  }

  /** Stops coild on `node` (SIGKILL with `crash`). */
  async stopCoild(node: LabNode, options: { crash?: boolean } = {}): Promise<void> {
    await this.coilds.get(node.name)?.stop(options.crash ? { signal: 'SIGKILL' } : {});
    this.coilds.delete(node.name);
  }

  /** Makes coild on `node` run a GC pass now (SIGHUP), without waiting for it. */
  triggerGc(node: LabNode): void {
    this.coilds.get(node.name)?.signal('SIGHUP');
  }

  /** GET http://127.0.0.1:<port><path> inside `node`'s namespace; resolves with the body ('' on failure). */
  async nodeHttp(node: LabNode, port: number, path: string): Promise<string> {
    const script = `fetch('http://127.0.0.1:${port}${path}').then(async r=>{process.stdout.write((r.ok?'':'HTTP '+r.status+' ')+await r.text())}).catch(()=>{})`;
    const { stdout } = await run('nsenter', [`--net=${node.netnsPath}`, process.execPath, '-e', script]).catch(() => ({ stdout: '' }));
    return stdout;
  }

  /** Makes a pod on `node` through the stand-in kubelet; `observe` is told when each CNI plugin runs. */
  async addPod(node: LabNode, name: string, namespace = 'default', options: { observe?: PluginObserver } = {}): Promise<LabPod> {
    const pod = await this.kubelet.addPod(node, name, namespace, options);
    this.pods.set(name, pod);
    return pod;
  }

  /**
   * Runs Egress `namespace/name` in the lab: creates it (1 replica), lets the controller and
   * kube-controller-manager make its Deployment, ReplicaSet and Pod, binds the Pod to `node`
   * (the lab has no scheduler), wires it through CNI like any pod, and starts the real
   * coil-egress inside the pod's namespace with the pod's ServiceAccount token. The Pod's Ready
   * condition follows coil-egress's /readyz (false on this machine: its kernel has no FoU).
   * @returns what a user would look at: the pod, coil-egress's /readyz text and the nft ruleset.
   */
  async runEgress(namespace: string, name: string, destinations: readonly string[], node = this.nodes[0]!): Promise<{ pod: LabPod; readyz: string; nft: string }> {
    await kubectl(this.cp.kubeconfigPath, ['apply', '-f', '-'], [
      JSON.stringify({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: namespace } }),
      JSON.stringify({ apiVersion: 'coil.cybozu.com/v2', kind: 'Egress', metadata: { name, namespace }, spec: { replicas: 1, destinations } }),
    ].join('\n'));
    const core = this.cp.kubeConfig.makeApiClient(k8s.CoreV1Api);
    const selector = `app.kubernetes.io/instance=${name},app.kubernetes.io/component=egress`;
    const podObj = await eventually(async () => (await core.listNamespacedPod({ namespace, labelSelector: selector })).items[0] ?? false, { timeoutMs: 60_000 });
    const podName = podObj.metadata!.name!;
    const binding = await this.cp.request('POST', `/api/v1/namespaces/${namespace}/pods/${podName}/binding`, {
      apiVersion: 'v1', kind: 'Binding', metadata: { name: podName }, target: { apiVersion: 'v1', kind: 'Node', name: node.name },
    });
    if (binding.status >= 300) throw new Error(`binding ${podName}: ${binding.body}`);
    const pod = await this.kubelet.runPod(node, podName, namespace, { ready: false });
    this.pods.set(podName, pod);

    // The pod's own processes: a relay to the apiserver and coil-egress, as its container runs it.
    const dir = join(LAB_DIR, `egress-${namespace}-${name}`);
    await mkdir(dir, { recursive: true });
    const sa = podObj.spec?.serviceAccountName ?? 'coil-egress';
    const kubeconfig = await serviceAccountKubeconfig(this.cp, sa, `https://127.0.0.1:${NODE_APISERVER_PORT}`, join(dir, 'kubeconfig'), namespace);
    const container = podObj.spec!.containers.find((c) => c.name === 'egress')!;
    const podNode: LabNode = { name: podName, netns: pod.netns, netnsPath: `/run/netns/${pod.netns}`, ipv4: pod.ips[0]! };
    const start = (what: string, argv: string[], env?: NodeJS.ProcessEnv) => ManagedProcess.start({
      name: `${what}@${podName}`, command: 'nsenter', args: [`--net=${podNode.netnsPath}`, ...argv], logFile: join(dir, `${what}.log`), ...(env ? { env } : {}),
    });
    this.processes.push(await start('relay', [process.execPath, join(REPO_ROOT, 'dist/hack/lab/relay.js'), 'tcp-to-unix', `127.0.0.1:${NODE_APISERVER_PORT}`, join(LAB_DIR, 'apiserver.sock')]));
    const egress = await start('coil-egress', [
      process.execPath, join(REPO_ROOT, 'dist/src/egress-agent/main.js'), ...(container.args ?? []),
      `--kubeconfig=${kubeconfig}`, '--metrics-addr=127.0.0.1:8080', '--health-addr=127.0.0.1:8081', '--secure-endpoints=false',
    ], { ...process.env, COIL_POD_NAMESPACE: namespace, COIL_EGRESS_NAME: name, COIL_POD_ADDRESSES: pod.ips.join(',') });
    this.processes.push(egress);
    await waitFor(`coil-egress of ${namespace}/${name}`, async () => (await this.nodeHttp(podNode, 8081, '/healthz')) !== '', { process: egress, timeoutMs: 60_000 });
    // coil-egress serves its probes first, then probes the kernel, then installs its NAT rules: its
    // state (readyz, the ruleset) is settled once the `nat` check passes. Read earlier, under load,
    // the ruleset lacked the FORWARD rule and readyz could still say the kernel was not probed.
    const readyz = await eventually(async () => {
      const body = await this.nodeHttp(podNode, 8081, '/readyz');
      return body !== '' && !body.includes('[-]nat failed') ? body : false;
    }, { timeoutMs: 60_000, intervalMs: 100 });
    await this.kubelet.setStatus(podName, namespace, pod.ips, readyz.startsWith('ok'));
    const { stdout: nft } = await run('ip', ['netns', 'exec', pod.netns, 'nft', 'list', 'ruleset']);
    return { pod, readyz, nft };
  }

  /** Deletes a pod (CNI DEL, netns, Pod object); `observe` is told when each CNI plugin runs. */
  async deletePod(name: string, options: { observe?: PluginObserver } = {}): Promise<void> {
    const pod = this.pods.get(name);
    if (!pod) return;
    await this.kubelet.deletePod(this.nodes.find((n) => n.name === pod.node)!, pod.name, pod.namespace, options);
    this.pods.delete(name);
  }

  /** True when `from` reaches `address` (one ping, 2 s). */
  async ping(from: LabPod, address: string): Promise<boolean> {
    return ip(['netns', 'exec', from.netns, 'ping', '-c1', '-W2', address]).then(() => true, () => false);
  }

  /**
   * Waits until every node's main table has a BGP route for every block of the other nodes
   * (as listed in their table 119).
   */
  async waitForBgp(timeoutMs = 60_000): Promise<void> {
    await eventually(async () => {
      for (const node of this.nodes) {
        for (const other of this.nodes.filter((n) => n !== node)) {
          const exported = (await ip(['-n', other.netns, '-4', 'route', 'show', 'table', '119'])).split('\n').map((l) => l.split(' ')[0]).filter(Boolean);
          const learned = await ip(['-n', node.netns, '-4', 'route', 'show', 'proto', 'bird']);
          for (const cidr of exported) if (!learned.includes(`${cidr} `)) return false;
        }
      }
      return true;
    }, { timeoutMs, intervalMs: 250 });
  }

  /** The observed state of the lab, for the invariant checker. */
  view(): Promise<ClusterView> {
    return collectView({
      kubeConfig: this.cp.kubeConfig,
      nodes: this.nodes,
      containerIds: () => standInCniCache(join(LAB_DIR, 'cni-cache')),
      fetchIpam: async (name) => {
        const body = await this.nodeHttp(this.nodes.find((n) => n.name === name)!, 9385, '/ipam');
        return body.startsWith('{') ? body : undefined;
      },
    });
  }

  /** Checks every invariant now; `afterGc` adds "no block without a user". */
  async check(options: { afterGc?: boolean } = {}): Promise<Violation[]> {
    return checkInvariants(await this.view(), options);
  }

  /** A human-readable summary: pods per node with IPs, blocks per node, table 119 per node. */
  async status(): Promise<string> {
    const lines: string[] = [];
    for (const node of this.nodes) {
      const pods = [...this.pods.values()].filter((p) => p.node === node.name).map((p) => `${p.name}=${p.ips.join(',')}`);
      const t119 = (await ip(['-n', node.netns, '-4', 'route', 'show', 'table', '119'])).trim().split('\n').filter(Boolean).map((l) => l.split(' ')[0]);
      lines.push(`${node.name} (${node.ipv4}): pods ${pods.join(' ') || '-'}; table 119: ${t119.join(' ') || '-'}`);
    }
    lines.push('', await kubectl(this.cp.kubeconfigPath, ['get', 'addressblocks']));
    return lines.join('\n');
  }

  /** Stops every process, the control plane, and removes namespaces and files. */
  async stop(): Promise<void> {
    for (const proc of [...this.coilds.values(), ...this.processes]) await proc.stop({ graceMs: 5000 }).catch(() => undefined);
    for (const replica of [...this.controllers.keys()]) await this.stopController({ replica }).catch(() => undefined);
    this.relay?.close();
    await this.cp.stop().catch(() => undefined);
    await StandInLab.down();
  }

  /**
   * Removes what any lab left in {@link LAB_DIR} under the `coillab-` prefix: this lab's
   * namespaces and files, and also what a killed real-node lab (hack/lab/cluster.ts), which uses
   * the same dir and prefix, left: its node cgroups with their processes, its pinned mount
   * namespaces and the private mount of their pin dir. Without the latter, removing the dir
   * fails with EBUSY, and so does every stand-in lab after a killed real one on the machine.
   * Processes of this lab die with the lab process (pdeathsig); BIRD, coild and relays are
   * children of it.
   */
  static async down(): Promise<void> {
    await Cluster.down({ prefix: LAB_PREFIX, dir: LAB_DIR });
  }
}

/** The CRDs as the chart ships them (charts/coil/templates/crds: plain YAML, no template directive). */
async function chartCrds(): Promise<object[]> {
  const dir = join(REPO_ROOT, 'charts/coil/templates/crds');
  const out: object[] = [];
  for (const file of (await readdir(dir)).filter((f) => f.endsWith('.yaml')).sort()) {
    for (const doc of parseAllDocuments(await readFile(join(dir, file), 'utf8'))) out.push(doc.toJS() as object);
  }
  return out;
}

/**
 * A CNI_PATH dir: our `coil`, the reference plugins built here that take the chart's cniVersion
 * 1.1.0 conflist (portmap, loopback: hack/build-cni-plugins.sh), and the system's other reference
 * plugins when installed.
 */
async function linkCniExecutables(dir: string): Promise<void> {
  await mkdir(dir, { recursive: true });
  await symlink(COIL, join(dir, 'coil'));
  const built = await cniPluginsDir();
  for (const name of await readdir(built)) await symlink(join(built, name), join(dir, name));
  for (const name of await readdir(SYSTEM_CNI_DIR).catch(() => [] as string[])) {
    if (name !== 'coil') await symlink(join(SYSTEM_CNI_DIR, name), join(dir, name)).catch(() => undefined);
  }
}
