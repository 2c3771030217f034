/**
 * Counts a process's TCP connections from the OS, as `ss -tnp` would: the socket inodes among
 * its open files (/proc/PID/fd) matched to established entries of /proc/PID/net/tcp{,6} (the
 * tables of the process's own network namespace). Linux only.
 */
import { readdir, readFile, readlink } from 'node:fs/promises';

/**
 * Established TCP connections of process `pid` whose remote port is one of `remotePorts`.
 * @throws Error when /proc/PID cannot be read (the process is gone, or not ours to inspect)
 */
export async function tcpConnections(pid: number, remotePorts: readonly number[]): Promise<number> {
  const inodes = new Set<string>();
  for (const fd of await readdir(`/proc/${pid}/fd`)) {
    const link = await readlink(`/proc/${pid}/fd/${fd}`).catch(() => '');
    const m = /^socket:\[(\d+)\]$/.exec(link);
    if (m) inodes.add(m[1]!);
  }
  let n = 0;
  for (const table of ['tcp', 'tcp6']) {
    const lines = (await readFile(`/proc/${pid}/net/${table}`, 'utf8')).split('\n').slice(1);
    for (const line of lines) {
      // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
      const f = line.trim().split(/\s+/);
      if (f.length < 10) continue;
      const remotePort = parseInt(f[2]!.split(':')[1]!, 16);
      // st 01 = TCP_ESTABLISHED.
      if (remotePorts.includes(remotePort) && f[3] === '01' && inodes.has(f[9]!)) n++;
    }
  }
  return n;
}
