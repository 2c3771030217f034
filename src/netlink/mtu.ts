/**
 * Host MTU detection, as Coil's `netutil.DetectMTU`: the smallest MTU of the links on the route
 * to a well-known global address (192.0.0.10, else 2001:1::2), else the smallest MTU among the up
 * physical devices. No tunnel overhead is subtracted.
 * @see docs/compatibility.md#pod-network-setup (MTU)
 */
import type { RunTarget } from './iproute2/ip-runner.js';
import type { RtReader } from './rt-request.js';
import { readLinks, type Link } from './link.js';
import { routeGet } from './route.js';

/** Destinations probed with `ip route get`, in order (IANA special-purpose, never local). */
const PROBES = ['192.0.0.10', '2001:1::2'] as const;

/**
 * Detects the MTU pods should use, reading through `kernel` (a NetlinkExecutor: rtnetlink, else
 * iproute2; or an IpRunner).
 * @returns MTU in bytes, or undefined when nothing qualifies (then the kernel default applies)
 * @throws NetlinkError when the kernel cannot be read
 */
export async function detectMtu(kernel: RtReader, target: Pick<RunTarget, 'netns'> = {}): Promise<number | undefined> {
  const links = await readLinks(kernel, target);
  for (const dst of PROBES) {
    const r = await routeGet(kernel, dst, target);
    const dev = r?.dev === undefined ? undefined : links.find((l) => l.ifname === r.dev);
    if (dev !== undefined) return dev.mtu;
  }
  const physical = links.filter(isUpPhysical).map((l) => l.mtu);
  return physical.length === 0 ? undefined : Math.min(...physical);
}

/** A NIC: Ethernet, administratively up, and no `linkinfo` kind (virtual links all have one). */
function isUpPhysical(l: Link): boolean {
  return l.link_type === 'ether' && l.linkinfo?.info_kind === undefined && l.flags.includes('UP');
}
