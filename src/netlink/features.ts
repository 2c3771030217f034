/**
 * Kernel feature detection by trying: each link kind is created in a throwaway network namespace
 * (`unshare --net`), which vanishes with the process, so probing never touches real state.
 * `modprobe -n` is not used: kernels built without module support (like this project's CI
 * machine) have no modprobe, and a module that exists may still fail to load.
 */
import { access } from 'node:fs/promises';
import { parseBatchFailures, type IpRunner } from './iproute2/ip-runner.js';
import { NetlinkError } from './netlink-error.js';
import { FOU_PORT } from '../api/v2/keys.js';

/** What the kernel supports, each probed for real. */
export interface KernelFeatures {
  /** veth pairs (pod networking). */
  veth: boolean;
  /** IPv6 stack present (`/proc/sys/net/ipv6`). */
  ipv6: boolean;
  /** VXLAN links. */
  vxlan: boolean;
  /** IPv4-in-IPv4 tunnels (`type ipip`), used by FoU egress tunnels. */
  ipip: boolean;
  /** IPv6 tunnels (`type ip6tnl`), used by FoU egress tunnels for IPv6. */
  ip6tnl: boolean;
  /** Foo-over-UDP receive ports (`ip fou add`), Coil's egress encapsulation. */
  fou: boolean;
}

/** Options of {@link probeFeatures}. */
export interface ProbeOptions {
  /** util-linux `unshare` binary. Default `'unshare'`. */
  unsharePath?: string;
}

const LINK_PROBES: ReadonlyArray<readonly [keyof KernelFeatures, string]> = [
  ['veth', 'link add probe0 type veth peer name probe1'],
  ['vxlan', 'link add probe2 type vxlan id 42 dstport 4789'],
  ['ipip', 'link add probe3 type ipip local 192.0.2.1 remote 192.0.2.2'],
  ['ip6tnl', 'link add probe4 type ip6tnl mode ipip6 local 2001:db8::1 remote 2001:db8::2'],
];

/**
 * Probes {@link KernelFeatures}. Costs two short processes; call once at start-up.
 * @throws NetlinkError when `unshare`/`ip` cannot run at all (e.g. not root)
 */
export async function probeFeatures(ip: IpRunner, options: ProbeOptions = {}): Promise<KernelFeatures> {
  const unshare = options.unsharePath ?? 'unshare';
  const failed = new Set<number>();
  try {
    await ip.exec([unshare, '--net', ip.ipPath, '-force', '-batch', '-'], { input: LINK_PROBES.map(([, l]) => l).join('\n') + '\n' });
  } catch (err) {
    if (!(err instanceof NetlinkError) || err.exitCode !== 1) throw err;
    const lines = parseBatchFailures(err.stderr);
    if (lines.length === 0) throw err;
    for (const f of lines) failed.add(f.line);
  }
  // `ip fou` exits the whole process when the generic netlink family is missing, so it runs alone.
  const fou = await ip.exec([unshare, '--net', ip.ipPath, 'fou', 'add', 'port', String(FOU_PORT), 'ipproto', '4'])
    .then(() => true, (err: unknown) => {
      if (err instanceof NetlinkError && err.exitCode !== null) return false;
      throw err;
    });
  const ipv6 = await access('/proc/sys/net/ipv6').then(() => true, () => false);
  const result: KernelFeatures = { veth: false, ipv6, vxlan: false, ipip: false, ip6tnl: false, fou };
  LINK_PROBES.forEach(([name], i) => { result[name] = !failed.has(i + 1); });
  return result;
}
