/** Links: the kernel's shape of a link (and of a tunnel's data), and the read. */
import type { RunTarget } from './iproute2/ip-runner.js';
import type { RtReader } from './rt-request.js';

/**
 * A link (RTM_NEWLINK), the fields coil reads, named as `ip -json -d link show` prints them so
 * iproute2 serves as the oracle of the link dump.
 */
export interface Link {
  ifindex: number;
  ifname: string;
  flags: string[];
  mtu: number;
  operstate?: string;
  link_type?: string;
  /** MAC address, lower-case colon form. */
  address?: string;
  /** Link group: `default` or the number as a string. */
  group?: string;
  /** Set by `link set … alias`; absent when empty. */
  ifalias?: string;
  /** netns id (as seen from this netns) of a veth peer living in another netns. */
  link_netnsid?: number;
  /** Only with `-d`: kind of a virtual link (`veth`, `vxlan`, ...); absent for physical NICs. */
  linkinfo?: { info_kind?: string; info_data?: TunnelInfo };
}

/**
 * `linkinfo.info_data` of an ipip or ip6tnl link (a FoU peer link, a flow-based receive device),
 * the fields coil reads, as `ip -json -d link show` prints them.
 */
export interface TunnelInfo {
  /** Flow-based (`external`, collect metadata): endpoints come with each packet. */
  external?: boolean;
  /** Outer destination: an address, or `any`. */
  remote?: string;
  /** Outer source: an address, or `any`. */
  local?: string;
  /** The UDP encapsulation, absent for none. `sport` 0 = chosen per flow (`auto`). */
  encap?: { type: 'fou' | 'gue' | null; sport: number; dport: number };
}

/**
 * Reads links, as `ip -json -d link show [dev <name>]` prints them: an rtnetlink dump through a
 * NetlinkExecutor, or that command through an IpRunner.
 * @throws NetlinkError (errno ENODEV) when `dev` is given and missing
 */
export function readLinks(kernel: RtReader, target: Pick<RunTarget, 'netns'> & { dev?: string } = {}): Promise<Link[]> {
  const { dev, netns } = target;
  return kernel.dump<Link>({ kind: 'links', ...(dev ? { dev } : {}) }, { netns });
}
