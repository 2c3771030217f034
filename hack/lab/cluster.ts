/**
 * The real-node lab: a Kubernetes cluster on one machine, built from real parts, with coil
 * installed by helm from the image hack/build-image.sh built.
 *
 * - control plane (root namespace, 127.0.0.1): etcd, kube-apiserver, kube-controller-manager
 *   (test/envtest/control-plane.ts) and kube-scheduler;
 * - N nodes (kube-node.ts): each a network namespace, mount namespace and cgroup of its own with
 *   containerd, kubelet, kube-proxy, BIRD and a relay to the apiserver, on one L2 segment
 *   (topology.ts; the switch namespace is the lab's router and does not forward);
 * - the images of build-image.sh imported into every node's containerd (nothing is pulled);
 * - the chart installed with the real helm: coil-controller and coild run as Pods kubelet starts;
 *   pods made through the API are started by kubelet through containerd, and libcni calls the
 *   `coil` executable the chart's init container installed.
 *
 * How the control plane and the nodes reach each other without touching the machine's own
 * network namespace:
 *   nodes → apiserver   each node's relay (127.0.0.1:6443 and <node IP>:6443) → a UNIX socket in
 *                       the lab dir → the apiserver. The `kubernetes` Service's endpoints are the
 *                       relays (the lab writes its EndpointSlice), so pods reach the API too.
 *   apiserver → nodes   its egress selector sends "cluster" traffic (webhooks, kubelet for exec and
 *                       logs) to an HTTP CONNECT proxy on a UNIX socket, running in the switch
 *                       namespace; --enable-aggregator-routing makes it dial a Service's endpoints
 *                       (webhook pods are hostNetwork: node IPs) instead of its ClusterIP.
 *
 * One Cluster per test suite: {@link Cluster.up} → tests → {@link Cluster.stop}. Names are
 * prefixed (`coillab-` by default; COIL_LAB_PREFIX / COIL_LAB_DIR for a second lab beside it), and
 * {@link Cluster.down} removes what a crashed run of that prefix left.
 */
