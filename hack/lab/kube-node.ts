/**
 * A real lab node: in its own namespaces and cgroup (node-host.ts), containerd + runc, kubelet,
 * kube-proxy, BIRD, and a relay that carries the node's connections to the apiserver.
 *
 *   relay       127.0.0.1:6443 and <node IP>:6443 in the node → the lab's UNIX socket → the
 *               apiserver (which listens on the machine's loopback). kubelet and kube-proxy use
 *               127.0.0.1:6443; pods reach it as the `kubernetes` Service, whose endpoints are the
 *               nodes' relays (cluster.ts).
 *   containerd  the node's own root, state and socket; images imported from build-image.sh's archives
 *   kubelet     registers the Node, starts pods through containerd's CRI and libcni
 *   kube-proxy  iptables mode: Service ClusterIPs inside the node and its pods
 *   bird        imports table 119 (coild's blocks) and speaks iBGP with the other nodes
 *
 * Each daemon can be stopped (gracefully or as a crash) and started again on its own, as the soak
 * and the e2e faults need: {@link KubeNode.stop}, {@link KubeNode.start}, {@link KubeNode.restart}.
 */
import { execFile } from 'node:child_process';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { ControlPlane } from '../../test/envtest/control-plane.js';
import { REPO_ROOT } from '../../test/envtest/control-plane.js';
import { waitFor, type ManagedProcess } from '../../test/envtest/process.js';
import { prepareBird } from './bird.js';
import { setFrozen } from './cgroups.js';
import { CONTAINERD_SOCKET, CRI_NAMESPACE, containerdConfig, criContainers, ctr, ctrBinary, type ContainerdRuntime } from './containerd.js';
import { kubeletArgv, kubeletConfig, kubeProxyArgv } from './kubelet.js';
import { NodeHost } from './node-host.js';
import type { LabNode } from './topology.js';

const run = promisify(execFile);

/** The daemons of a node, in start order. */
export const NODE_DAEMONS = ['relay', 'containerd', 'kubelet', 'kube-proxy', 'bird'] as const;
export type NodeDaemon = (typeof NODE_DAEMONS)[number];

/** Port of the node's relay to the apiserver. */
export const NODE_APISERVER_PORT = 6443;

/** Everything a node needs from the cluster. */
export interface KubeNodeSpec {
  readonly node: LabNode;
  /** All nodes (BGP peers). */
  readonly peers: readonly LabNode[];
  /** The node's directory. */
  readonly dir: string;
  readonly cgroup: string;
  readonly pinDir: string;
  /** The lab's UNIX socket that leads to the apiserver. */
  readonly apiserverSocket: string;
  /** Directory holding kubelet and kube-proxy (hack/build-node.sh). */
  readonly binDir: string;
  readonly sandboxImage: string;
  /** The node's containerd and CNI plugins (containerd.ts). */
  readonly runtime: ContainerdRuntime;
  /** What BGP may carry (BIRD's import filter, bird.ts). */
  readonly bgpRanges: readonly string[];
  readonly maxPods: number;
}

/** A running (or stopped) real node. */
export class KubeNode {
  private readonly running = new Map<NodeDaemon, ManagedProcess>();
  private argvs = new Map<NodeDaemon, string[]>();

  private constructor(
    readonly spec: KubeNodeSpec,
    readonly host: NodeHost,
  ) {}

  get name(): string {
    return this.spec.node.name;
  }

  get ipv4(): string {
    return this.spec.node.ipv4;
  }

  /**
   * Makes the node's host (namespaces, cgroup, directories), writes its configuration and
   * credentials (client certificates of `cp`'s CA), and starts every daemon but kubelet's pods.
   * Images are imported with {@link importImage} before kubelet needs them.
   */
  static async create(spec: KubeNodeSpec, cp: ControlPlane): Promise<KubeNode> {
    const host = await NodeHost.create({ name: spec.node.name, dir: spec.dir, netnsPath: spec.node.netnsPath, cgroup: spec.cgroup, pinDir: spec.pinDir });
    const node = new KubeNode(spec, host);
    try {
      await node.configure(cp);
      return node;
    } catch (err) {
      await host.destroy().catch(() => undefined);
      throw err;
    }
  }

