/**
 * A real Kubernetes control plane for tests: etcd + kube-apiserver (+ optionally
 * kube-controller-manager) on random 127.0.0.1 ports with generated certificates and an admin
 * kubeconfig — the TypeScript counterpart of controller-runtime's envtest.
 *
 * Binaries come from `hack/build-control-plane.sh` (built from the Go module proxy, cached).
 * Flags follow envtest plus what 1.36/1.37 need (docs/design.md#the-envtest-control-plane).
 *
 * One plane per test file: starting one takes a few seconds on 2 cores.
 *
 * @example
 *   const cp = await ControlPlane.start({ crds: coilCrds() });
 *   after(() => cp.stop());
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { request } from 'node:https';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import * as k8s from '@kubernetes/client-node';
import { TestCA, createServiceAccountKeys, type CertPair, type ServingCert } from './pki.js';
import { ManagedProcess, waitFor } from './process.js';

const run = promisify(execFile);

/** Repository root (this file is compiled to dist/test/envtest/). */
export const REPO_ROOT = fileURLToPath(new URL('../../../', import.meta.url));

/** Options of {@link ControlPlane.start}. */
export interface ControlPlaneOptions {
  /**
   * Also start kube-controller-manager with the garbage-collector, deployment, replicaset,
   * HPA, namespace and serviceaccount controllers. Default false.
   */
  readonly controllerManager?: boolean;
  /** CRD objects (apiextensions.k8s.io/v1) to install and wait for until Established. */
  readonly crds?: readonly object[];
  /**
   * Extra subjectAltNames of the apiserver certificate (e.g. `IP:172.31.120.254`), for clients
   * that reach it through a relay on another address, as the lab's netns nodes do.
   */
  readonly apiServerSans?: readonly string[];
  /**
   * kube-apiserver flags that replace the defaults of the same name or add to them, e.g.
   * `--authorization-mode=Node,RBAC` (the real-node lab: hack/lab/cluster.ts).
   */
  readonly apiServerArgs?: readonly string[];
  /** kube-controller-manager flags that replace the defaults of the same name or add to them. */
  readonly controllerManagerArgs?: readonly string[];
  /** Directory for certificates, data and logs (created; removed by stop). Default: a new temp dir. */
  readonly dir?: string;
  /**
   * The Kubernetes release: a minor listed in hack/kubernetes-versions (`1.33`) or a full
   * version (`v1.33.6`). Default: {@link kubernetesVersion}.
   */
  readonly kubernetes?: string;
}

/**
 * The minors of hack/kubernetes-versions, newest first: the Kubernetes releases coil supports and
 * tests (README, "Prerequisites").
 */
export function kubernetesReleases(): string[] {
  return readFileSync(join(REPO_ROOT, 'hack/kubernetes-versions'), 'utf8').split('\n')
    .filter((l) => l.trim() !== '' && !l.startsWith('#')).map((l) => l.trim().split(/\s+/)[0]!);
}

/**
 * The Kubernetes release the suites and the lab run unless told otherwise: `$COIL_KUBERNETES`
 * (`1.33`: a line of hack/kubernetes-versions), or undefined for the table's newest line.
 */
export function kubernetesVersion(): string | undefined {
  return process.env.COIL_KUBERNETES || undefined;
}

/**
 * The environment of hack/build-control-plane.sh and hack/build-node.sh for release `kubernetes`
 * (their K8S_VERSION; ETCD_VERSION follows it unless the caller's environment sets one). Pure.
 */
export function buildEnv(kubernetes: string | undefined, env: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
  return kubernetes ? { ...env, K8S_VERSION: kubernetes } : env;
}

/**
 * `defaults` with each flag of `overrides` replacing the one of the same name (`--name=` prefix),
 * or appended when there is none (pure).
 */
export function mergeFlags(defaults: readonly string[], overrides: readonly string[]): string[] {
  const name = (flag: string) => flag.split('=')[0]!;
  const replaced = new Map(overrides.map((f) => [name(f), f]));
  const out = defaults.map((f) => replaced.get(name(f)) ?? f);
  const present = new Set(defaults.map(name));
  return [...out, ...overrides.filter((f) => !present.has(name(f)))];
}

