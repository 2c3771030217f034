/**
 * The two safety properties of IPAM, as checks that list every violation instead of throwing:
 * no two blocks (or subnets) share an address, and no address is held by two owners. Used by the
 * property tests, the AddressPool webhook and the invariant checker.
 *
 * Pure: no I/O, no state. O(n log n) in the number of items, never in the number of addresses.
 */
import { CidrError, cidrsOverlap, formatCidr, lastAddress, parseCidr, type Cidr } from './cidr.js';
import { formatAddress, parseAddress } from './ip-address.js';

/** A CIDR with a name for reports: an AddressBlock name, or a field path like `spec.subnets[1].ipv4`. */
export interface LabeledCidr {
  readonly label: string;
  /** CIDR text, v4 or v6. */
  readonly cidr: string;
}

/** Two items that share addresses. `a` sorts before `b` (lower base, or same base and wider). */
export interface OverlapViolation {
  readonly kind: 'overlap';
  readonly a: LabeledCidr;
  readonly b: LabeledCidr;
  readonly message: string;
}

/** An item whose CIDR text does not parse. */
export interface UnparsableViolation {
  readonly kind: 'unparsable';
  readonly label: string;
  readonly message: string;
}

/**
 * Finds items that share addresses. Each item is reported at least once if it overlaps anything;
 * for nested CIDRs the pair is (widest earlier item, the item). IPv4 and IPv6 never overlap.
 * Plain strings are labelled by their list index (`#3`).
 */
export function checkNoOverlap(items: readonly (string | LabeledCidr)[]): (OverlapViolation | UnparsableViolation)[] {
  const violations: (OverlapViolation | UnparsableViolation)[] = [];
  const parsed: { item: LabeledCidr; cidr: Cidr }[] = [];
  items.forEach((raw, i) => {
    const item = typeof raw === 'string' ? { label: `#${i}`, cidr: raw } : raw;
    try {
      parsed.push({ item, cidr: parseCidr(item.cidr) });
    } catch (e) {
      if (!(e instanceof CidrError)) throw e;
      violations.push({ kind: 'unparsable', label: item.label, message: `${item.label}: ${e.message}` });
    }
  });
  parsed.sort((x, y) => x.cidr.family - y.cidr.family || cmp(x.cidr.base, y.cidr.base) || x.cidr.prefix - y.cidr.prefix);
  // Sweep: the earlier item reaching furthest is the one any later overlapping item must hit.
  let reach: { item: LabeledCidr; cidr: Cidr } | undefined;
  for (const cur of parsed) {
    if (reach !== undefined && cidrsOverlap(reach.cidr, cur.cidr)) {
      violations.push({
        kind: 'overlap',
        a: reach.item,
        b: cur.item,
        message: `${cur.item.label} (${formatCidr(cur.cidr)}) overlaps ${reach.item.label} (${formatCidr(reach.cidr)})`,
      });
    }
    if (reach === undefined || reach.cidr.family !== cur.cidr.family || lastAddress(cur.cidr) > lastAddress(reach.cidr)) {
      reach = cur;
    }
  }
  return violations;
}

/** An address and who holds it: e.g. `{ owner: '<containerID>:eth0', address: '10.2.0.5' }`. */
export interface AddressHolder {
  readonly owner: string;
  /** Address text, v4 or v6, any valid spelling (compared canonically). */
  readonly address: string;
}

/** One address held by more than one owner. */
export interface DuplicateAddressViolation {
  readonly kind: 'duplicate-address';
  /** Canonical text. */
  readonly address: string;
  /** Every owner holding it, in input order. */
  readonly owners: readonly string[];
  readonly message: string;
}

/**
 * Finds addresses held by two or more owners (`fd00::1` and `fd00:0::1` are the same address).
 * @throws CidrError when an address does not parse (a bug in the caller, not a state to report).
 */
export function checkNoDuplicateAddress(holders: readonly AddressHolder[]): DuplicateAddressViolation[] {
  const owners = new Map<string, string[]>();
  for (const h of holders) {
    const a = parseAddress(h.address);
    const text = formatAddress(a.family, a.value);
    const list = owners.get(text);
    if (list === undefined) owners.set(text, [h.owner]);
    else list.push(h.owner);
  }
  const violations: DuplicateAddressViolation[] = [];
  for (const [address, list] of owners) {
    if (list.length > 1) {
      violations.push({ kind: 'duplicate-address', address, owners: list, message: `${address} is held by ${list.join(', ')}` });
    }
  }
  return violations;
}

function cmp(a: bigint, b: bigint): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
