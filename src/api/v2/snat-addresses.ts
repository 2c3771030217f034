/**
 * The rule of an Egress's shared SNAT addresses, `spec.snatAddresses` and coil-egress's
 * `--snat-addresses`: each a plain unicast IP address, at most one per family. One rule for the
 * webhook and for coil-egress, so that the flag refuses what the webhook refuses.
 *
 * The address rule is Kubernetes' for IP fields (apimachinery `IsValidIP`: no IPv4-mapped IPv6
 * address, no zone, and canonical text for new API fields) plus the special ranges Kubernetes
 * refuses in Endpoints (`ValidateNonSpecialIP`), with multicast and the IPv4 broadcast address
 * added: a NAT pod cannot send from any of those.
 *
 * Pure: no I/O.
 * @see docs/egress-failover.md#sessions-kept-the-shared-snat-address
 */
import { cidrContainsAddress, formatAddress, parseCidr, tryParseAddress, tryParseCidr, type Cidr, type IpFamily } from '../../ipam/cidr.js';

/** Ranges a SNAT source may not be in, with the sentence that refuses them. */
const SPECIAL_RANGES: ReadonlyArray<readonly [Cidr, string]> = [
  [parseCidr('0.0.0.0/32'), 'may not be unspecified (0.0.0.0)'],
  [parseCidr('::/128'), 'may not be unspecified (::)'],
  [parseCidr('127.0.0.0/8'), 'may not be in the loopback range (127.0.0.0/8, ::1/128)'],
  [parseCidr('::1/128'), 'may not be in the loopback range (127.0.0.0/8, ::1/128)'],
  [parseCidr('169.254.0.0/16'), 'may not be in the link-local range (169.254.0.0/16, fe80::/10)'],
  [parseCidr('fe80::/10'), 'may not be in the link-local range (169.254.0.0/16, fe80::/10)'],
  [parseCidr('224.0.0.0/4'), 'may not be in the multicast range (224.0.0.0/4, ff00::/8)'],
  [parseCidr('ff00::/8'), 'may not be in the multicast range (224.0.0.0/4, ff00::/8)'],
  [parseCidr('255.255.255.255/32'), 'may not be the IPv4 broadcast address (255.255.255.255)'],
];

/** IPv4-mapped IPv6 addresses, `::ffff:0:0/96`. */
const IPV4_MAPPED = parseCidr('::ffff:0.0.0.0/96');

/** One refused item of a list. */
export interface SnatAddressProblem {
  /** Index of the item in the list. */
  readonly index: number;
  /** The item as written. */
  readonly value: string;
  /** Why, a sentence without the item's name (Kubernetes' `field.Error` detail). */
  readonly message: string;
}

/**
 * What is wrong with one address, or undefined when it is a plain unicast IP address; canonical
 * text is not required here (see {@link snatAddressesProblems}).
 */
export function snatAddressProblem(text: string): string | undefined {
  const a = tryParseAddress(text);
  if (a === undefined) {
    if (text.includes('/') && tryParseCidr(text) !== undefined) return 'must be an IP address, not a CIDR';
    if (text.includes('%')) return 'must not include an IPv6 zone';
    return 'must be a valid IP address (e.g. 10.9.8.7 or 2001:db8::ffff)';
  }
  if (cidrContainsAddress(IPV4_MAPPED, a)) return 'must not be an IPv4-mapped IPv6 address';
  return SPECIAL_RANGES.find(([range]) => cidrContainsAddress(range, a))?.[1];
}

/**
 * Every problem of a list of shared SNAT addresses: each item's ({@link snatAddressProblem}),
 * text that is not canonical when `canonical` is asked for (`must be in canonical form
 * ("2001:db8::1")`, Kubernetes' message), and from the second item of a family on, `duplicate of
 * <first>` or `at most one address per family (<first> is IPv6)`.
 * @param name how a message names another item, by index (`spec.snatAddresses[0]`)
 * @returns the problems in list order, empty when the list is good
 */
export function snatAddressesProblems(texts: readonly string[], o: { canonical: boolean; name: (index: number) => string }): SnatAddressProblem[] {
  const problems: SnatAddressProblem[] = [];
  const firstOfFamily = new Map<IpFamily, { index: number; canonical: string }>();
  texts.forEach((value, index) => {
    const message = snatAddressProblem(value);
    if (message !== undefined) {
      problems.push({ index, value, message });
      return;
    }
    const a = tryParseAddress(value)!;
    const canonical = formatAddress(a.family, a.value);
    if (o.canonical && value !== canonical) problems.push({ index, value, message: `must be in canonical form (${JSON.stringify(canonical)})` });
    const first = firstOfFamily.get(a.family);
    if (first === undefined) firstOfFamily.set(a.family, { index, canonical });
    else if (first.canonical === canonical) problems.push({ index, value, message: `duplicate of ${o.name(first.index)}` });
    else problems.push({ index, value, message: `at most one address per family (${o.name(first.index)} is IPv${a.family})` });
  });
  return problems;
}

/**
 * The addresses in canonical text (`fd00:0::01` → `fd00::1`); an item that is no address is
 * kept as written, for its reader to refuse.
 */
export function canonicalSnatAddresses(texts: readonly string[]): string[] {
  return texts.map((t) => {
    const a = tryParseAddress(t);
    return a === undefined ? t : formatAddress(a.family, a.value);
  });
}