/**
 * Controllers run by the optional kube-controller-manager
 * (docs/design.md#the-envtest-control-plane).
 */
export const KCM_CONTROLLERS = [
  'garbage-collector-controller',
  'deployment-controller',
  'replicaset-controller',
  'horizontal-pod-autoscaler-controller',
  'namespace-controller',
  'serviceaccount-controller',
];

/** Finds a free TCP port on 127.0.0.1, 20000–31999 (a tiny race with other binders remains). */
export async function freePort(): Promise<number> {
  // Not from the kernel's ephemeral range (32768–60999 by default): a port picked there can become
  // the source port of any outgoing connection before its server binds it, seconds later (seen in
  // the lab as EADDRINUSE). Ports handed out once are not handed out again in this process.
  for (let attempt = 0; attempt < 500; attempt++) {
    const port = FREE_PORT_MIN + Math.floor(Math.random() * (FREE_PORT_MAX - FREE_PORT_MIN));
    if (handedOut.has(port) || !(await canBind(port))) continue;
    handedOut.add(port);
    return port;
  }
  throw new Error(`no free port in ${FREE_PORT_MIN}–${FREE_PORT_MAX - 1}`);
}

const FREE_PORT_MIN = 20_000;
const FREE_PORT_MAX = 32_000;
const handedOut = new Set<number>();

