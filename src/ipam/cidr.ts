/**
 * CIDR arithmetic on BigInt for IPv4 and IPv6: parse, format, contain, overlap, split. The role of
 * containernetworking/plugins `pkg/ip/cidr.go`. Everything is exact for /0 IPv6 too; nothing here
 * allocates per address, so a 2^80-address prefix costs the same as a /32.
 *
 * Pure: no I/O, no state.
 */
import {
  addressBits,
  CidrError,
  formatAddress,
  tryParseAddress,
  type IpAddress,
  type IpFamily,
} from './ip-address.js';

export {
  addressBits,
  addressBytes,
  canonicalAddress,
  CidrError,
  formatAddress,
  maxAddress,
  parseAddress,
  tryParseAddress,
  type IpAddress,
  type IpFamily,
} from './ip-address.js';

/**
 * A prefix: `base` is its first (network) address as an unsigned integer, `prefix` the mask
 * length (0–32 for v4, 0–128 for v6). Values built by this module never have host bits in `base`.
 */
export interface Cidr {
  readonly family: IpFamily;
  readonly base: bigint;
  readonly prefix: number;
}

/** What was written, before masking: see {@link parseCidrWithAddress}. */
export interface ParsedCidr {
  /** The prefix with host bits cleared, as Go's `net.ParseCIDR` returns it. */
  readonly cidr: Cidr;
  /** The address as written, host bits included. */
  readonly address: bigint;
  /** True when `address` has bits set below the mask (`10.0.0.1/24`). */
  readonly hasHostBits: boolean;
}

/**
 * Go's prefix length: one or more ASCII digits, leading zeros allowed (`/0024` is 24). Go's
 * `dtoi` gives up at 0xFFFFFF, far above 128, so any longer number is simply out of range.
 */
const PREFIX_DIGITS = /^[0-9]+$/;

/**
 * Parses `10.0.0.1/24` or `fd00::/48` and keeps the address as written. Accepts exactly what Go's
 * `net.ParseCIDR` accepts (so the webhook rejects what Coil rejects): Go's address rules
 * (ip-address.ts), no zone, and a decimal prefix length that may carry leading zeros
 * (`10.0.0.0/0024` is `10.0.0.0/24`, checked against Go 1.26 in cidr.test.ts). Callers that hand
 * a prefix to the kernel must pass {@link formatCidr}'s canonical text, never the text as
 * written: iproute2 reads `0024` as octal.
 * @throws CidrError `invalid CIDR address: <text>` (Go's message)
 */
export function parseCidrWithAddress(text: string): ParsedCidr {
  const slash = text.indexOf('/');
  const addr = slash < 0 ? undefined : tryParseAddress(text.slice(0, slash));
  const prefixText = slash < 0 ? '' : text.slice(slash + 1);
  const prefix = PREFIX_DIGITS.test(prefixText) ? Number(prefixText) : NaN;
  if (addr === undefined || !(prefix <= addressBits(addr.family))) {
    throw new CidrError(`invalid CIDR address: ${text}`, text);
  }
  const base = networkAddress(addr.family, addr.value, prefix);
  return { cidr: { family: addr.family, base, prefix }, address: addr.value, hasHostBits: base !== addr.value };
}

/**
 * Parses CIDR text into its network prefix; host bits are silently cleared (`10.0.0.1/24` →
 * `10.0.0.0/24`), as Go's `net.ParseCIDR` does and Coil relies on for existing pools.
 * @throws CidrError `invalid CIDR address: <text>`
 */
export function parseCidr(text: string): Cidr {
  return parseCidrWithAddress(text).cidr;
}

/** Like {@link parseCidr} but returns `undefined` instead of throwing. */
export function tryParseCidr(text: string): Cidr | undefined {
  try {
    return parseCidr(text);
  } catch (e) {
    if (e instanceof CidrError) return undefined;
    throw e;
  }
}

/** Canonical text: `10.0.0.0/24`, `fd00::/48` (RFC 5952 address part). */
export function formatCidr(cidr: Cidr): string {
  return `${formatAddress(cidr.family, cidr.base)}/${cidr.prefix}`;
}

/** Number of host bits: 32 − prefix (v4) or 128 − prefix (v6). */
export function hostBits(cidr: Cidr): number {
  return addressBits(cidr.family) - cidr.prefix;
}

/** Number of addresses in the prefix, 2^hostBits (a bigint: a v6 /0 holds 2^128). */
export function cidrSize(cidr: Cidr): bigint {
  return 1n << BigInt(hostBits(cidr));
}

/** Last address of the prefix (the v4 "broadcast" address; usable for pods, which get /32). */
export function lastAddress(cidr: Cidr): bigint {
  return cidr.base + cidrSize(cidr) - 1n;
}

/** Clears the host bits of `value` under a `prefix`-bit mask. */
export function networkAddress(family: IpFamily, value: bigint, prefix: number): bigint {
  const host = BigInt(addressBits(family) - prefix);
  return (value >> host) << host;
}

/** True when `value` has bits set below a `prefix`-bit mask, i.e. it is not a network address. */
export function hasHostBitsSet(family: IpFamily, value: bigint, prefix: number): boolean {
  return networkAddress(family, value, prefix) !== value;
}

