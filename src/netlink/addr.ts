/** `ip addr`: batch-line builders and the read. */
import type { BatchLine, RunTarget } from './iproute2/ip-runner.js';
import type { RtReader } from './rt-request.js';

/**
 * One address of a link (RTM_NEWADDR), the fields coil reads, named as `ip -json addr show` prints
 * them (`addr_info[]`) so iproute2 serves as the oracle of the address dump.
 */
export interface Address {
  family: 'inet' | 'inet6';
  local: string;
  prefixlen: number;
  scope?: string;
  /** Present and true while IPv6 DAD runs. */
  tentative?: boolean;
}

/** A link and its addresses: an address dump grouped by link (`ip -json addr show`'s entries). */
export interface LinkAddresses {
  ifindex: number;
  ifname: string;
  address?: string;
  addr_info: Address[];
}

/** Options of {@link addr.add}. */
export interface AddrAddOptions {
  /** `10.0.0.5/32` or `fd00::5/128` (CIDR string). */
  cidr: string;
  dev: string;
  /** Default: universe (link-local addresses get link scope from the kernel anyway). */
  scope?: 'host' | 'link' | 'global';
  /**
   * Skip IPv6 duplicate address detection: the address is usable at once instead of after ≈ 1 s
   * of "tentative". Only for addresses known unique on the link.
   */
  isNoDad?: boolean;
}

/** Builders of `ip addr` batch lines. */
export const addr = {
  /** `addr add <cidr> dev <dev> [scope S] [nodad]` */
  add(o: AddrAddOptions): BatchLine {
    return ['addr', 'add', o.cidr, 'dev', o.dev, ...(o.scope ? ['scope', o.scope] : []), ...(o.isNoDad ? ['nodad'] : [])];
  },
  /** `addr del <cidr> dev <dev>` */
  del(o: { cidr: string; dev: string }): BatchLine {
    return ['addr', 'del', o.cidr, 'dev', o.dev];
  },
} as const;

/**
 * Reads links with their addresses of both families, as `ip -json addr show [dev <name>]` prints
 * them: an rtnetlink dump through a NetlinkExecutor, or that command through an IpRunner.
 * @throws NetlinkError (errno ENODEV) when `dev` is given and missing
 */
export function readAddrs(kernel: RtReader, target: Pick<RunTarget, 'netns'> & { dev?: string } = {}): Promise<LinkAddresses[]> {
  const { dev, netns } = target;
  return kernel.dump<LinkAddresses>({ kind: 'addrs', ...(dev ? { dev } : {}) }, { netns });
}