function canBind(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

/**
 * Directory holding kube-apiserver, kube-controller-manager and etcd: `$COIL_CONTROL_PLANE_BIN`
 * if set, else whatever `hack/build-control-plane.sh` prints for release `kubernetes` (default
 * {@link kubernetesVersion}; it builds on first use).
 */
export async function controlPlaneBinDir(kubernetes = kubernetesVersion()): Promise<string> {
  if (process.env.COIL_CONTROL_PLANE_BIN) return process.env.COIL_CONTROL_PLANE_BIN;
  const { stdout } = await run('bash', [join(REPO_ROOT, 'hack/build-control-plane.sh')], {
    maxBuffer: 64 << 20, env: buildEnv(kubernetes),
  });
  const lines = stdout.trim().split('\n');
  return lines[lines.length - 1]!;
}

/** A running control plane. Call {@link stop} in `after`, also when tests fail. */
export class ControlPlane {
  private etcd?: ManagedProcess;
  private apiserver?: ManagedProcess;
  private kcm?: ManagedProcess;
  private admin?: CertPair;
  private saKeys?: { keyFile: string; pubFile: string };
  private webhookCerts = 0;
  /** etcd's peer port, kept across restarts (its data dir records the peer URL). */
  private etcdPeerPort = 0;
  private apiServerArgs: readonly string[] = [];
  private controllerManagerArgs: readonly string[] = [];
  /** Admin (system:masters) client configuration. */
  kubeConfig = new k8s.KubeConfig();

  private constructor(
    /** Temporary directory holding certificates, data, logs and the kubeconfig. */
    readonly dir: string,
    readonly binDir: string,
    readonly ca: TestCA,
    readonly etcdPort: number,
    readonly apiPort: number,
  ) {}

  /** `https://127.0.0.1:<port>` of the kube-apiserver. */
  get server(): string {
    return `https://127.0.0.1:${this.apiPort}`;
  }

  /** etcd client URL (`http://127.0.0.1:<port>`). */
  get etcdEndpoint(): string {
    return `http://127.0.0.1:${this.etcdPort}`;
  }

  /** Admin kubeconfig file, for kubectl, helm and child processes. */
  get kubeconfigPath(): string {
    return join(this.dir, 'admin.kubeconfig');
  }

  /**
   * Starts etcd and kube-apiserver (and kube-controller-manager if asked), waits until they
   * are ready, then installs `crds`. On failure everything started is stopped again.
   * @throws Error with the failing process's log tail.
   */
  static async start(options: ControlPlaneOptions = {}): Promise<ControlPlane> {
    const binDir = await controlPlaneBinDir(options.kubernetes ?? kubernetesVersion());
    const dir = options.dir ?? (await mkdtemp(join(tmpdir(), 'coil-envtest-')));
    await mkdir(dir, { recursive: true });
    const ca = await TestCA.create(join(dir, 'pki'));
    const cp = new ControlPlane(dir, binDir, ca, await freePort(), await freePort());
    cp.apiServerArgs = options.apiServerArgs ?? [];
    cp.controllerManagerArgs = options.controllerManagerArgs ?? [];
    try {
      await cp.prepare(options.apiServerSans ?? []);
      await cp.startEtcd();
      await cp.startApiServer();
      if (options.controllerManager) await cp.startControllerManager();
      if (options.crds?.length) await cp.installCrds(options.crds);
      return cp;
    } catch (err) {
      await cp.stop();
      throw err;
    }
  }

  private async prepare(extraSans: readonly string[]): Promise<void> {
    await this.ca.issue('apiserver', '/CN=localhost', 'server', [
      'IP:127.0.0.1', 'DNS:localhost', 'IP:10.0.0.1', 'DNS:kubernetes.default.svc', ...extraSans,
    ]);
    this.admin = await this.ca.issue('admin', '/O=system:masters/CN=admin', 'client');
    // For kubelets (the real-node lab): `kubectl exec` and logs go from the apiserver to them.
    await this.ca.issue('apiserver-kubelet-client', '/O=system:masters/CN=kube-apiserver-kubelet-client', 'client');
    this.saKeys = await createServiceAccountKeys(this.ca.dir);
    const b64 = (s: string) => Buffer.from(s).toString('base64');
    const kubeconfig = {
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [{ name: 'envtest', cluster: { server: this.server, 'certificate-authority-data': b64(this.ca.caPem) } }],
      users: [{ name: 'envtest', user: { 'client-certificate-data': b64(this.admin.certPem), 'client-key-data': b64(this.admin.keyPem) } }],
      contexts: [{ name: 'envtest', context: { cluster: 'envtest', user: 'envtest' } }],
      'current-context': 'envtest',
    };
    await writeFile(this.kubeconfigPath, JSON.stringify(kubeconfig, null, 2), { mode: 0o600 });
    this.kubeConfig.loadFromFile(this.kubeconfigPath);
  }

  /** Starts etcd (data kept in the plane's dir across restarts); resolves when /readyz is ok. */
  async startEtcd(): Promise<void> {
    if (!this.etcdPeerPort) this.etcdPeerPort = await freePort();
    const peer = this.etcdPeerPort;
    const client = this.etcdEndpoint;
    this.etcd = await ManagedProcess.start({
      name: 'etcd',
      command: join(this.binDir, 'etcd'),
      logFile: join(this.dir, 'etcd.log'),
      args: [
        '--name=default', `--data-dir=${join(this.dir, 'etcd')}`,
        `--listen-client-urls=${client}`, `--advertise-client-urls=${client}`,
        `--listen-peer-urls=http://127.0.0.1:${peer}`, `--initial-advertise-peer-urls=http://127.0.0.1:${peer}`,
        `--initial-cluster=default=http://127.0.0.1:${peer}`,
        '--unsafe-no-fsync=true', '--log-level=warn',
      ],
    });
    await waitFor('etcd /readyz', async () => (await fetch(`${client}/readyz`)).ok, { process: this.etcd });
  }

  /** SIGTERM etcd (or SIGKILL with `crash`); its data stays for {@link startEtcd}. */
  async stopEtcd(options: { crash?: boolean } = {}): Promise<void> {
    await this.etcd?.stop(options.crash ? { signal: 'SIGKILL' } : {});
    this.etcd = undefined;
  }

  /** Starts kube-apiserver on the plane's port; resolves when /readyz and `default` ns are ok. */
  async startApiServer(): Promise<void> {
    const pki = this.ca.dir;
    this.apiserver = await ManagedProcess.start({
      name: 'kube-apiserver',
      command: join(this.binDir, 'kube-apiserver'),
      logFile: join(this.dir, 'kube-apiserver.log'),
      args: mergeFlags([
        `--etcd-servers=${this.etcdEndpoint}`,
        '--bind-address=127.0.0.1', `--secure-port=${this.apiPort}`,
        '--advertise-address=127.0.0.1',
        // 1.37 rejects a loopback advertise address with the lease reconciler (PR #138102).
        '--endpoint-reconciler-type=none',
        `--cert-dir=${join(this.dir, 'apiserver-certs')}`,
        `--tls-cert-file=${join(pki, 'apiserver.crt')}`, `--tls-private-key-file=${join(pki, 'apiserver.key')}`,
        `--client-ca-file=${this.ca.caFile}`,
        `--kubelet-client-certificate=${join(pki, 'apiserver-kubelet-client.crt')}`,
        `--kubelet-client-key=${join(pki, 'apiserver-kubelet-client.key')}`,
        `--service-account-issuer=${this.server}/`,
        `--service-account-key-file=${this.saKeys!.pubFile}`,
        `--service-account-signing-key-file=${this.saKeys!.keyFile}`,
        '--authorization-mode=RBAC',
        '--service-cluster-ip-range=10.0.0.0/24',
        '--allow-privileged=true',
        // envtest's choice: pods in fresh namespaces need no `default` ServiceAccount.
        '--disable-admission-plugins=ServiceAccount',
        // Burst tests create hundreds of objects at once; priority & fairness would only queue them.
        '--enable-priority-and-fairness=false', '--max-requests-inflight=0', '--max-mutating-requests-inflight=0',
        '--v=1',
      ], this.apiServerArgs),
    });
    await waitFor('kube-apiserver /readyz', () => this.get('/readyz').then((r) => r.status === 200), {
      process: this.apiserver,
      timeoutMs: 120_000,
    });
    await waitFor('namespace default', () => this.get('/api/v1/namespaces/default').then((r) => r.status === 200), {
      process: this.apiserver,
    });
  }

  /** SIGTERM kube-apiserver only (etcd keeps the data); `crash` uses SIGKILL. */
  async stopApiServer(options: { crash?: boolean } = {}): Promise<void> {
    // After SIGTERM the apiserver stops listening at once, then waits on open watch
    // connections (e.g. kube-controller-manager's) until killed; its data is safe in etcd.
    await this.apiserver?.stop(options.crash ? { signal: 'SIGKILL' } : { graceMs: 3000 });
    this.apiserver = undefined;
  }

  /** Starts kube-controller-manager; resolves when its serviceaccount controller has acted. */
  async startControllerManager(): Promise<void> {
    this.kcm = await ManagedProcess.start({
      name: 'kube-controller-manager',
      command: join(this.binDir, 'kube-controller-manager'),
      logFile: join(this.dir, 'kube-controller-manager.log'),
      args: mergeFlags([
        `--kubeconfig=${this.kubeconfigPath}`,
        '--leader-elect=false',
        // 0 = no HTTPS serving: parallel suites would clash on the default 10257.
        '--secure-port=0',
        `--controllers=${KCM_CONTROLLERS.join(',')}`,
        '--horizontal-pod-autoscaler-sync-period=1s',
        '--horizontal-pod-autoscaler-downscale-stabilization=0s',
        '--kube-api-qps=100', '--kube-api-burst=200',
        '--v=1',
      ], this.controllerManagerArgs),
    });
    await waitFor(
      'kube-controller-manager (default ServiceAccount)',
      () => this.get('/api/v1/namespaces/default/serviceaccounts/default').then((r) => r.status === 200),
      { process: this.kcm, timeoutMs: 120_000 },
    );
  }

  /**
   * Creates or replaces each CRD, then waits until every one is Established (its API served).
   * Sent as raw JSON: client-node's typed serializer drops wire keys such as
   * `x-kubernetes-int-or-string` from plain objects.
   * @throws Error with the apiserver's message for a CRD it rejects.
   */
  async installCrds(crds: readonly object[]): Promise<void> {
    const base = '/apis/apiextensions.k8s.io/v1/customresourcedefinitions';
    for (const crd of crds as { metadata: { name: string } }[]) {
      const name = crd.metadata.name;
      let res = await this.request('POST', base, crd);
      if (res.status === 409) {
        const current = JSON.parse((await this.request('GET', `${base}/${name}`)).body) as { metadata: { resourceVersion: string } };
        const body = { ...crd, metadata: { ...crd.metadata, resourceVersion: current.metadata.resourceVersion } };
        res = await this.request('PUT', `${base}/${name}`, body);
      }
      if (res.status >= 300) throw new Error(`CRD ${name}: ${res.status} ${res.body}`);
    }
    for (const crd of crds as { metadata: { name: string } }[]) {
      await waitFor(`CRD ${crd.metadata.name} Established`, async () => {
        const res = await this.request('GET', `${base}/${crd.metadata.name}`);
        const current = JSON.parse(res.body) as k8s.V1CustomResourceDefinition;
        return !!current.status?.conditions?.some((c) => c.type === 'Established' && c.status === 'True');
      });
    }
  }

  /**
   * Issues a serving certificate for a local webhook server (SANs `IP:127.0.0.1`, `DNS:localhost`),
   * signed by the plane's CA; use `caPem` as the webhook configuration's `caBundle`.
   */
  async newServingCert(): Promise<ServingCert> {
    const name = `webhook-${++this.webhookCerts}`;
    const pair = await this.ca.issue(name, '/CN=localhost', 'server', ['IP:127.0.0.1', 'DNS:localhost']);
    return { ...pair, caPem: this.ca.caPem };
  }

  /**
   * {@link newServingCert} written as `tls.crt` and `tls.key` into a directory of the plane's own
   * (removed with it by {@link stop}), as a webhook server's `--cert-dir` reads them.
   */
  async writeServingCert(): Promise<{ dir: string; certFile: string; keyFile: string }> {
    const cert = await this.newServingCert();
    const dir = join(this.dir, `webhook-certs-${this.webhookCerts}`);
    await mkdir(dir, { recursive: true });
    const certFile = join(dir, 'tls.crt');
    const keyFile = join(dir, 'tls.key');
    await writeFile(certFile, cert.certPem);
    await writeFile(keyFile, cert.keyPem);
    return { dir, certFile, keyFile };
  }

  /** Stops every process it started (apiserver before etcd) and removes the directory. */
  async stop(): Promise<void> {
    await this.kcm?.stop();
    await this.stopApiServer();
    await this.stopEtcd();
    if (!process.env.COIL_ENVTEST_KEEP) await rm(this.dir, { recursive: true, force: true });
  }

  private get(path: string): Promise<{ status: number; body: string }> {
    return this.request('GET', path);
  }

  /**
   * A raw JSON request with admin credentials; resolves with the status code and body text
   * (any status; network errors reject).
   */
  request(method: string, path: string, body?: unknown): Promise<{ status: number; body: string }> {
    return new Promise((resolve, reject) => {
      const headers: Record<string, string> = body === undefined ? {} : { 'content-type': 'application/json' };
      const req = request(
        { host: '127.0.0.1', port: this.apiPort, method, path, headers, ca: this.ca.caPem, cert: this.admin!.certPem, key: this.admin!.keyPem, timeout: 10_000 },
        (res) => {
          let body = '';
          res.setEncoding('utf8');
          res.on('data', (c: string) => (body += c));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
        },
      );
      req.on('timeout', () => req.destroy(new Error('timeout')));
      req.on('error', reject);
      req.end(body === undefined ? undefined : JSON.stringify(body));
    });
  }
}

/**
 * Polls `fn` until it returns without throwing (and, if it returns a boolean, returns true);
 * resolves with its value. The last error is rethrown after `timeoutMs` (default 30000).
 * The envtest counterpart of Gomega's `Eventually`.
 */
export async function eventually<T>(
  fn: () => Promise<T> | T,
  options: { timeoutMs?: number; intervalMs?: number } = {},
): Promise<Exclude<T, false>> {
  const deadline = Date.now() + (options.timeoutMs ?? 30_000);
  let last: unknown;
  for (;;) {
    try {
      const value = await fn();
      if (value !== false) return value as Exclude<T, false>;
      last = new Error('condition returned false');
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw last;
    await new Promise((r) => setTimeout(r, options.intervalMs ?? 100));
  }
}
