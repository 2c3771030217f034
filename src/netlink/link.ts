/**
 * `ip link`: batch-line builders and the read. Builders are pure; they return argv tokens for
 * IpRunner.batch.
 */
import type { BatchLine, RunTarget } from './iproute2/ip-runner.js';
import type { RtReader, VethRequest } from './rt-request.js';

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

/** Options of {@link link.addVeth}: the typed path's veth request, one definition for both. */
export type VethOptions = VethRequest;

/** Options of {@link link.set}. */
export interface LinkSetOptions {
  /** Interface alias (IFLA_IFALIAS), max 255 bytes; no whitespace (batch tokens). */
  alias?: string;
  state?: 'up' | 'down';
  mtuBytes?: number;
}

/** Builders of `ip link` batch lines. */
export const link = {
  /** `link add <name> … type veth peer name <peerName> … [netns <path>]` */
  addVeth(o: VethOptions): BatchLine {
    const own = [...(o.mtuBytes ? ['mtu', String(o.mtuBytes)] : []), ...(o.mac ? ['address', o.mac] : [])];
    const peer = [...(o.mtuBytes ? ['mtu', String(o.mtuBytes)] : []), ...(o.peerMac ? ['address', o.peerMac] : [])];
    return ['link', 'add', o.name, ...own, 'type', 'veth', 'peer', 'name', o.peerName, ...peer,
      ...(o.peerNetns ? ['netns', o.peerNetns] : [])];
  },
  /** `link set dev <name> [alias A] [mtu N] [up|down]` */
  set(name: string, o: LinkSetOptions): BatchLine {
    return ['link', 'set', 'dev', name, ...(o.alias !== undefined ? ['alias', o.alias] : []),
      ...(o.mtuBytes ? ['mtu', String(o.mtuBytes)] : []), ...(o.state ? [o.state] : [])];
  },
  /** `link del dev <name>`; a veth's peer goes with it, and so do routes through it. */
  del(name: string): BatchLine {
    return ['link', 'del', 'dev', name];
  },
} as const;

/**
 * Reads links, as `ip -json -d link show [dev <name>]` prints them: an rtnetlink dump through a
 * NetlinkExecutor, or that command through an IpRunner.
 * @throws NetlinkError (errno ENODEV) when `dev` is given and missing
 */
export function readLinks(kernel: RtReader, target: Pick<RunTarget, 'netns'> & { dev?: string } = {}): Promise<Link[]> {
  const { dev, netns } = target;
  return kernel.dump<Link>({ kind: 'links', ...(dev ? { dev } : {}) }, { netns });
}