/** True when `address` is in `cidr` (false across families). */
export function cidrContainsAddress(cidr: Cidr, address: IpAddress): boolean {
  return address.family === cidr.family && address.value >= cidr.base && address.value <= lastAddress(cidr);
}

/** True when every address of `inner` is in `outer` (false across families). */
export function cidrContains(outer: Cidr, inner: Cidr): boolean {
  return outer.family === inner.family && outer.prefix <= inner.prefix && inner.base >= outer.base && lastAddress(inner) <= lastAddress(outer);
}

/** True when the two prefixes share an address; for CIDRs that means one contains the other. */
export function cidrsOverlap(a: Cidr, b: Cidr): boolean {
  return a.family === b.family && a.base <= lastAddress(b) && b.base <= lastAddress(a);
}

/**
 * The `offset`-th address of `cidr` (offset 0 is the network address).
 * @returns undefined when `offset` is negative or past the last address.
 */
export function addressAt(cidr: Cidr, offset: bigint): bigint | undefined {
  return offset < 0n || offset >= cidrSize(cidr) ? undefined : cidr.base + offset;
}

/** Inverse of {@link addressAt}: `undefined` when `address` is outside `cidr`. */
export function offsetOf(cidr: Cidr, address: IpAddress): bigint | undefined {
  return cidrContainsAddress(cidr, address) ? address.value - cidr.base : undefined;
}

/**
 * Splits `cidr` into sub-prefixes of length `subPrefix` and returns the `index`-th one, counted
 * from the lowest address. No list is built, so `fd00::/48` split into /120s (2^72 of them) is O(1).
 * @returns undefined when `index` is out of range.
 * @throws RangeError when `subPrefix` is shorter than `cidr.prefix` or longer than the family allows.
 */
export function subnetAt(cidr: Cidr, subPrefix: number, index: bigint): Cidr | undefined {
  const count = subnetCount(cidr, subPrefix);
  if (index < 0n || index >= count) return undefined;
  const step = 1n << BigInt(addressBits(cidr.family) - subPrefix);
  return { family: cidr.family, base: cidr.base + index * step, prefix: subPrefix };
}

/**
 * Inverse of {@link subnetAt}: the index of `sub` among the `sub.prefix`-long pieces of `cidr`.
 * `sub.base` must have no host bits (true of every Cidr this module builds).
 * @returns undefined when `sub` is not inside `cidr` or is of the other family.
 */
export function subnetIndexOf(cidr: Cidr, sub: Cidr): bigint | undefined {
  if (!cidrContains(cidr, sub)) return undefined;
  return (sub.base - cidr.base) >> BigInt(addressBits(cidr.family) - sub.prefix);
}

/**
 * How many `subPrefix`-long pieces `cidr` splits into: 2^(subPrefix − prefix).
 * @throws RangeError when `subPrefix` is shorter than `cidr.prefix` or longer than the family allows.
 */
export function subnetCount(cidr: Cidr, subPrefix: number): bigint {
  if (!Number.isInteger(subPrefix) || subPrefix < cidr.prefix || subPrefix > addressBits(cidr.family)) {
    throw new RangeError(`cannot split ${formatCidr(cidr)} into /${subPrefix} pieces`);
  }
  return 1n << BigInt(subPrefix - cidr.prefix);
}

/** `::ffff:0:0/96`, the IPv4-mapped IPv6 range (RFC 4291 §2.5.5.2). */
const V4_MAPPED_BASE = 0xffffn << 32n;

/**
 * Reads an AddressBlock's `ipv4` or `ipv6` field as Coil's coild does: Go's `net.ParseCIDR`, whose
 * addresses are 16 bytes for either family, so an IPv4 prefix is also the IPv4-mapped IPv6 prefix
 * (`To16`) and a mapped prefix is also the IPv4 one (`To4`). Coil's controller writes the blocks
 * of an IPv4-mapped pool range in IPv4 form — a pool ipv6 `::ffff:10.9.0.0/120` gives blocks with
 * ipv6 `10.9.0.0/29`, as Go prints a mapped address as IPv4 — and Coil's coild reads them back as
 * the same 8 addresses. So in the `ipv6` field an IPv4 prefix `a.b.c.d/n` is `::ffff:a.b.c.d/(96+n)`,
 * and in the `ipv4` field a mapped prefix `::ffff:a.b.c.d/(96+n)` is `a.b.c.d/n`
 * (docs/compatibility.md#addressblock-resource).
 * @returns the prefix in `family`
 * @throws CidrError when the text does not parse, or is of the other family and not convertible
 *   (`invalid CIDR address: <text>` or `<text> is not an IPv<family> prefix`)
 */
export function parseBlockField(family: IpFamily, text: string): Cidr {
  const c = parseCidr(text);
  if (c.family === family) return c;
  if (family === 6) return { family: 6, base: V4_MAPPED_BASE | c.base, prefix: c.prefix + 96 };
  if (c.prefix >= 96 && c.base >> 32n === 0xffffn) return { family: 4, base: c.base & 0xffffffffn, prefix: c.prefix - 96 };
  throw new CidrError(`${text} is not an IPv${family} prefix`, text);
}
