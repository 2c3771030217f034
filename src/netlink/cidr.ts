/**
 * Address and CIDR strings in the form iproute2 prints them, so kernel state read back with
 * `ip -json` can be compared with what coil asked for. iproute2 prints a host route's `dst`
 * without its prefix (`10.0.0.5`, not `10.0.0.5/32`) and IPv6 in RFC 5952 form.
 */
import { isIPv4, isIPv6 } from 'node:net';

/** A parsed CIDR: canonical network address, prefix length and family. */
export interface ParsedCidr {
  family: 4 | 6;
  /** Canonical address text (IPv6 compressed, lower-case). */
  address: string;
  prefixBits: number;
}

/**
 * Canonical text of an IPv4 or IPv6 address (`2001:DB8:0::1` → `2001:db8::1`).
 * @throws TypeError when `address` is neither
 */
export function canonicalAddress(address: string): string {
  // node:net accepts only plain dotted decimal (no leading zeros), which is already canonical.
  if (isIPv4(address)) return address;
  if (isIPv6(address)) return new URL(`http://[${address}]/`).hostname.slice(1, -1);
  throw new TypeError(`not an IP address: ${JSON.stringify(address)}`);
}

/** Family of an address string, or undefined when it is not one. */
export function addressFamily(address: string): 4 | 6 | undefined {
  return isIPv4(address) ? 4 : isIPv6(address) ? 6 : undefined;
}

/**
 * Parses `a.b.c.d/n` or `x::/n` (a bare address is a host prefix). The address must be the
 * network address: the kernel refuses host bits in a route destination.
 * @throws TypeError on malformed text, an out-of-range prefix or host bits set
 */
export function parseCidr(cidr: string): ParsedCidr {
  const slash = cidr.indexOf('/');
  const addr = slash < 0 ? cidr : cidr.slice(0, slash);
  const family = addressFamily(addr);
  if (family === undefined) throw new TypeError(`not a CIDR: ${JSON.stringify(cidr)}`);
  const width = family === 4 ? 32 : 128;
  const prefixText = slash < 0 ? String(width) : cidr.slice(slash + 1);
  const prefixBits = /^\d{1,3}$/.test(prefixText) ? Number(prefixText) : NaN;
  if (!(prefixBits >= 0 && prefixBits <= width)) throw new TypeError(`bad prefix length in ${JSON.stringify(cidr)}`);
  const value = toBigInt(addr, family);
  const hostMask = (1n << BigInt(width - prefixBits)) - 1n;
  if ((value & hostMask) !== 0n) throw new TypeError(`${JSON.stringify(cidr)} has host bits set`);
  return { family, address: canonicalAddress(addr), prefixBits };
}

/**
 * The key iproute2 uses for a route destination: `10.0.0.0/24`, `10.0.0.5` for a /32,
 * `2001:db8::5` for a /128, `default` for a zero-length prefix.
 */
export function routeKey(c: ParsedCidr): string {
  if (c.prefixBits === 0) return 'default';
  return c.prefixBits === (c.family === 4 ? 32 : 128) ? c.address : `${c.address}/${c.prefixBits}`;
}

/** Normalises a `dst` printed by `ip -json route` to the {@link routeKey} form. */
export function routeKeyOfDst(dst: string): string {
  return dst === 'default' ? 'default' : routeKey(parseCidr(dst));
}

/** Full CIDR text (`10.0.0.5/32`), the form used in batch lines and CNI results. */
export function formatCidr(c: ParsedCidr): string {
  return `${c.address}/${c.prefixBits}`;
}

function toBigInt(addr: string, family: 4 | 6): bigint {
  if (family === 4) return addr.split('.').reduce((acc, o) => (acc << 8n) | BigInt(Number(o)), 0n);
  const canon = canonicalAddress(addr);
  const [head = '', tail] = canon.split('::');
  const h = head === '' ? [] : head.split(':');
  const t = tail === undefined || tail === '' ? [] : tail.split(':');
  const groups = tail === undefined ? h : [...h, ...Array<string>(8 - h.length - t.length).fill('0'), ...t];
  return groups.reduce((acc, g) => (acc << 16n) | BigInt(parseInt(g, 16)), 0n);
}