  private async configure(cp: ControlPlane): Promise<void> {
    const { node, dir } = this.spec;
    const conf = join(dir, 'config');
    await mkdir(conf, { recursive: true });
    const server = `https://127.0.0.1:${NODE_APISERVER_PORT}`;
    // Node authorizer: kubelet is user system:node:<name> in group system:nodes.
    const kubelet = await cp.ca.issue(`kubelet-${node.name}`, `/O=system:nodes/CN=system:node:${node.name}`, 'client');
    const serving = await cp.ca.issue(`kubelet-serving-${node.name}`, `/CN=${node.name}`, 'server', [`IP:${node.ipv4}`, `DNS:${node.name}`]);
    const proxy = await cp.ca.issue(`kube-proxy-${node.name}`, '/CN=system:kube-proxy', 'client');
    await writeFile(join(conf, 'kubelet.kubeconfig'), kubeconfig(server, cp.ca.caPem, kubelet), { mode: 0o600 });
    await writeFile(join(conf, 'kube-proxy.kubeconfig'), kubeconfig(server, cp.ca.caPem, proxy), { mode: 0o600 });
    await writeFile(join(conf, 'kubelet.crt'), serving.certPem);
    await writeFile(join(conf, 'kubelet.key'), serving.keyPem, { mode: 0o600 });
    await writeFile(join(conf, 'kubelet.yaml'), JSON.stringify(kubeletConfig({
      nodeName: node.name, nodeIp: node.ipv4, cgroupRoot: this.spec.cgroup, clientCaFile: cp.ca.caFile,
      tlsCertFile: join(conf, 'kubelet.crt'), tlsKeyFile: join(conf, 'kubelet.key'), maxPods: this.spec.maxPods,
    }), null, 2));
    const runtime = this.spec.runtime;
    await writeFile(join(conf, 'containerd.toml'), containerdConfig({ sandboxImage: this.spec.sandboxImage, line: runtime.line }));
    // containerd runs the loopback plugin itself; the chart's conflist chains portmap after coil.
    for (const plugin of ['loopback', 'portmap']) await run('cp', [join(runtime.cniPluginDir, plugin), this.host.hostPath(`/opt/cni/bin/${plugin}`)]);

    this.argvs.set('relay', [process.execPath, join(REPO_ROOT, 'dist/hack/lab/relay.js'), 'tcp-to-unix', `0.0.0.0:${NODE_APISERVER_PORT}`, this.spec.apiserverSocket]);
    this.argvs.set('containerd', [runtime.binDir ? join(runtime.binDir, 'containerd') : 'containerd', '--config', join(conf, 'containerd.toml')]);
    this.argvs.set('kubelet', kubeletArgv(join(this.spec.binDir, 'kubelet'), { nodeName: node.name, nodeIp: node.ipv4, configFile: join(conf, 'kubelet.yaml'), kubeconfig: join(conf, 'kubelet.kubeconfig') }));
    this.argvs.set('kube-proxy', kubeProxyArgv(join(this.spec.binDir, 'kube-proxy'), { nodeName: node.name, kubeconfig: join(conf, 'kube-proxy.kubeconfig') }));
    this.argvs.set('bird', await prepareBird(node, this.spec.peers, this.spec.bgpRanges, dir));
  }

  /** Starts `daemon` (no-op when running) and waits until it serves, where that can be seen. */
  async start(daemon: NodeDaemon): Promise<void> {
    if (this.running.get(daemon)?.running) return;
    // containerd finds its shim on PATH first: the one of its own build.
    const binDir = daemon === 'containerd' ? this.spec.runtime.binDir : undefined;
    const proc = await this.host.spawn(daemon, this.argvs.get(daemon)!, binDir ? { ...process.env, PATH: `${binDir}:${process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin'}` } : undefined);
    this.running.set(daemon, proc);
    if (daemon === 'containerd') {
      await waitFor(`containerd on ${this.name}`, async () => (await run(this.ctrBin, ['--address', this.containerdSocket, 'version']).then(() => true, () => false)), { process: proc, timeoutMs: 60_000, intervalMs: 200 });
    } else if (daemon === 'relay') {
      // relay.js prints its line once it listens.
      await waitFor(`relay on ${this.name}`, async () => (await proc.logTail()).includes(`relay 0.0.0.0:${NODE_APISERVER_PORT}`), { process: proc, timeoutMs: 30_000 });
    } else if (daemon === 'kubelet') {
      await waitFor(`kubelet on ${this.name} /healthz`, async () => (await this.http('127.0.0.1', 10248, '/healthz')) === 'ok', { process: proc, timeoutMs: 120_000, intervalMs: 250 });
    }
  }

  /** Starts every daemon in order. */
  async startAll(): Promise<void> {
    for (const d of NODE_DAEMONS) await this.start(d);
  }

  /**
   * Stops `daemon`: SIGTERM (grace 10 s), or SIGKILL with `crash`. Containers keep running when
   * containerd or kubelet stops, as on a real node.
   */
  async stop(daemon: NodeDaemon, options: { crash?: boolean } = {}): Promise<void> {
    await this.running.get(daemon)?.stop(options.crash ? { signal: 'SIGKILL' } : {});
    this.running.delete(daemon);
  }

  /** Stops and starts `daemon`. */
  async restart(daemon: NodeDaemon, options: { crash?: boolean } = {}): Promise<void> {
    await this.stop(daemon, options);
    await this.start(daemon);
  }

  /** True while `daemon`'s process runs. */
  isRunning(daemon: NodeDaemon): boolean {
    return this.running.get(daemon)?.running ?? false;
  }

  /** The `ctr` of the node's containerd (its build's, or Debian's). */
  get ctrBin(): string {
    return ctrBinary(this.spec.runtime);
  }

  /** containerd's socket as the machine sees it (for `ctr` outside the node). */
  get containerdSocket(): string {
    return this.host.hostPath(CONTAINERD_SOCKET);
  }

