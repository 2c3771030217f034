/**
 * kwok (sigs.k8s.io/kwok) for the scale benchmark (hack/bench/scale.ts): it keeps the simulated
 * Nodes Ready the way kubelets do — a Ready status once, then a Lease in `kube-node-lease`
 * renewed every 10 s and the Node's status every 10–20 min (kwok's own node Stages
 * `node-initialize` and `node-heartbeat-with-lease`, copied from its module by
 * hack/build-kwok.sh, which builds the pinned release lazily into ~/.cache/coil/tools).
 *
 * kwok only manages the Nodes annotated {@link KWOK_NODE_ANNOTATION}, and it must leave Pods
 * alone: coil's stand-ins allocate the Pods' addresses and write their IPs (the kubelet's write),
 * and kwok's default Pod Stages would mark them Running with IPs of its own. kwok watches the
 * Pods of its Nodes whatever its Stages are (controllers.Controller.init), and with no Pod Stage
 * nothing reads that watch, so the apiserver would close it as a slow watcher; hence one Pod Stage
 * that matches no Pod ({@link NO_POD_STAGE}): the watch is read, no Pod is ever written.
 * scale.ts checks it (no Pod carries a kwok field manager, every Pod keeps its stand-in's IP).
 *
 * kwok is a cost the real cluster does not have (kubelets run on their own machines): the
 * benchmark reports its CPU and RSS apart from the control plane's.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { open, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { REPO_ROOT } from '../../test/envtest/control-plane.js';

/** The annotation (key=value) of the Nodes kwok manages. */
export const KWOK_NODE_ANNOTATION = { key: 'kwok.x-k8s.io/node', value: 'fake' } as const;

/** The Lease duration kwok gives its Nodes (a kubelet's: 40 s, renewed every quarter of it). */
const LEASE_DURATION_S = 40;

/** A Pod Stage whose selector no Pod matches (a label nothing sets): kwok reads Pods, writes none. */
export const NO_POD_STAGE = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: coil-scale-no-pod
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchLabels:
      coil.cybozu.com/kwok-never-matches: "true"
  next: {}
`;

/** Builds kwok if it is not cached (hack/build-kwok.sh); returns the binary and its node Stage files. */
export async function ensureKwok(): Promise<{ bin: string; stages: string[] }> {
  const { stdout } = await promisify(execFile)('bash', [join(REPO_ROOT, 'hack/build-kwok.sh')], { maxBuffer: 16 << 20 });
  const bin = stdout.trim().split('\n').pop()!;
  const dir = join(bin, '..', 'stages');
  return { bin, stages: [join(dir, 'node-initialize.yaml'), join(dir, 'node-heartbeat-with-lease.yaml')] };
}

/** One kwok process against one apiserver, its log in `dir`/kwok.log. */
export class Kwok {
  private proc: ChildProcess | undefined;
  private log = '';

  constructor(private readonly kubeconfigPath: string, private readonly dir: string) {}

  get pid(): number | undefined {
    return this.proc?.exitCode === null && this.proc.signalCode === null ? this.proc.pid : undefined;
  }

  /** Starts kwok; it keeps running (and reconnects through an apiserver restart) until {@link stop}. */
  async start(): Promise<void> {
    const { bin, stages } = await ensureKwok();
    const config = join(this.dir, 'kwok.yaml');
    const docs = [
      `apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  manageNodesWithAnnotationSelector: ${KWOK_NODE_ANNOTATION.key}=${KWOK_NODE_ANNOTATION.value}
  nodeLeaseDurationSeconds: ${LEASE_DURATION_S}
  # kwok's documented defaults, which it does not apply to a configuration file of options (without
  # a cidr it logs an error for every Pod deleted on its Nodes: it cannot give the IP back to a pool).
  cidr: 10.0.0.0/24
  nodeLeaseParallelism: 4
  nodePlayStageParallelism: 4
  podPlayStageParallelism: 4
  podsOnNodeSyncParallelism: 1
`,
      ...(await Promise.all(stages.map((f) => readFile(f, 'utf8')))),
      NO_POD_STAGE,
    ];
    await writeFile(config, docs.map((d) => d.trimEnd()).join('\n---\n') + '\n');
    this.log = join(this.dir, 'kwok.log');
    const log = await open(this.log, 'w');
    // --config replaces kwok's default (~/.kwok/kwok.yaml): nothing but this file is read.
    this.proc = spawn(bin, [`--kubeconfig=${this.kubeconfigPath}`, `--config=${config}`], { stdio: ['ignore', log.fd, log.fd] });
    const proc = this.proc;
    proc.once('exit', () => void log.close());
    await new Promise((r) => setTimeout(r, 500));
    if (proc.exitCode !== null) throw new Error(`kwok exited at once (${proc.exitCode}): ${(await readFile(this.log, 'utf8')).slice(-2000)}`);
  }

  /** Lines of its log (e.g. to show why Nodes do not get Ready). */
  async tail(lines = 20): Promise<string> {
    return (await readFile(this.log, 'utf8').catch(() => '')).split('\n').slice(-lines).join('\n');
  }

  async stop(): Promise<void> {
    const p = this.proc;
    if (!p || p.exitCode !== null || p.signalCode !== null) return;
    const exited = new Promise((r) => p.once('exit', r));
    p.kill('SIGTERM');
    const t = setTimeout(() => p.kill('SIGKILL'), 5000);
    await exited;
    clearTimeout(t);
  }
}
