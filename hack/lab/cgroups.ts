/**
 * The lab's cgroups. Each lab node owns one cgroup path (e.g. `/coillab-n1`) in every hierarchy
 * of /sys/fs/cgroup: kubelet is given it as its cgroupRoot (pods go under `<path>/kubepods`), and
 * the node's own daemons — containerd with its shims, kubelet, kube-proxy, BIRD — are started in
 * `<path>/daemons`. Everything a node ever ran is therefore in that subtree, so stopping a node
 * is: freeze the subtree, kill every process in it, thaw, remove the directories. Nothing is
 * found by name.
 *
 * This machine mounts cgroup v1 (one hierarchy per controller, plus name=systemd and the unified
 * v2 one with no controllers); a path is made in each of them.
 */
import { readFile, readdir, rmdir, mkdir, writeFile, access } from 'node:fs/promises';
import { join } from 'node:path';

const CGROUP_FS = '/sys/fs/cgroup';

/** Mount points of the cgroup hierarchies (v1 and v2) under /sys/fs/cgroup. */
export async function hierarchies(): Promise<string[]> {
  const mountinfo = await readFile('/proc/self/mountinfo', 'utf8');
  const out: string[] = [];
  for (const line of mountinfo.split('\n')) {
    // ... mount-point ... - fstype source options
    const [left, right] = line.split(' - ');
    const fstype = right?.split(' ')[0];
    const mountPoint = left?.split(' ')[4];
    if ((fstype === 'cgroup' || fstype === 'cgroup2') && mountPoint?.startsWith(`${CGROUP_FS}/`)) out.push(mountPoint);
  }
  return out;
}

/**
 * Creates `path` (e.g. `/coillab-n1/daemons`) in every hierarchy. In the cpuset hierarchy a new
 * cgroup starts with no CPUs and no memory nodes, and no task may join it until they are set:
 * each new level copies its parent's.
 */
export async function createCgroup(path: string): Promise<void> {
  for (const h of await hierarchies()) {
    let dir = h;
    for (const part of path.split('/').filter(Boolean)) {
      const parent = dir;
      dir = join(dir, part);
      if (await exists(dir)) continue;
      await mkdir(dir);
      if (await exists(join(dir, 'cpuset.cpus'))) {
        for (const f of ['cpuset.cpus', 'cpuset.mems']) await writeFile(join(dir, f), await readFile(join(parent, f), 'utf8'));
      }
    }
  }
}

/**
 * The argv that runs `argv` inside cgroup `path` (in every hierarchy): a shell moves itself
 * there, then execs the command, so the command and all its children start inside.
 */
export function inCgroup(path: string, argv: readonly string[]): string[] {
  const script = `for f in ${CGROUP_FS}/*${path}/cgroup.procs; do echo $$ > "$f"; done; exec "$@"`;
  return ['sh', '-c', script, 'sh', ...argv];
}

/** PIDs of every process in `path` or below, in any hierarchy. */
export async function processesIn(path: string): Promise<number[]> {
  const pids = new Set<number>();
  const walk = async (dir: string): Promise<void> => {
    const procs = await readFile(join(dir, 'cgroup.procs'), 'utf8').catch(() => '');
    for (const l of procs.split('\n')) if (l) pids.add(Number(l));
    const entries = await readdir(dir, { withFileTypes: true }).catch(() => []);
    for (const e of entries) if (e.isDirectory()) await walk(join(dir, e.name));
  };
  for (const h of await hierarchies()) await walk(join(h, path));
  return [...pids];
}

/**
 * Kills every process in `path` and below, then removes the cgroups (deepest first) in every
 * hierarchy. The subtree is frozen first (freezer hierarchy), so nothing forks while it is killed.
 * @throws Error when processes are still there after `timeoutMs` (default 20 s).
 */
export async function destroyCgroup(path: string, timeoutMs = 20_000): Promise<void> {
  const freezer = join(CGROUP_FS, 'freezer', path, 'freezer.state');
  const frozen = await writeFile(freezer, 'FROZEN').then(() => true, () => false);
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const pids = await processesIn(path);
    if (pids.length === 0) break;
    for (const pid of pids) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // gone already
      }
    }
    if (frozen) await writeFile(freezer, 'THAWED').catch(() => undefined);
    if (Date.now() > deadline) throw new Error(`cgroup ${path}: processes ${pids.join(' ')} survive SIGKILL`);
    await new Promise((r) => setTimeout(r, 100));
  }
  for (const h of await hierarchies()) await removeTree(join(h, path));
}

/**
 * Freezes (`true`) or thaws (`false`) every process under `path` (freezer hierarchy, cgroup v1):
 * a frozen process runs no instruction and answers nothing, as on a machine that stopped, while
 * the kernel keeps its sockets and its network namespace forwarding. A frozen task handles no
 * signal, SIGKILL included, until it is thawed.
 * @throws Error when the freezer hierarchy has no such cgroup.
 */
export async function setFrozen(path: string, frozen: boolean): Promise<void> {
  await writeFile(join(CGROUP_FS, 'freezer', path, 'freezer.state'), frozen ? 'FROZEN' : 'THAWED');
}

async function removeTree(dir: string): Promise<void> {
  const entries = await readdir(dir, { withFileTypes: true }).catch(() => null);
  if (!entries) return;
  for (const e of entries) if (e.isDirectory()) await removeTree(join(dir, e.name));
  // A cgroup whose last task has only just exited can refuse rmdir for a moment (EBUSY).
  for (let attempt = 0; ; attempt++) {
    try {
      await rmdir(dir);
      return;
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT') return;
      if (code !== 'EBUSY' || attempt >= 50) throw err;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

/** Top-level cgroup names (in the pids hierarchy) that start with `prefix`: what a lab left. */
export async function cgroupsWithPrefix(prefix: string): Promise<string[]> {
  const names = new Set<string>();
  for (const h of await hierarchies()) {
    for (const e of await readdir(h, { withFileTypes: true }).catch(() => [])) {
      if (e.isDirectory() && e.name.startsWith(prefix)) names.add(`/${e.name}`);
    }
  }
  return [...names];
}

function exists(path: string): Promise<boolean> {
  return access(path).then(() => true, () => false);
}
