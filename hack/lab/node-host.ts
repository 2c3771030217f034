/**
 * The "machine" of a real lab node: its network namespace (made by topology.ts), a mount
 * namespace of its own, and a cgroup subtree (cgroups.ts). Every process of the node — containerd
 * and the containers it starts, kubelet, kube-proxy, BIRD — runs inside all three.
 *
 * The mount namespace gives the node the directories a Kubernetes node owns, so several nodes on
 * one machine never share them, and the machine's own directories are never written:
 *
 *   /etc, /opt, /var     overlays on the machine's (writes go to the node's dir), which also give
 *                        the mount points below without creating them on the machine
 *   /run                 the node's own (containerd's socket and state, netns pins, coild's socket)
 *   /etc/cni/net.d       the node's own (the chart's init container writes 10-coil.conflist here)
 *   /opt/cni/bin         the node's own (loopback and portmap from Debian; the chart adds `coil`)
 *   /var/lib/kubelet, /var/lib/containerd, /var/lib/cni, /var/log/pods
 *
 * Each is a directory under the node's dir in the lab dir, so the lab (in the machine's
 * namespace) reads them without entering the node: {@link NodeHost.hostPath}. The namespace is
 * `rshared` inside: kubelet's pod volume mounts and containerd's netns pins reach containers that
 * mount a host path with HostToContainer propagation (coild's /run).
 *
 * The namespace is pinned by a bind mount in `<lab dir>/ns` (a private mount, as a namespace pin
 * must be), the way `ip netns` pins network namespaces. {@link NodeHost.destroy} kills the cgroup
 * subtree and any other process in the namespace, then unpins it: the kernel then drops every
 * mount made inside (overlays, containerd's snapshots, kubelet's volumes) with it.
 */
