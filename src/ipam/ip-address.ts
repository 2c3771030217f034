/**
 * IP address text ↔ BigInt, with Go's parsing rules and RFC 5952 output, so that strings we write
 * into AddressBlocks and routes are byte-for-byte what Coil (Go `net`/`netip`) writes.
 *
 * Pure: no I/O, no state.
 */

/** Address family: 4 (32-bit addresses) or 6 (128-bit addresses). */
export type IpFamily = 4 | 6;

/** An address as a number: `value` is the address read as an unsigned big-endian integer. */
export interface IpAddress {
  readonly family: IpFamily;
  readonly value: bigint;
}

/**
 * Bad address or CIDR text. `input` is the text as given.
 * The message follows Go's wording (`invalid CIDR address: <s>`) because Coil's webhook shows Go's
 * parse error verbatim and users' scripts match on it.
 */
export class CidrError extends Error {
  override readonly name = 'CidrError';
  constructor(
    message: string,
    readonly input: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/** Width of an address of `family` in bits: 32 or 128. */
export function addressBits(family: IpFamily): 32 | 128 {
  return family === 4 ? 32 : 128;
}

/** Largest address of `family` (all ones). */
export function maxAddress(family: IpFamily): bigint {
  return (1n << BigInt(addressBits(family))) - 1n;
}

const DECIMAL_OCTET = /^(0|[1-9][0-9]{0,2})$/;
const HEX_GROUP = /^[0-9a-fA-F]{1,4}$/;

/** Go's netip rule: four decimal octets, no leading zeros (which other parsers read as octal). */
function parseIPv4(text: string): bigint | undefined {
  const parts = text.split('.');
  if (parts.length !== 4) return undefined;
  let value = 0n;
  for (const part of parts) {
    if (!DECIMAL_OCTET.test(part)) return undefined;
    const octet = Number(part);
    if (octet > 255) return undefined;
    value = (value << 8n) | BigInt(octet);
  }
  return value;
}

/** Go's netip rule: `::` at most once and standing for at least one group; IPv4 tail allowed; no zone. */
function parseIPv6(text: string): bigint | undefined {
  const ellipsis = text.indexOf('::');
  if (ellipsis >= 0 && text.indexOf('::', ellipsis + 1) >= 0) return undefined;
  const split = (s: string): string[] => (s === '' ? [] : s.split(':'));
  const head = ellipsis >= 0 ? split(text.slice(0, ellipsis)) : split(text);
  const tail = ellipsis >= 0 ? split(text.slice(ellipsis + 2)) : [];
  const groups: [number[], number[]] = [[], []];
  const parts = [head, tail];
  for (let side = 0; side < 2; side++) {
    const list = parts[side]!;
    for (let i = 0; i < list.length; i++) {
      const part = list[i]!;
      const isLast = side === (ellipsis >= 0 ? 1 : 0) && i === list.length - 1;
      if (part.includes('.')) {
        const v4 = isLast ? parseIPv4(part) : undefined;
        if (v4 === undefined) return undefined;
        groups[side as 0 | 1].push(Number(v4 >> 16n), Number(v4 & 0xffffn));
      } else if (HEX_GROUP.test(part)) {
        groups[side as 0 | 1].push(parseInt(part, 16));
      } else {
        return undefined;
      }
    }
  }
  const [before, after] = groups;
  const count = before.length + after.length;
  if (ellipsis < 0 ? count !== 8 : count > 7) return undefined;
  const all = [...before, ...new Array<number>(8 - count).fill(0), ...after];
  return all.reduce((acc, g) => (acc << 16n) | BigInt(g), 0n);
}

/** Parses address text without throwing; `undefined` when it is not an address. */
export function tryParseAddress(text: string): IpAddress | undefined {
  // Like netip.ParseAddr, the first separator seen decides the family.
  for (const ch of text) {
    if (ch === '.') {
      const value = parseIPv4(text);
      return value === undefined ? undefined : { family: 4, value };
    }
    if (ch === ':') {
      const value = parseIPv6(text);
      return value === undefined ? undefined : { family: 6, value };
    }
  }
  return undefined;
}

/**
 * Parses `10.1.2.3` or `fd00::1` (also `::ffff:10.1.2.3`, which is family 6 as in Go's netip).
 * Zones (`fe80::1%eth0`) are rejected: pod addresses never carry one.
 * @throws CidrError `invalid IP address: <text>`
 */
export function parseAddress(text: string): IpAddress {
  const parsed = tryParseAddress(text);
  if (parsed === undefined) throw new CidrError(`invalid IP address: ${text}`, text);
  return parsed;
}

/**
 * Formats an address canonically: dotted decimal for v4; for v6 RFC 5952 (lower case, no leading
 * zeros, the longest run of two or more zero groups — the first on a tie — shortened to `::`),
 * and `::ffff:a.b.c.d` for IPv4-mapped addresses, as Go's `netip.Addr.String` prints them.
 * @throws RangeError when `value` does not fit the family.
 */
export function formatAddress(family: IpFamily, value: bigint): string {
  if (value < 0n || value > maxAddress(family)) {
    throw new RangeError(`address value ${value} out of range for IPv${family}`);
  }
  if (family === 4) {
    return [24n, 16n, 8n, 0n].map((s) => String((value >> s) & 0xffn)).join('.');
  }
  if (value >> 32n === 0xffffn) return `::ffff:${formatAddress(4, value & 0xffffffffn)}`;
  const groups: number[] = [];
  for (let s = 112n; s >= 0n; s -= 16n) groups.push(Number((value >> s) & 0xffffn));
  let bestStart = -1;
  let bestLen = 1; // RFC 5952 §4.2.2: a single zero group is not shortened.
  for (let i = 0; i < 8; ) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLen) {
      bestStart = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = (gs: number[]): string => gs.map((g) => g.toString(16)).join(':');
  if (bestStart < 0) return hex(groups);
  return `${hex(groups.slice(0, bestStart))}::${hex(groups.slice(bestStart + bestLen))}`;
}

/** The address in network byte order: 4 bytes for IPv4, 16 for IPv6 (as netlink and hashes take it). */
export function addressBytes(a: IpAddress): Uint8Array {
  const out = new Uint8Array(addressBits(a.family) / 8);
  let v = a.value;
  for (let i = out.length - 1; i >= 0; i--) {
    out[i] = Number(v & 0xffn);
    v >>= 8n;
  }
  return out;
}

/** Canonical text of an address given as text (`fd00:0::01` → `fd00::1`). @throws CidrError */
export function canonicalAddress(text: string): string {
  const a = parseAddress(text);
  return formatAddress(a.family, a.value);
}

/** Canonical text of an address given as text, or undefined when it is not one. */
export function tryCanonicalAddress(text: string): string | undefined {
  const a = tryParseAddress(text);
  return a === undefined ? undefined : formatAddress(a.family, a.value);
}

/**
 * Canonical text of `text` when it is an address, else `text` as given (undefined stays
 * undefined): for comparing and showing addresses others wrote, where a bad one is kept as it is.
 */
export function canonicalAddressOrText<T extends string | undefined>(text: T): T {
  return (text === undefined ? undefined : (tryCanonicalAddress(text) ?? text)) as T;
}
