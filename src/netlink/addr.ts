/** Addresses: the kernel's shape of a link's addresses, and the read. */
import type { RunTarget } from './iproute2/ip-runner.js';
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

/**
 * Reads links with their addresses of both families, as `ip -json addr show [dev <name>]` prints
 * them: an rtnetlink dump through a NetlinkExecutor, or that command through an IpRunner.
 * @throws NetlinkError (errno ENODEV) when `dev` is given and missing
 */
export function readAddrs(kernel: RtReader, target: Pick<RunTarget, 'netns'> & { dev?: string } = {}): Promise<LinkAddresses[]> {
  const { dev, netns } = target;
  return kernel.dump<LinkAddresses>({ kind: 'addrs', ...(dev ? { dev } : {}) }, { netns });
}
