/**
 * Address and CIDR strings in the form iproute2 prints them, so kernel state read back with
 * `ip -json` can be compared with what coil asked for. iproute2 prints a host route's `dst`
 * without its prefix (`10.0.0.5`, not `10.0.0.5/32`) and IPv6 in RFC 5952 form.
 *
 * A view of the one address parser, src/ipam/ip-address.ts (Go's rules, RFC 5952 output): nothing
 * here parses an address itself. Failures are TypeErrors, as the kernel-facing callers expect.
 */
import { addressBits, formatAddress, hasHostBitsSet, tryParseAddress, type IpAddress } from '../ipam/cidr.js';

/** A parsed CIDR: canonical network address, prefix length and family. */
export interface ParsedCidr {
  family: 4 | 6;
  /** Canonical address text (IPv6 compressed, lower-case). */
  address: string;
  prefixBits: number;
}

/**
 * Reads an IPv4 or IPv6 address (Go's rules: no leading zeros in IPv4, no zone).
 * @throws TypeError when `text` is neither
 */
export function addressOf(text: string): IpAddress {
  const a = tryParseAddress(text);
  if (a === undefined) throw new TypeError(`not an IP address: ${JSON.stringify(text)}`);
  return a;
}

/**
 * Splits `address[/bits]` as iproute2 writes it: a bare address is a host prefix, `bits` is one
 * to three decimal digits, at most the family's width. A part that is not valid is undefined.
 */
export function splitPrefix(text: string): { readonly address: IpAddress | undefined; readonly bits: number | undefined } {
  const slash = text.indexOf('/');
  const address = tryParseAddress(slash < 0 ? text : text.slice(0, slash));
  if (address === undefined) return { address, bits: undefined };
  const width = addressBits(address.family);
  const bitsText = slash < 0 ? String(width) : text.slice(slash + 1);
  const bits = /^\d{1,3}$/.test(bitsText) && Number(bitsText) <= width ? Number(bitsText) : undefined;
  return { address, bits };
}

/**
 * Canonical text of an IPv4 or IPv6 address (`2001:DB8:0::1` → `2001:db8::1`; IPv4 with leading
 * zeros, which some parsers read as octal, is refused).
 * @throws TypeError when `address` is neither
 */
export function canonicalAddress(address: string): string {
  const a = addressOf(address);
  return formatAddress(a.family, a.value);
}

/** Family of an address string, or undefined when it is not one. */
export function addressFamily(address: string): 4 | 6 | undefined {
  return tryParseAddress(address)?.family;
}

/**
 * Parses `a.b.c.d/n` or `x::/n` (a bare address is a host prefix). The address must be the
 * network address: the kernel refuses host bits in a route destination.
 * @throws TypeError on malformed text, an out-of-range prefix or host bits set
 */
export function parseCidr(cidr: string): ParsedCidr {
  const { address: a, bits: prefixBits } = splitPrefix(cidr);
  if (a === undefined) throw new TypeError(`not a CIDR: ${JSON.stringify(cidr)}`);
  if (prefixBits === undefined) throw new TypeError(`bad prefix length in ${JSON.stringify(cidr)}`);
  if (hasHostBitsSet(a.family, a.value, prefixBits)) throw new TypeError(`${JSON.stringify(cidr)} has host bits set`);
  return { family: a.family, address: formatAddress(a.family, a.value), prefixBits };
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