  /**
   * Imports an OCI archive into the node's containerd (CRI namespace), where kubelet finds it;
   * resolves with the digest containerd records for `ref`.
   * @throws Error when the import fails or `ref` is not there afterwards.
   */
  async importImage(archive: string, ref: string): Promise<string> {
    await run(this.ctrBin, ['--address', this.containerdSocket, '--namespace', CRI_NAMESPACE, 'images', 'import', archive], { maxBuffer: 16 << 20 });
    const digest = await this.imageDigest(ref);
    if (!digest) throw new Error(`${ref} is not in containerd on ${this.name} after importing ${archive}`);
    return digest;
  }

  /** The digest containerd records for image `ref` (its manifest's), or undefined. */
  async imageDigest(ref: string): Promise<string | undefined> {
    const { stdout } = await run(this.ctrBin, ['--address', this.containerdSocket, '--namespace', CRI_NAMESPACE, 'images', 'ls', `name==${ref}`]);
    return stdout.split('\n').slice(1).map((l) => l.split(/\s+/)).find((f) => f[0] === ref)?.[2];
  }

  /**
   * SIGKILLs the container `container` of pod `namespace/pod` through containerd, as a crash of
   * the program in it (kubelet restarts it).
   * @throws Error when the node runs no such container.
   */
  async killContainer(namespace: string, pod: string, container: string): Promise<void> {
    const found = (await criContainers(this.host, this.ctrBin)).filter((c) => c.namespace === namespace && c.pod === pod && c.container === container);
    if (found.length === 0) throw new Error(`no container ${container} of ${namespace}/${pod} on ${this.name}`);
    for (const c of found) await ctr(this.host, ['tasks', 'kill', '--signal', 'SIGKILL', c.id], { bin: this.ctrBin }).catch(() => undefined);
  }

  /**
   * The node lost (`true`) or back (`false`), as a machine that hangs and drops off the network:
   * every process of the node (daemons and pods) frozen, and its `eth0` down, so neither kubelet
   * nor the node's pods' kernels answer; back: the link up, then everything thawed. Its relay to
   * the apiserver is one of the frozen processes, so kubelet's lease stops being renewed.
   */
  async setLost(lost: boolean): Promise<void> {
    if (lost) {
      await setFrozen(this.spec.cgroup, true);
      await run('ip', ['-n', this.name, 'link', 'set', 'eth0', 'down']);
    } else {
      await run('ip', ['-n', this.name, 'link', 'set', 'eth0', 'up']);
      await setFrozen(this.spec.cgroup, false);
    }
  }

  /**
   * GET http://host:port/path inside the node; resolves with the body ('' on failure). With
   * `bearer`, GET https:// with that token, not verifying the certificate (coil's endpoints serve a
   * self-signed one: docs/observability.md#access).
   */
  async http(hostname: string, port: number, path: string, bearer?: string): Promise<string> {
    const url = `${bearer === undefined ? 'http' : 'https'}://${hostname}:${port}${path}`;
    const init = bearer === undefined ? '' : `,{headers:{authorization:'Bearer ${bearer}'}}`;
    const script = `${bearer === undefined ? '' : "process.env.NODE_TLS_REJECT_UNAUTHORIZED='0';process.removeAllListeners('warning');"}fetch('${url}'${init}).then(async r=>{process.stdout.write((r.ok?'':'HTTP '+r.status+' ')+await r.text())}).catch(()=>{})`;
    return this.host.exec([process.execPath, '-e', script]).catch(() => '');
  }

  /** The last lines of a daemon's log. */
  async logTail(daemon: NodeDaemon, lines = 40): Promise<string> {
    const text = await readFile(join(this.spec.dir, `${daemon}.log`), 'utf8').catch(() => '');
    return text.split('\n').slice(-lines).join('\n');
  }

  /** Stops every daemon and removes the node's host (every container with it). */
  async destroy(): Promise<void> {
    // A node left frozen by setLost would keep its daemons from handling any signal.
    await setFrozen(this.spec.cgroup, false).catch(() => undefined);
    for (const d of [...NODE_DAEMONS].reverse()) await this.stop(d, { crash: d !== 'kubelet' }).catch(() => undefined);
    await this.host.destroy();
  }
}

/** A kubeconfig with an embedded client certificate (JSON; kubectl and Go clients read it as YAML). */
export function kubeconfig(server: string, caPem: string, cert: { certPem: string; keyPem: string }): string {
  const b64 = (s: string) => Buffer.from(s).toString('base64');
  return JSON.stringify({
    apiVersion: 'v1', kind: 'Config',
    clusters: [{ name: 'lab', cluster: { server, 'certificate-authority-data': b64(caPem) } }],
    users: [{ name: 'lab', user: { 'client-certificate-data': b64(cert.certPem), 'client-key-data': b64(cert.keyPem) } }],
    contexts: [{ name: 'lab', context: { cluster: 'lab', user: 'lab' } }],
    'current-context': 'lab',
  }, null, 2);
}
