/**
 * A program's memory in its pod on a lab node, read as the kubelet reads it.
 *
 * The kubelet's summary API (what `kubectl top`, the metrics server and memory evictions use) takes
 * a container's **working set** from cAdvisor: the memory cgroup's usage minus its inactive file
 * pages — on cgroup v1 `memory.usage_in_bytes` minus `total_inactive_file` of `memory.stat`, on
 * cgroup v2 `memory.current` minus `inactive_file` — and 0 when the inactive part exceeds the
 * usage (cAdvisor, container/libcontainer/handler.go `setMemoryStats`). Beside it this module
 * reads the process's RSS (VmRSS, VmHWM of /proc/<pid>/status) and the cgroup's own split of
 * anonymous and file pages, so a figure can say what it is made of (docs/performance.md#footprint).
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { processesIn } from './cgroups.js';

const CGROUP_FS = '/sys/fs/cgroup';

/** A container's memory, bytes. */
export interface ContainerMemory {
  /** The program's main process. */
  readonly pid: number;
  /** Its memory cgroup, relative to the hierarchy's root. */
  readonly cgroup: string;
  /** cAdvisor's working set: usage − inactive file, ≥ 0. */
  readonly workingSet: number;
  /** The cgroup's usage (v1 memory.usage_in_bytes, v2 memory.current). */
  readonly usage: number;
  /** Anonymous pages charged to the cgroup (v1 total_rss, v2 anon). */
  readonly anon: number;
  /** File pages charged to the cgroup (v1 total_cache, v2 file), of them active. */
  readonly file: number;
  readonly activeFile: number;
  readonly inactiveFile: number;
  /** VmRSS and VmHWM of the main process. */
  readonly rss: number;
  readonly hwm: number;
  /**
   * The working set of the container's pod (the parent cgroup: every container of the pod, and
   * the pages charged to its finished init containers, which the kernel moved up to the pod).
   */
  readonly podWorkingSet: number;
}

/** The fields of a memory.stat text (`key value` lines), bytes. Pure. */
export function parseMemoryStat(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    const [key, value] = line.trim().split(/\s+/);
    if (key && value !== undefined && /^\d+$/.test(value)) out.set(key, Number(value));
  }
  return out;
}

/**
 * cAdvisor's working set from a cgroup's usage and memory.stat: usage minus inactive file pages
 * (v1 `total_inactive_file`, v2 `inactive_file`), 0 if that is negative. Pure.
 * @throws Error when the stat names no inactive file count (not a memory.stat)
 */
export function workingSet(usage: number, stat: ReadonlyMap<string, number>, version: 1 | 2): { workingSet: number; inactiveFile: number } {
  const inactiveFile = stat.get(version === 1 ? 'total_inactive_file' : 'inactive_file');
  if (inactiveFile === undefined) throw new Error(`memory.stat has no ${version === 1 ? 'total_inactive_file' : 'inactive_file'}`);
  return { workingSet: Math.max(0, usage - inactiveFile), inactiveFile };
}

/** `Key:  N kB` of /proc/<pid>/status, bytes (NaN when missing). */
function statusKb(text: string, key: string): number {
  return Number(new RegExp(`^${key}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? NaN) * 1024;
}

/**
 * The memory of `pid`'s container: its memory cgroup (v1 `memory` line of /proc/<pid>/cgroup, else
 * the v2 `0::` line) and the process's own RSS.
 * @throws Error when the process or its cgroup is gone
 */
export async function containerMemory(pid: number): Promise<ContainerMemory> {
  const lines = (await readFile(`/proc/${pid}/cgroup`, 'utf8')).split('\n');
  const v1 = lines.find((l) => l.split(':')[1]?.split(',').includes('memory'))?.split(':')[2];
  const v2 = lines.find((l) => l.startsWith('0::'))?.slice(3);
  const version: 1 | 2 = v1 !== undefined ? 1 : 2;
  const cgroup = v1 ?? v2;
  if (cgroup === undefined) throw new Error(`process ${pid} is in no memory cgroup`);
  const dir = version === 1 ? join(CGROUP_FS, 'memory', cgroup) : join(CGROUP_FS, cgroup);
  const read = async (d: string): Promise<{ usage: number; stat: Map<string, number> }> => ({
    usage: Number((await readFile(join(d, version === 1 ? 'memory.usage_in_bytes' : 'memory.current'), 'utf8')).trim()),
    stat: parseMemoryStat(await readFile(join(d, 'memory.stat'), 'utf8')),
  });
  const { usage, stat } = await read(dir);
  const ws = workingSet(usage, stat, version);
  const pod = await read(join(dir, '..'));
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  const pick = (v1key: string, v2key: string): number => stat.get(version === 1 ? v1key : v2key) ?? NaN;
  return {
    pid, cgroup, usage, workingSet: ws.workingSet, inactiveFile: ws.inactiveFile,
    anon: pick('total_rss', 'anon'), file: pick('total_cache', 'file'), activeFile: pick('total_active_file', 'active_file'),
    rss: statusKb(status, 'VmRSS'), hwm: statusKb(status, 'VmHWM'),
    podWorkingSet: workingSet(pod.usage, pod.stat, version).workingSet,
  };
}

/**
 * The processes in node `node`'s pods (cgroup `/<node>/kubepods` and below) whose command line has
 * an argument matching `pattern` — a program found by what it runs, never by a process name.
 */
export async function programPids(node: string, pattern: RegExp): Promise<number[]> {
  const out: number[] = [];
  for (const pid of await processesIn(`/${node}/kubepods`)) {
    const cmd = (await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '')).split('\0');
    if (cmd.some((a) => pattern.test(a))) out.push(pid);
  }
  return out.sort((a, b) => a - b);
}

/** The command-line argument each long-lived program of the image runs (hack/image/entrypoint.sh). */
export const PROGRAMS = {
  coild: /\/node-agent\/main(\.bundle)?\.c?js$/,
  'coil-egress': /\/egress-agent\/main(\.bundle)?\.c?js$/,
  'coil-controller': /\/controller\/main(\.bundle)?\.c?js$/,
} as const;
export type Program = keyof typeof PROGRAMS;
