/**
 * Input checks of PodNetwork.setup, done before any kernel call so that bad input creates
 * nothing, and so every value reaching an `ip -batch` line is a single safe token.
 */
import { canonicalAddress } from '../../ipam/ip-address.js';
import { addressFamily } from '../../netlink/cidr.js';
import { PodNetworkError, formatAlias, type PodSetupOptions } from './pod-network.js';

/** {@link PodSetupOptions} after validation: addresses canonical, alias built. */
export interface ValidSetup {
  containerId: string;
  ifname: string;
  pool: string;
  alias: string;
  ipv4?: string;
  ipv6?: string;
  hostIPv4?: string;
  hostIPv6?: string;
}

/** CNI spec: container IDs are alphanumerics plus `_`, `.`, `-`. */
const CONTAINER_ID = /^[A-Za-z0-9][A-Za-z0-9_.-]*$/;
/** Linux: ≤ 15 bytes, no `/`, `:` or whitespace; `.` and `..` are reserved. */
const IFNAME = /^[A-Za-z0-9_.@-]{1,15}$/;
/** Kubernetes object names (DNS subdomain); '' is Coil's egress-only marker and not accepted here. */
const POOL = /^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/;

/**
 * Validates and canonicalises setup input.
 * @throws PodNetworkError of kind `invalid-argument`, naming the bad field
 */
export function validateSetup(netnsPath: string, o: PodSetupOptions): ValidSetup {
  const bad = (what: string): PodNetworkError =>
    new PodNetworkError(`setup of ${o.containerId}:${o.ifname}: ${what}`, { kind: 'invalid-argument', containerId: o.containerId, ifname: o.ifname });
  if (!CONTAINER_ID.test(o.containerId)) throw bad(`invalid containerId ${JSON.stringify(o.containerId)}`);
  if (!IFNAME.test(o.ifname) || o.ifname === '.' || o.ifname === '..') throw bad(`invalid ifname ${JSON.stringify(o.ifname)}`);
  if (!POOL.test(o.pool)) throw bad(`invalid pool name ${JSON.stringify(o.pool)}`);
  if (!netnsPath.startsWith('/') || /[\s"'\\#]/.test(netnsPath)) throw bad(`invalid netns path ${JSON.stringify(netnsPath)}`);
  if (o.ipv4 === undefined && o.ipv6 === undefined) throw bad('neither ipv4 nor ipv6 given');
  const family = (field: keyof PodSetupOptions, want: 4 | 6): string | undefined => {
    const v = o[field];
    if (v === undefined) return undefined;
    if (typeof v !== 'string' || addressFamily(v) !== want) throw bad(`${field} is not an IPv${want} address: ${JSON.stringify(v)}`);
    return canonicalAddress(v);
  };
  const ipv4 = family('ipv4', 4);
  const ipv6 = family('ipv6', 6);
  const hostIPv4 = family('hostIPv4', 4);
  const hostIPv6 = family('hostIPv6', 6);
  if (ipv4 !== undefined && hostIPv4 === undefined) throw bad('an IPv4 pod needs hostIPv4 (the node InternalIP is its gateway)');
  if (o.mtuBytes !== undefined && !(Number.isInteger(o.mtuBytes) && o.mtuBytes >= 68 && o.mtuBytes <= 65535)) {
    throw bad(`mtuBytes out of range: ${o.mtuBytes}`);
  }
  return {
    containerId: o.containerId, ifname: o.ifname, pool: o.pool, alias: formatAlias(o.pool, o.containerId, o.ifname),
    ...(ipv4 ? { ipv4 } : {}), ...(ipv6 ? { ipv6 } : {}), ...(hostIPv4 ? { hostIPv4 } : {}), ...(hostIPv6 ? { hostIPv6 } : {}),
  };
}