import { execFile } from 'node:child_process';
import { mkdir, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import type { Server } from 'node:net';
import { join } from 'node:path';
import { promisify } from 'node:util';
import * as k8s from '@kubernetes/client-node';
import { ControlPlane, KCM_CONTROLLERS, REPO_ROOT, buildEnv, eventually, kubernetesVersion } from '../../test/envtest/control-plane.js';
import { ManagedProcess, waitFor } from '../../test/envtest/process.js';
import { kubectl, toolPath } from '../../test/envtest/tools.js';
import { checkInvariants, type ClusterView, type Violation } from '../../test/invariants/check.js';
import { collectView, libcniCache } from '../../test/invariants/collect.js';
import { readOciArchive } from '../image/oci.js';
import { cgroupsWithPrefix, hierarchies } from './cgroups.js';
import { DEFAULT_CONTAINERD, parseContainerdLine, type ContainerdLine, type ContainerdRuntime } from './containerd.js';
import { KubeNode, NODE_APISERVER_PORT } from './kube-node.js';
import { NodeHost, pinDir, unpinDir } from './node-host.js';
import { unixToTcp } from './relay.js';
import { createTopology, destroyTopology, labNodes, listLabNetns, switchNetns, type LabNode } from './topology.js';

const run = promisify(execFile);

/** The lab's defaults; COIL_LAB_PREFIX and COIL_LAB_DIR choose others (a development lab). */
export const DEFAULT_PREFIX = process.env.COIL_LAB_PREFIX ?? 'coillab-';
export const DEFAULT_DIR = process.env.COIL_LAB_DIR ?? '/tmp/coil-lab';
/** The default AddressPool's IPv4 range. */
export const POD_RANGE = '10.120.0.0/16';
/**
 * The default AddressPool's IPv6 range in a dual-stack lab: as many addresses as {@link POD_RANGE}
 * (16 host bits; an AddressPool's subnets of both families must be of one size).
 */
export const POD_RANGE_V6 = 'fd00:10:120::/112';
/**
 * What BGP may carry between the nodes: the default pool and every pool the lab's tests make
 * (10.120.0.0–10.127.255.255 and fd00:10::/32).
 */
export const BGP_RANGES: readonly string[] = ['10.120.0.0/13', 'fd00:10::/32'];
/** Namespace of the chart's release. */
export const RELEASE_NAMESPACE = 'kube-system';
/** This tree's chart. */
const CHART = join(REPO_ROOT, 'charts/coil');
/** The workload image build-image.sh makes (busybox). */
export const WORKLOAD_IMAGE = 'coil.local/busybox:1';

/** Where a lab lives: its name prefix and its directory. */
export interface LabPlace {
  readonly prefix?: string;
  readonly dir?: string;
}

/** Options of {@link Cluster.up}. */
export interface ClusterOptions extends LabPlace {
  /** Nodes (default 3). */
  readonly nodes?: number;
  /** Pods per node (kubelet's maxPods; default 250, room for 110 test pods beside the system's). */
  readonly maxPods?: number;
  /** Install the chart (default true); false leaves install/upgrade to the caller ({@link installChart}). */
  readonly installChart?: boolean;
  /** Extra `helm --set` values for the install. */
  readonly chartValues?: readonly string[];
  /**
   * A dual-stack default pool (default true): {@link POD_RANGE} and {@link POD_RANGE_V6}, so every
   * pod gets an IPv4 and an IPv6 address. The nodes have IPv6 addresses and BIRD carries IPv6
   * blocks either way; false gives an IPv4-only pool.
   */
  readonly dualStack?: boolean;
  /**
   * The nodes' containerd (default: COIL_LAB_CONTAINERD, else {@link DEFAULT_CONTAINERD} —
   * containerd 2 built here; `1.6`: Debian's). The chart's conflist version follows
   * ({@link labChartValues}).
   */
  readonly containerd?: ContainerdLine;
  /** Progress messages. */
  readonly log?: (message: string) => void;
  /**
   * The Kubernetes release of the control plane and the nodes: a minor listed in
   * hack/kubernetes-versions (`1.33`). Default: `$COIL_KUBERNETES`, else the table's newest.
   */
  readonly kubernetes?: string;
}

/** An image build-image.sh built, as imported into the nodes. */
export interface LabImage {
  readonly ref: string;
  readonly archive: string;
  /** Digest of the archive's manifest (what containerd records as the image's target). */
  readonly manifestDigest: string;
  readonly configDigest: string;
}

/** What a lab of some prefix left on the machine (all empty after a clean stop). */
export interface Leftovers {
  readonly netns: string[];
  readonly mounts: string[];
  readonly cgroups: string[];
  readonly processes: string[];
  readonly dir: boolean;
}

/** A running real-node lab. */
export class Cluster {
  readonly nodes: KubeNode[] = [];
  readonly images = new Map<string, LabImage>();
  private scheduler?: ManagedProcess;
  private egressProxy?: ManagedProcess;
  private apiRelay?: Server;
  private readonly helmEnv: NodeJS.ProcessEnv;

  private constructor(
    readonly cp: ControlPlane,
    readonly prefix: string,
    readonly dir: string,
    readonly labNodes: readonly LabNode[],
    private readonly log: (message: string) => void,
    /** The default pool has an IPv6 subnet ({@link ClusterOptions.dualStack}). */
    readonly dualStack: boolean,
    /** The nodes' containerd ({@link ClusterOptions.containerd}). */
    readonly runtime: ContainerdRuntime,
  ) {
    this.helmEnv = { ...process.env, HELM_CACHE_HOME: join(dir, 'helm/cache'), HELM_CONFIG_HOME: join(dir, 'helm/config'), HELM_DATA_HOME: join(dir, 'helm/data') };
  }

  /** The lab's UNIX socket to the apiserver. */
  static apiserverSocket(dir: string): string {
    return join(dir, 'apiserver.sock');
  }

  /**
   * Brings the lab up (removing first what a crashed lab of the same prefix left): control plane,
   * nodes with the images imported, and, unless `installChart: false`, coil with a default
   * AddressPool of {@link POD_RANGE} ({@link installCoil}), waiting until every node is Ready.
   * @throws Error after stopping whatever was started.
   */
  static async up(options: ClusterOptions = {}): Promise<Cluster> {
    const prefix = options.prefix ?? DEFAULT_PREFIX;
    const dir = options.dir ?? DEFAULT_DIR;
    const log = options.log ?? (() => undefined);
    await Cluster.down({ prefix, dir });
    await mkdir(dir, { recursive: true });
    const nodes = labNodes(options.nodes ?? 3, prefix);

    log('building the images (hack/build-image.sh)');
    const built = await buildImages();
    const runtime = await containerdRuntime(options.containerd ?? parseContainerdLine(process.env.COIL_LAB_CONTAINERD));
    log(`containerd ${runtime.line}: ${runtime.binDir ?? 'Debian\'s'}; CNI plugins from ${runtime.cniPluginDir}`);
    log('starting etcd, kube-apiserver, kube-controller-manager');
    const egressSocket = join(dir, 'egress.sock');
    const egressConfig = join(dir, 'egress-selector.yaml');
    await writeFile(egressConfig, egressSelectorConfig(egressSocket));
    const kubernetes = options.kubernetes ?? kubernetesVersion();
    const cp = await ControlPlane.start({
      kubernetes,
      controllerManager: true,
      dir: join(dir, 'control-plane'),
      apiServerArgs: [
        '--authorization-mode=Node,RBAC',
        '--enable-admission-plugins=NodeRestriction',
        // envtest turns ServiceAccount admission off; real pods need their token volumes.
        '--disable-admission-plugins=',
        `--egress-selector-config-file=${egressConfig}`,
        '--enable-aggregator-routing=true',
        '--kubelet-preferred-address-types=InternalIP',
      ],
      controllerManagerArgs: [`--controllers=${[...KCM_CONTROLLERS, ...NODE_CONTROLLERS].join(',')}`, `--root-ca-file=${join(dir, 'control-plane/pki/ca.crt')}`,
        `--service-account-private-key-file=${join(dir, 'control-plane/pki/sa.key')}`],
    });
    const cluster = new Cluster(cp, prefix, dir, nodes, log, options.dualStack ?? true, runtime);
    try {
      await cluster.start({ ...options, kubernetes }, built, egressSocket);
      return cluster;
    } catch (err) {
      await cluster.stop();
      throw err;
    }
  }

  private async start(options: ClusterOptions, built: { ref: string; archive: string }[], egressSocket: string): Promise<void> {
    await writeFile(join(this.dir, 'admin.kubeconfig'), await readFile(this.cp.kubeconfigPath));
    for (const b of built) {
      const oci = await readOciArchive(b.archive);
      this.images.set(b.ref, { ...b, manifestDigest: oci.manifestDigest, configDigest: oci.configDigest });
    }
    const binDir = await nodeBinDir(options.kubernetes);
    this.log('starting kube-scheduler');
    this.scheduler = await ManagedProcess.start({
      name: 'kube-scheduler', command: join(binDir, 'kube-scheduler'), logFile: join(this.cp.dir, 'kube-scheduler.log'),
      args: [`--kubeconfig=${this.cp.kubeconfigPath}`, '--leader-elect=false', '--secure-port=0', '--v=1'],
    });
    await this.publishApiEndpoints(this.labNodes);

    this.log(`creating ${this.labNodes.length} nodes: network namespaces on a switch`);
    await createTopology(this.labNodes, { prefix: this.prefix, router: true });
    this.apiRelay = await unixToTcp(Cluster.apiserverSocket(this.dir), '127.0.0.1', this.cp.apiPort);
    this.egressProxy = await ManagedProcess.start({
      name: 'egress-proxy', command: 'nsenter', logFile: join(this.dir, 'egress-proxy.log'),
      args: [`--net=/run/netns/${switchNetns(this.prefix)}`, process.execPath, join(REPO_ROOT, 'dist/hack/lab/relay.js'), 'connect-proxy', egressSocket],
    });
    await waitFor('egress proxy', async () => (await this.egressProxy!.logTail()).includes('CONNECT proxy'), { process: this.egressProxy });

    await pinDir(join(this.dir, 'ns'));
    const sandboxImage = built.find((b) => b.ref.includes('/pause:'))!.ref;
    await Promise.all(this.labNodes.map(async (node) => {
      const kube = await KubeNode.create({
        node, peers: this.labNodes, dir: join(this.dir, node.name), cgroup: `/${node.name}`, pinDir: join(this.dir, 'ns'),
        apiserverSocket: Cluster.apiserverSocket(this.dir), binDir, sandboxImage, runtime: this.runtime, bgpRanges: BGP_RANGES, maxPods: options.maxPods ?? 250,
      }, this.cp);
      this.nodes.push(kube);
      await kube.start('relay');
      await kube.start('containerd');
      for (const image of this.images.values()) await kube.importImage(image.archive, image.ref);
      for (const d of ['kubelet', 'kube-proxy', 'bird'] as const) await kube.start(d);
      this.log(`${node.name}: containerd, kubelet, kube-proxy and BIRD running; images imported`);
    }));
    this.nodes.sort((a, b) => a.name.localeCompare(b.name));
    await eventually(async () => (await this.core().listNode()).items.length === this.nodes.length, { timeoutMs: 120_000, intervalMs: 500 });
    if (options.installChart ?? true) await this.installCoil(options.chartValues ?? []);
  }

  /**
   * Installs coil as README's "Install on a cluster" says: `helm install` with
   * `defaultPool.create=true` (the AddressPool `default` of {@link POD_RANGE}, and
   * {@link POD_RANGE_V6} in a dual-stack lab, made by coil-controller once its webhook serves)
   * and no `--wait`; then waits for coil-controller, coild on every node and the nodes to be Ready.
   * @param options.dualStack the default pool's IPv6 subnet; default: the lab's. `false` in a
   *   dual-stack lab is the README's first (IPv4-only) example over pods that have IPv6 too.
   * @param options.chart another chart directory (a previous release's: hack/lab/release-build.ts);
   *   default this tree's charts/coil
   */
  async installCoil(values: readonly string[] = [], options: { dualStack?: boolean; chart?: string } = {}): Promise<void> {
    this.log('helm install coil charts/coil -n kube-system --set defaultPool.create=true');
    await this.installChart([
      'defaultPool.create=true', `defaultPool.subnets[0].ipv4=${POD_RANGE}`,
      ...(options.dualStack ?? this.dualStack ? [`defaultPool.subnets[0].ipv6=${POD_RANGE_V6}`] : []),
      ...labChartValues(this.nodes.length, this.runtime), ...values,
    ], { wait: false, ...(options.chart ? { chart: options.chart } : {}) });
    await this.waitRollout('deployment/coil-controller');
    await this.waitRollout('daemonset/coild');
    await this.waitNodesReady();
    this.log('coil-controller and coild are Ready, the AddressPool default exists, every node is Ready');
  }

  /** `kubectl rollout status` of a release object in kube-system (5 min). */
  async waitRollout(object: string): Promise<void> {
    await this.kubectl(['rollout', 'status', '-n', RELEASE_NAMESPACE, object, '--timeout=300s']);
  }

  /** Admin client for `api`. */
  api<T extends k8s.ApiType>(api: new (config: k8s.Configuration) => T): T {
    return this.cp.kubeConfig.makeApiClient(api);
  }

  private core(): k8s.CoreV1Api {
    return this.api(k8s.CoreV1Api);
  }

  /** The node named `name`. @throws Error for an unknown name. */
  node(name: string): KubeNode {
    const node = this.nodes.find((n) => n.name === name);
    if (!node) throw new Error(`no lab node ${name}`);
    return node;
  }

  /**
   * The observed state for the invariant checker: objects from the apiserver, coil veths from
   * each node's netns, coild's allocations from its `GET /ipam`, container ids from each node's
   * libcni cache (containerd keeps it in the node's /var/lib/cni).
   */
  view(): Promise<ClusterView> {
    return collectView({
      kubeConfig: this.cp.kubeConfig,
      nodes: this.nodes.map((n) => ({ name: n.name, netnsPath: n.spec.node.netnsPath })),
      containerIds: () => libcniCache(this.nodes.map((n) => n.host.hostPath('/var/lib/cni'))),
      fetchIpam: async (name) => {
        const body = await this.coildIpam(name);
        return body.startsWith('{') ? body : undefined;
      },
    });
  }

  private readerToken: { token: string; untilMs: number } | undefined;

  /**
   * coild's `GET /ipam` on node `name`, as `kubectl coil` reads it: HTTPS with a token of the
   * chart's ServiceAccount coil-ipam-reader (minted by the admin, kept 5 of its 10 minutes).
   * @returns the body ('' when coild does not answer; `HTTP <status> …` on an error status)
   */
  async coildIpam(name: string): Promise<string> {
    if (!this.readerToken || this.readerToken.untilMs < Date.now()) {
      const token = (await this.kubectl(['create', 'token', 'coil-ipam-reader', '-n', RELEASE_NAMESPACE, '--duration=10m'])).trim();
      this.readerToken = { token, untilMs: Date.now() + 300_000 };
    }
    return this.node(name).http('127.0.0.1', 9385, '/ipam', this.readerToken.token);
  }

  /** Checks every invariant now; `afterGc` adds "no block without a user". */
  async check(options: { afterGc?: boolean } = {}): Promise<Violation[]> {
    return checkInvariants(await this.view(), options);
  }

  /** kubectl with the admin kubeconfig. */
  kubectl(args: readonly string[], input?: string): Promise<string> {
    return kubectl(this.cp.kubeconfigPath, args, input);
  }

  /** helm with the admin kubeconfig and the lab's own helm directories; resolves with stdout. */
  async helm(args: readonly string[]): Promise<string> {
    const helm = await toolPath('helm');
    try {
      return (await run(helm, ['--kubeconfig', this.cp.kubeconfigPath, ...args], { env: this.helmEnv, maxBuffer: 64 << 20 })).stdout;
    } catch (err) {
      const e = err as { stderr?: string; message: string };
      throw new Error(`helm ${args.join(' ')}: ${e.stderr?.trim() || e.message}`, { cause: err });
    }
  }

  /**
   * `helm install coil charts/coil -n kube-system` with `values` as --set (and `--wait` unless
   * `wait: false`); `chart` installs another chart directory.
   */
  async installChart(values: readonly string[] = [], options: { wait?: boolean; chart?: string } = {}): Promise<string> {
    const wait = options.wait ?? true ? ['--wait', '--timeout', '10m'] : [];
    return this.helm(['install', 'coil', options.chart ?? CHART, '-n', RELEASE_NAMESPACE, ...wait, ...values.flatMap((v) => ['--set', v])]);
  }

  /**
   * `helm upgrade coil charts/coil --wait` with `values` as --set: `--reset-then-reuse-values`
   * (the values set before, the chart's defaults for the rest: README, "Upgrade") unless `reset`.
   */
  async upgradeChart(values: readonly string[] = [], options: { reset?: boolean } = {}): Promise<string> {
    return this.helm(['upgrade', 'coil', CHART, '-n', RELEASE_NAMESPACE, '--wait', '--timeout', '10m', ...(options.reset ? [] : ['--reset-then-reuse-values']), ...values.flatMap((v) => ['--set', v])]);
  }

  /** `helm uninstall coil --wait`. */
  async uninstallChart(): Promise<string> {
    return this.helm(['uninstall', 'coil', '-n', RELEASE_NAMESPACE, '--wait', '--timeout', '10m']);
  }

  /** Waits until every node reports Ready (its CNI configuration is in place, kubelet healthy). */
  async waitNodesReady(timeoutMs = 180_000): Promise<void> {
    await eventually(async () => {
      const nodes = (await this.core().listNode()).items;
      return nodes.length === this.nodes.length && nodes.every((n) => n.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True'));
    }, { timeoutMs, intervalMs: 500 });
  }

  /**
   * Waits until `count` pods of `namespace` matching `selector` are Ready with an IP; resolves
   * with them (sorted by name).
   */
  async waitForPods(namespace: string, selector: string, count: number, timeoutMs = 180_000): Promise<k8s.V1Pod[]> {
    return eventually(async () => {
      const pods = (await this.core().listNamespacedPod({ namespace, labelSelector: selector })).items.filter((p) => !p.metadata?.deletionTimestamp);
      const ready = pods.filter((p) => p.status?.podIP && p.status.conditions?.some((c) => c.type === 'Ready' && c.status === 'True'));
      return ready.length === count && pods.length === count ? ready.sort((a, b) => a.metadata!.name!.localeCompare(b.metadata!.name!)) : false;
    }, { timeoutMs, intervalMs: 500 });
  }

  /**
   * Creates (or replaces) Deployment `namespace/name` of the workload image: a shell that sleeps
   * until SIGTERM. `nodeName` pins every replica to one node (through a node selector).
   */
  async applyWorkload(namespace: string, name: string, replicas: number, options: { nodeName?: string } = {}): Promise<void> {
    const labels = { app: name };
    await this.kubectl(['apply', '-f', '-'], [
      JSON.stringify({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: namespace } }),
      JSON.stringify({
        apiVersion: 'apps/v1', kind: 'Deployment', metadata: { name, namespace },
        spec: {
          replicas, selector: { matchLabels: labels },
          template: { metadata: { labels }, spec: workloadPodSpec(options.nodeName) },
        },
      }),
    ].join('\n'));
  }

  /** Creates Pod `namespace/name` of the workload image (on `nodeName` when given). */
  async createPod(namespace: string, name: string, options: { nodeName?: string; labels?: Record<string, string> } = {}): Promise<void> {
    await this.kubectl(['apply', '-f', '-'], [
      JSON.stringify({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: namespace } }),
      JSON.stringify({ apiVersion: 'v1', kind: 'Pod', metadata: { name, namespace, labels: options.labels ?? { app: name } }, spec: workloadPodSpec(options.nodeName) }),
    ].join('\n'));
  }

  /** `kubectl exec` in pod `namespace/pod`; resolves with stdout. */
  exec(namespace: string, pod: string, argv: readonly string[]): Promise<string> {
    return this.kubectl(['exec', '-n', namespace, pod, '--', ...argv]);
  }

  /** True when pod `namespace/pod` gets an answer from `address`, IPv4 or IPv6 (`ping -6`): one ping, 2 s. */
  ping(namespace: string, pod: string, address: string): Promise<boolean> {
    const family = address.includes(':') ? ['-6'] : [];
    return this.exec(namespace, pod, ['ping', ...family, '-c1', '-W2', address]).then(() => true, () => false);
  }

  /**
   * Waits until node `nodeName` routes `address` to another node (a route BIRD learned), not to
   * the lab's router. BIRD's IPv6 routes name the other node's IPv6 address; a link-local next
   * hop on eth0 (which a BGP peer may also send) counts too: the nodes have no other IPv6 route
   * out of eth0, so any gateway there is a learned one.
   */
  async waitForBgpRoute(nodeName: string, address: string, timeoutMs = 60_000): Promise<void> {
    const others = new Set(this.nodes.filter((n) => n.name !== nodeName).flatMap((n) => [n.ipv4, n.spec.node.ipv6 ?? '']));
    await eventually(async () => {
      const { stdout } = await run('ip', ['-n', nodeName, 'route', 'get', address]);
      const via = / via (\S+)/.exec(stdout)?.[1] ?? '';
      return others.has(via) || (address.includes(':') && via.startsWith('fe80:') && / dev eth0 /.test(stdout));
    }, { timeoutMs, intervalMs: 250 });
  }

  /**
   * The `kubernetes` Service's endpoints: the relays of `nodes` (the apiserver itself listens on
   * the machine's loopback, which no pod can reach).
   */
  async publishApiEndpoints(nodes: readonly LabNode[]): Promise<void> {
    const slice = {
      apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice',
      metadata: { name: 'kubernetes', namespace: 'default', labels: { 'kubernetes.io/service-name': 'kubernetes' } },
      addressType: 'IPv4',
      endpoints: nodes.map((n) => ({ addresses: [n.ipv4], conditions: { ready: true } })),
      ports: [{ name: 'https', port: NODE_APISERVER_PORT, protocol: 'TCP' }],
    };
    await this.kubectl(['apply', '--server-side', '--force-conflicts', '-f', '-'], JSON.stringify(slice));
  }

  /**
   * Removes a node as when its machine is gone: everything on it stops at once, its endpoint
   * leaves the `kubernetes` Service, and its Node object is deleted.
   */
  async removeNode(name: string): Promise<void> {
    const node = this.node(name);
    await node.destroy();
    this.nodes.splice(this.nodes.indexOf(node), 1);
    await this.publishApiEndpoints(this.nodes.map((n) => n.spec.node));
    await this.core().deleteNode({ name }).catch((err: unknown) => { if (!(err instanceof k8s.ApiException && err.code === 404)) throw err; });
  }

  /** Stops everything and removes every namespace, mount, cgroup and file of the lab. */
  async stop(): Promise<void> {
    await Promise.all(this.nodes.map((n) => n.destroy().catch((err: unknown) => this.log(`destroying ${n.name}: ${String(err)}`))));
    this.nodes.length = 0;
    await this.scheduler?.stop();
    await this.egressProxy?.stop();
    this.apiRelay?.close();
    await this.cp.stop();
    await Cluster.down({ prefix: this.prefix, dir: this.dir });
  }

  /**
   * Removes what a lab of this prefix and dir left (a crashed run): node hosts (their cgroups,
   * processes and mount namespaces), namespace pins, network namespaces, the dir. Processes the
   * lab started itself die with it (parent-death signal); what containerd started is found
   * through the node cgroups and mount namespaces.
   */
  static async down(place: LabPlace = {}): Promise<void> {
    const prefix = place.prefix ?? DEFAULT_PREFIX;
    const dir = place.dir ?? DEFAULT_DIR;
    const nodeNames = new Set([
      ...(await listLabNetns(prefix)).filter((n) => n !== switchNetns(prefix)),
      ...(await cgroupsWithPrefix(prefix)).map((c) => c.slice(1)),
      ...(await readdir(join(dir, 'ns')).catch(() => [] as string[])).map((f) => f.replace(/\.mnt$/, '')),
    ]);
    for (const name of nodeNames) {
      await NodeHost.existing({ name, dir: join(dir, name), netnsPath: `/run/netns/${name}`, cgroup: `/${name}`, pinDir: join(dir, 'ns') }).destroy();
    }
    await unpinDir(join(dir, 'ns'));
    await destroyTopology(prefix);
    await rm(dir, { recursive: true, force: true });
  }

  /** What a lab of `place` has on the machine now: empty everywhere after {@link stop}. */
  static async leftovers(place: LabPlace = {}): Promise<Leftovers> {
    const prefix = place.prefix ?? DEFAULT_PREFIX;
    const dir = place.dir ?? DEFAULT_DIR;
    const mountinfo = await readFile('/proc/self/mountinfo', 'utf8');
    const mounts = mountinfo.split('\n').filter((l) => l.includes(`${dir}/`) || l.split(' ')[4] === dir);
    const cgroups: string[] = [];
    for (const h of await hierarchies()) for (const c of await cgroupsWithPrefix(prefix)) if (await readdir(join(h, c)).then(() => true, () => false)) cgroups.push(join(h, c));
    const processes: string[] = [];
    for (const entry of await readdir('/proc')) {
      if (!/^\d+$/.test(entry)) continue;
      // An exited process waiting for PID 1 to collect it (state Z) holds nothing: skip it.
      const stat = await readFile(`/proc/${entry}/stat`, 'utf8').catch(() => '');
      if (stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z')) continue;
      const cmd = (await readFile(`/proc/${entry}/cmdline`, 'utf8').catch(() => '')).replaceAll('\0', ' ');
      const cgroup = await readFile(`/proc/${entry}/cgroup`, 'utf8').catch(() => '');
      if (cmd.includes(`${dir}/`) || cgroup.split('\n').some((l) => l.split(':')[2]?.startsWith(`/${prefix}`))) processes.push(`${entry} ${cmd.trim()}`);
    }
    const dirExists = await readdir(dir).then(() => true, () => false);
    return { netns: await listLabNetns(prefix), mounts, cgroups: [...new Set(cgroups)], processes, dir: dirExists };
  }
}

/**
 * `helm --set` values the lab's size and runtime need (pure): coil-controller is hostNetwork with
 * fixed ports, so a node runs at most one replica; with one node the chart's 2 replicas would
 * leave one Pending forever (and the rollout never completes). A runtime that cannot take the
 * chart's default conflist version gets its own (`cni.netconf.cniVersion`; containerd 1.6: 1.0.0).
 */
export function labChartValues(nodes: number, runtime?: Pick<ContainerdRuntime, 'cniVersion'>): string[] {
  return [...(nodes < 2 ? ['controller.replicas=1'] : []), ...(runtime?.cniVersion ? [`cni.netconf.cniVersion=${runtime.cniVersion}`] : [])];
}

/** Controllers the nodes need beyond envtest's set (KCM_CONTROLLERS). */
const NODE_CONTROLLERS = [
  'daemonset-controller',
  'endpoints-controller',
  'endpointslice-controller',
  'endpointslice-mirroring-controller',
  // kube-root-ca.crt in every namespace: kubelet mounts it into each pod's token volume.
  'root-ca-certificate-publisher-controller',
  'pod-garbage-collector-controller',
  // Jobs: the chart's post-delete hook (coil-uninstall) is one.
  'job-controller',
  'node-lifecycle-controller',
  'taint-eviction-controller',
  // Fills `kubernetes.io/service-account-token` Secrets, as every cluster's does: the chart's
  // monitors scrape with the one of coil-metrics-reader (docs/observability.md#scraping).
  'serviceaccount-token-controller',
];

/** The workload's pod spec: a shell that sleeps until SIGTERM, from the busybox image; on `nodeName` (a node selector) when given. */
export function workloadPodSpec(nodeName?: string): k8s.V1PodSpec {
  return {
    ...(nodeName ? { nodeSelector: { 'kubernetes.io/hostname': nodeName } } : {}),
    terminationGracePeriodSeconds: 5,
    containers: [{
      name: 'main', image: WORKLOAD_IMAGE, imagePullPolicy: 'IfNotPresent',
      command: ['sh', '-c', "trap 'exit 0' TERM; sleep 2147483647 & wait"],
    }],
  };
}

/**
 * kube-apiserver's egress selector: "cluster" traffic through the lab's CONNECT proxy (a UNIX
 * socket), the control plane and etcd directly.
 */
export function egressSelectorConfig(socket: string): string {
  return JSON.stringify({
    apiVersion: 'apiserver.k8s.io/v1beta1',
    kind: 'EgressSelectorConfiguration',
    egressSelections: [
      { name: 'cluster', connection: { proxyProtocol: 'HTTPConnect', transport: { uds: { udsName: socket } } } },
      { name: 'controlplane', connection: { proxyProtocol: 'Direct' } },
      { name: 'etcd', connection: { proxyProtocol: 'Direct' } },
    ],
  }, null, 2);
}

/** Runs hack/build-image.sh --no-build; resolves with its images (its `IMAGE ref archive` lines). */
async function buildImages(): Promise<{ ref: string; archive: string }[]> {
  const { stdout } = await run('bash', [join(REPO_ROOT, 'hack/build-image.sh'), '--no-build'], { cwd: REPO_ROOT, maxBuffer: 64 << 20 });
  return stdout.split('\n').filter((l) => l.startsWith('IMAGE ')).map((l) => {
    const [, ref, archive] = l.split(' ');
    return { ref: ref!, archive: archive! };
  });
}

/**
 * The nodes' containerd of `line`: containerd 2 and the CNI plugins built (once, cached) by
 * hack/build-containerd.sh and hack/build-cni-plugins.sh; 1.6 is Debian's with Debian's plugins.
 * COIL_CONTAINERD_BIN and COIL_CNI_PLUGINS_BIN name prebuilt directories instead.
 */
export async function containerdRuntime(line: ContainerdLine): Promise<ContainerdRuntime> {
  if (line === '1.6') return { line, cniPluginDir: '/usr/lib/cni', cniVersion: '1.0.0' };
  return { line, binDir: await builtDir('build-containerd.sh', process.env.COIL_CONTAINERD_BIN), cniPluginDir: await cniPluginsDir() };
}

/**
 * The CNI reference plugins that take a cniVersion 1.1.0 conflist (portmap, loopback), built once
 * by hack/build-cni-plugins.sh; COIL_CNI_PLUGINS_BIN names a prebuilt directory instead.
 */
export function cniPluginsDir(): Promise<string> {
  return builtDir('build-cni-plugins.sh', process.env.COIL_CNI_PLUGINS_BIN);
}

/** `override`, or the directory hack/`script` prints on its last line (it builds on first use). */
async function builtDir(script: string, override: string | undefined): Promise<string> {
  if (override) return override;
  const { stdout } = await run('bash', [join(REPO_ROOT, 'hack', script)], { maxBuffer: 64 << 20 });
  return stdout.trim().split('\n').pop()!;
}

/**
 * Directory of kubelet, kube-proxy and kube-scheduler of release `kubernetes` (undefined: the
 * newest of hack/kubernetes-versions): what hack/build-node.sh prints (it builds on first use).
 */
async function nodeBinDir(kubernetes: string | undefined): Promise<string> {
  if (process.env.COIL_NODE_BIN) return process.env.COIL_NODE_BIN;
  const { stdout } = await run('bash', [join(REPO_ROOT, 'hack/build-node.sh')], { maxBuffer: 64 << 20, env: buildEnv(kubernetes) });
  return stdout.trim().split('\n').pop()!;
}
