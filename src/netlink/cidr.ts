/**
 * Address and CIDR strings in the form iproute2 prints them, so kernel state read back with
 * `ip -json` can be compared with what coil asked for. iproute2 prints a host route's `dst`
 * without its prefix (`10.0.0.5`, not `10.0.0.5/32`) and IPv6 in RFC 5952 form.
 *
 * A view of the one address and prefix model, src/ipam/ip-address.ts and src/ipam/cidr.ts (Go's
 * rules, RFC 5952 output, canonical text): nothing here parses an address or defines a prefix
 * itself. Failures are TypeErrors, as the kernel-facing callers expect.
 */
import { addressBits, formatAddress, formatCidr, hasHostBitsSet, tryParseAddress, type Cidr, type IpAddress } from '../ipam/cidr.js';

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

/** Family of an address string, or undefined when it is not one. */
export function addressFamily(address: string): 4 | 6 | undefined {
  return tryParseAddress(address)?.family;
}

/**
 * Reads a route destination as iproute2 writes it, `a.b.c.d/n` or `x::/n` (a bare address is a host
 * prefix), into the one prefix type, src/ipam/cidr.ts's {@link Cidr}; its canonical text is that
 * module's `formatCidr`. The address must be the network address: the kernel refuses host bits in
 * a route destination.
 * @throws TypeError on malformed text, an out-of-range prefix or host bits set
 */
export function parseRoutePrefix(text: string): Cidr {
  const { address: a, bits } = splitPrefix(text);
  if (a === undefined) throw new TypeError(`not a CIDR: ${JSON.stringify(text)}`);
  if (bits === undefined) throw new TypeError(`bad prefix length in ${JSON.stringify(text)}`);
  if (hasHostBitsSet(a.family, a.value, bits)) throw new TypeError(`${JSON.stringify(text)} has host bits set`);
  return { family: a.family, base: a.value, prefix: bits };
}

/**
 * The key iproute2 uses for a route destination: `10.0.0.0/24`, `10.0.0.5` for a /32,
 * `2001:db8::5` for a /128, `default` for a zero-length prefix.
 */
export function routeKey(c: Cidr): string {
  if (c.prefix === 0) return 'default';
  return c.prefix === addressBits(c.family) ? formatAddress(c.family, c.base) : formatCidr(c);
}

/** Normalises a `dst` printed by `ip -json route` to the {@link routeKey} form. */
export function routeKeyOfDst(dst: string): string {
  return dst === 'default' ? 'default' : routeKey(parseRoutePrefix(dst));
}
