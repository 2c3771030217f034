/**
 * Sysctls of a network namespace. `/proc/sys/net` shows the netns of the process that opens it,
 * so the own netns is written directly and another one through `nsenter --net=<path> sysctl`.
 */
import { readFile, writeFile } from 'node:fs/promises';
import type { IpRunner } from './iproute2/ip-runner.js';
import { NetlinkError } from './netlink-error.js';

const KEY = /^[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)+$/;

/** Options of {@link writeSysctl} and {@link readSysctl}. */
export interface SysctlTarget {
  /** netns file path; undefined = this process's netns (written through /proc/sys directly). */
  netns?: string;
  /** sysctl binary (procps) used for other namespaces. Default `'sysctl'`. */
  sysctlPath?: string;
}

/**
 * Sets `key` (dotted form, e.g. `net.ipv4.ip_forward`) to `value`.
 * @throws TypeError on a malformed key (interface names containing dots are not supported)
 * @throws NetlinkError when the write fails (missing key, e.g. IPv6 disabled: errno ENOENT)
 */
export async function writeSysctl(ip: IpRunner, key: string, value: string, target: SysctlTarget = {}): Promise<void> {
  const path = keyPath(key);
  if (target.netns !== undefined) {
    await ip.exec([target.sysctlPath ?? 'sysctl', '-q', '-w', `${key}=${value}`], { netns: target.netns });
    return;
  }
  try {
    await writeFile(path, value);
  } catch (err) {
    throw fsError(`write ${path}`, err);
  }
}

/**
 * Reads `key` (dotted form), trimmed.
 * @throws NetlinkError when the key does not exist
 */
export async function readSysctl(ip: IpRunner, key: string, target: SysctlTarget = {}): Promise<string> {
  const path = keyPath(key);
  if (target.netns !== undefined) {
    const { stdout } = await ip.exec([target.sysctlPath ?? 'sysctl', '-n', key], { netns: target.netns });
    return stdout.trim();
  }
  try {
    return (await readFile(path, 'utf8')).trim();
  } catch (err) {
    throw fsError(`read ${path}`, err);
  }
}

function keyPath(key: string): string {
  if (!KEY.test(key)) throw new TypeError(`bad sysctl key ${JSON.stringify(key)}`);
  return `/proc/sys/${key.replaceAll('.', '/')}`;
}

function fsError(command: string, err: unknown): NetlinkError {
  const code = (err as NodeJS.ErrnoException).code;
  return new NetlinkError(`${command}: ${(err as Error).message}`, {
    argv: [], command, stderr: '', exitCode: null, cause: err, ...(code === 'ENOENT' ? { errno: 'ENOENT' as const } : {}),
  });
}