import { execFile } from 'node:child_process';
import { mkdir, readFile, readdir, readlink, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { ManagedProcess } from '../../test/envtest/process.js';
import { createCgroup, destroyCgroup, inCgroup } from './cgroups.js';

const run = promisify(execFile);

/** Node path → directory (under the node's dir) bind-mounted there. */
export const NODE_DIRS: Readonly<Record<string, string>> = {
  '/run': 'run',
  '/etc/cni/net.d': 'cni-conf',
  '/opt/cni/bin': 'cni-bin',
  '/var/lib/kubelet': 'kubelet',
  '/var/lib/containerd': 'containerd',
  '/var/lib/cni': 'cni-cache',
  '/var/log/pods': 'pod-logs',
};
/** Machine directories the node sees through an overlay of its own. */
const OVERLAID = ['/etc', '/opt', '/var'];
/** Sub-cgroup of the node's daemons (kubelet puts pods under `<cgroup>/kubepods`). */
const DAEMONS = 'daemons';

/** What identifies one node host. */
export interface NodeHostSpec {
  readonly name: string;
  /** The node's directory (created; removed by destroy). */
  readonly dir: string;
  /** Path of the network namespace (`/run/netns/<name>`). */
  readonly netnsPath: string;
  /** The node's cgroup path, e.g. `/coillab-n1`. */
  readonly cgroup: string;
  /** Directory of mount namespace pins (a private mount; see {@link pinDir}). */
  readonly pinDir: string;
}

/**
 * The shell script, run inside a new mount namespace, that gives the node its directories (pure).
 */
export function nodeMountScript(dir: string): string {
  const lines = ['set -e'];
  for (const d of OVERLAID) {
    const o = join(dir, 'overlay', d.slice(1));
    lines.push(`mkdir -p ${o}/upper ${o}/work`, `mount -t overlay overlay -o lowerdir=${d},upperdir=${o}/upper,workdir=${o}/work ${d}`);
  }
  for (const [path, sub] of Object.entries(NODE_DIRS)) lines.push(`mkdir -p ${path} ${join(dir, sub)}`, `mount --bind ${join(dir, sub)} ${path}`);
  lines.push('mount --make-rshared /');
  return lines.join('\n');
}

/**
 * Makes `dir` a private bind mount of itself (idempotent): a mount namespace can only be pinned
 * on a mount that does not propagate, or the pin would reach into the namespace it pins.
 */
export async function pinDir(dir: string): Promise<void> {
  await mkdir(dir, { recursive: true });
  const mountinfo = await readFile('/proc/self/mountinfo', 'utf8');
  if (!mountinfo.split('\n').some((l) => l.split(' ')[4] === dir)) await run('mount', ['--bind', dir, dir]);
  await run('mount', ['--make-private', dir]);
}

/** Unmounts what {@link pinDir} and the pins in it mounted (idempotent). */
export async function unpinDir(dir: string): Promise<void> {
  for (const f of await readdir(dir).catch(() => [] as string[])) await run('umount', [join(dir, f)]).catch(() => undefined);
  const mountinfo = await readFile('/proc/self/mountinfo', 'utf8').catch(() => '');
  if (mountinfo.split('\n').some((l) => l.split(' ')[4] === dir)) await run('umount', [dir]);
}

/** A node's machine: namespaces, cgroup, directories. */
export class NodeHost {
  private constructor(readonly spec: NodeHostSpec) {}

  /** The mount namespace pin. */
  get mountNs(): string {
    return join(this.spec.pinDir, `${this.spec.name}.mnt`);
  }

  /** The cgroup of the node's daemons. */
  get daemonsCgroup(): string {
    return `${this.spec.cgroup}/${DAEMONS}`;
  }

  /**
   * Creates the mount namespace (with {@link nodeMountScript}) and the cgroups. The network
   * namespace must exist. On failure, removes what it made.
   */
  static async create(spec: NodeHostSpec): Promise<NodeHost> {
    const host = new NodeHost(spec);
    try {
      await mkdir(spec.dir, { recursive: true });
      await writeFile(host.mountNs, '');
      await run('unshare', [`--mount=${host.mountNs}`, '--propagation', 'private', 'true']);
      await run('nsenter', [`--mount=${host.mountNs}`, 'sh', '-c', nodeMountScript(spec.dir)]);
      await createCgroup(host.daemonsCgroup);
      return host;
    } catch (err) {
      await host.destroy().catch(() => undefined);
      throw err;
    }
  }

  /** Where the lab finds the node's `path` (one of {@link NODE_DIRS} or below). */
  hostPath(path: string): string {
    for (const [mount, sub] of Object.entries(NODE_DIRS)) {
      if (path === mount || path.startsWith(`${mount}/`)) return join(this.spec.dir, sub, path.slice(mount.length));
    }
    throw new Error(`${path} is not a directory of its own on node ${this.spec.name}`);
  }

  /** The argv that runs `argv` inside the node: its namespaces and its daemons' cgroup. */
  argv(argv: readonly string[]): string[] {
    return ['nsenter', `--mount=${this.mountNs}`, `--net=${this.spec.netnsPath}`, '--', ...inCgroup(this.daemonsCgroup, argv)];
  }

  /** Starts a daemon inside the node, its output in `<node dir>/<name>.log`. */
  spawn(name: string, argv: readonly string[], env?: NodeJS.ProcessEnv): Promise<ManagedProcess> {
    const [command, ...args] = this.argv(argv);
    return ManagedProcess.start({ name: `${name}@${this.spec.name}`, command: command!, args, logFile: join(this.spec.dir, `${name}.log`), ...(env ? { env } : {}) });
  }

  /**
   * Runs a command inside the node and resolves with its stdout.
   * @throws Error carrying its stderr when it exits non-zero.
   */
  async exec(argv: readonly string[], options: { timeoutMs?: number } = {}): Promise<string> {
    const [command, ...args] = this.argv(argv);
    try {
      return (await run(command!, args, { maxBuffer: 64 << 20, timeout: options.timeoutMs ?? 120_000 })).stdout;
    } catch (err) {
      const e = err as { stderr?: string; message: string };
      throw new Error(`${argv.join(' ')} on ${this.spec.name}: ${e.stderr?.trim() || e.message}`, { cause: err });
    }
  }

  /**
   * Stops everything the node runs and removes its namespaces' contents: the cgroup subtree is
   * killed, then any process still in the mount namespace, then the pin is unmounted and the
   * node's dir removed. Safe to call on a half-made or already destroyed host, and from another
   * process than the one that made it (`npm run lab -- down`).
   */
  async destroy(): Promise<void> {
    await destroyCgroup(this.spec.cgroup);
    await killNamespace(this.mountNs);
    await run('umount', [this.mountNs]).catch(() => undefined);
    await rm(this.mountNs, { force: true });
    await rm(this.spec.dir, { recursive: true, force: true });
  }

  /** A host object for a node a previous run left (for {@link destroy}). */
  static existing(spec: NodeHostSpec): NodeHost {
    return new NodeHost(spec);
  }
}

/** SIGKILLs every process whose mount namespace is the one pinned at `pin` (none when unpinned). */
async function killNamespace(pin: string): Promise<void> {
  // The pin's line in mountinfo names the namespace as its root: `mnt:[4026532529]`.
  const mountinfo = await readFile('/proc/self/mountinfo', 'utf8');
  const want = mountinfo.split('\n').map((l) => l.split(' ')).find((f) => f[4] === pin && f[3]?.startsWith('mnt:['))?.[3];
  if (!want) return;
  for (let round = 0; round < 50; round++) {
    const pids: number[] = [];
    for (const entry of await readdir('/proc')) {
      if (!/^\d+$/.test(entry)) continue;
      if ((await readlink(`/proc/${entry}/ns/mnt`).catch(() => '')) === want) pids.push(Number(entry));
    }
    if (pids.length === 0) return;
    for (const pid of pids) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`processes survive in the mount namespace pinned at ${pin}`);
}
