/**
 * Validation of AddressPool specs for the admission webhook: Coil's rules with Coil's messages,
 * plus the rules Coil misses (docs/compatibility.md#pool-validation-gaps).
 *
 * Pure: returns FieldError lists; the webhook turns them into a 422 Invalid.
 * @see docs/compatibility.md#addresspool-webhooks
 */
import { hostBits, parseCidrWithAddress, cidrsOverlap, formatCidr, CidrError, type ParsedCidr } from '../../ipam/cidr.js';
import { checkNoOverlap } from '../../ipam/invariants.js';
import { fieldError, type FieldError } from './field-error.js';
import { DEFAULT_BLOCK_SIZE_BITS, MAX_BLOCK_SIZE_BITS } from './keys.js';

/** One `spec.subnets[]` item as received: CIDR text; `null` is treated as absent. */
export interface SubnetSetInput {
  readonly ipv4?: string | null;
  readonly ipv6?: string | null;
}

/** An AddressPool spec as received; `blockSizeBits` absent means {@link DEFAULT_BLOCK_SIZE_BITS} (the CRD default). */
export interface AddressPoolSpecInput {
  readonly blockSizeBits?: number;
  readonly subnets?: readonly SubnetSetInput[];
}

type Family = 'ipv4' | 'ipv6';
const FAMILIES: readonly Family[] = ['ipv4', 'ipv6'];
const SUBNETS = 'spec.subnets';

/**
 * Validates a spec on CREATE. Per item, Coil's first failing rule, as `Invalid` at
 * `spec.subnets[i]` with value `""` and Coil's text: `invalid subnet`, Go's `invalid CIDR address:
 * <s>`, `invalid IPv4 subnet: <s>` / `invalid IPv6 subnet: <s>` (also what a CIDR of the other
 * family in a field gets), `too narrow subnet: <s>`, `dual stack subnet must be the same size`.
 * Then ours: `spec.blockSizeBits` within 0…{@link MAX_BLOCK_SIZE_BITS}; no host bits set
 * (`spec.subnets[i].ipv4`); every item with the families of the first; no two items overlapping.
 * Cross-pool overlap needs the other pools: see {@link findPoolOverlaps}.
 * @see docs/compatibility.md#addresspool-webhooks, docs/compatibility.md#pool-validation-gaps
 */
export function validateAddressPoolSpec(spec: AddressPoolSpecInput): FieldError[] {
  const bits = spec.blockSizeBits ?? DEFAULT_BLOCK_SIZE_BITS;
  const subnets = spec.subnets ?? [];
  const errors: FieldError[] = [];
  if (!Number.isInteger(bits) || bits < 0 || bits > MAX_BLOCK_SIZE_BITS) {
    errors.push(fieldError('spec.blockSizeBits', `must be an integer between 0 and ${MAX_BLOCK_SIZE_BITS}, inclusive`, 'Invalid', bits));
  }
  if (subnets.length === 0) errors.push(fieldError(SUBNETS, 'must have at least 1 item', 'Required'));
  return [...errors, ...validateItems(subnets, bits, 0)];
}

/**
 * Validates an UPDATE, as Coil does: `spec.blockSizeBits` `Forbidden: unchangeable`; fewer items
 * `Forbidden` at `spec.subnets`: `unshrinkable`; a changed existing item (exact text comparison)
 * `Forbidden` at `spec.subnets[i]`: `unchangeable`; appended items are checked as on CREATE, our
 * rules included (an appended item may not overlap any item). Existing items are not re-checked
 * against our rules, so pools Coil accepted can still grow.
 * @see docs/compatibility.md#addresspool-webhooks
 */
export function validateAddressPoolUpdate(oldSpec: AddressPoolSpecInput, newSpec: AddressPoolSpecInput): FieldError[] {
  const errors: FieldError[] = [];
  const bits = newSpec.blockSizeBits ?? DEFAULT_BLOCK_SIZE_BITS;
  if (bits !== (oldSpec.blockSizeBits ?? DEFAULT_BLOCK_SIZE_BITS)) {
    errors.push(fieldError('spec.blockSizeBits', 'unchangeable', 'Forbidden'));
  }
  const oldSubnets = oldSpec.subnets ?? [];
  const newSubnets = newSpec.subnets ?? [];
  if (oldSubnets.length > newSubnets.length) {
    errors.push(fieldError(SUBNETS, 'unshrinkable', 'Forbidden'));
    return errors;
  }
  oldSubnets.forEach((old, i) => {
    const cur = newSubnets[i]!;
    if (text(old.ipv4) !== text(cur.ipv4) || text(old.ipv6) !== text(cur.ipv6)) {
      errors.push(fieldError(`${SUBNETS}[${i}]`, 'unchangeable', 'Forbidden'));
    }
  });
  return [...errors, ...validateItems(newSubnets, bits, oldSubnets.length)];
}

/** Another AddressPool, for {@link findPoolOverlaps}. */
export interface NamedPoolSpec {
  readonly name: string;
  readonly spec: AddressPoolSpecInput;
}

/**
 * Cross-pool rule (ours): items `fromIndex…` of pool `name` must not share an address with any
 * subnet of the `others` (a pool named `name` among them is skipped, so the cached old version of
 * the pool being updated does not count). Unparsable CIDRs are skipped; the per-pool checks report them.
 * On UPDATE pass `fromIndex` = old item count, so overlaps Coil let through don't block growth.
 * @returns `Invalid` at `spec.subnets[i].ipv4|ipv6`, naming the other pool and its subnet, once per field and pool.
 */
export function findPoolOverlaps(name: string, spec: AddressPoolSpecInput, others: readonly NamedPoolSpec[], fromIndex = 0): FieldError[] {
  const errors: FieldError[] = [];
  (spec.subnets ?? []).forEach((item, i) => {
    if (i < fromIndex) return;
    for (const family of FAMILIES) {
      const mine = tryParse(item[family]);
      if (mine === undefined) continue;
      for (const other of others) {
        if (other.name === name) continue;
        const hit = (other.spec.subnets ?? []).findIndex((o) => {
          const theirs = tryParse(o[family]);
          return theirs !== undefined && cidrsOverlap(mine.cidr, theirs.cidr);
        });
        if (hit < 0) continue;
        const theirs = other.spec.subnets![hit]![family]!;
        errors.push(
          fieldError(`${SUBNETS}[${i}].${family}`, `overlaps ${theirs} of AddressPool "${other.name}" (${SUBNETS}[${hit}].${family})`, 'Invalid', item[family]),
        );
      }
    }
  });
  return errors;
}

/** Validates items `from…` against Coil's rules and ours; earlier items only serve as reference. */
function validateItems(subnets: readonly SubnetSetInput[], bits: number, from: number): FieldError[] {
  const errors: FieldError[] = [];
  const refIndex = subnets.findIndex((s) => text(s.ipv4) !== undefined || text(s.ipv6) !== undefined);
  const ref = refIndex < 0 ? undefined : familiesOf(subnets[refIndex]!);
  for (let i = from; i < subnets.length; i++) {
    const item = subnets[i]!;
    const path = `${SUBNETS}[${i}]`;
    const coil = coilValidate(item, bits);
    if (coil !== undefined) {
      errors.push(fieldError(path, coil, 'Invalid', ''));
      continue;
    }
    for (const family of FAMILIES) {
      const parsed = tryParse(item[family]);
      if (parsed?.hasHostBits) {
        errors.push(fieldError(`${path}.${family}`, `host bits are set; did you mean ${formatCidr(parsed.cidr)}`, 'Invalid', item[family]));
      }
    }
    if (ref !== undefined && familiesOf(item) !== ref) {
      errors.push(
        fieldError(path, `must have the same address families as ${SUBNETS}[${refIndex}] (${ref}), not ${familiesOf(item)}`, 'Invalid', item),
      );
    }
  }
  const wellFormed = subnets.map((item) => coilValidate(item, bits) === undefined);
  return [...errors, ...overlapsWithin(subnets, from, wellFormed)];
}

/** Coil's `SubnetSet.Validate`: the first failure's message, or undefined. Order matters: Coil stops at the first. */
function coilValidate(item: SubnetSetInput, bits: number): string | undefined {
  const v4 = text(item.ipv4);
  const v6 = text(item.ipv6);
  if (v4 === undefined && v6 === undefined) return 'invalid subnet';
  const widths: number[] = [];
  for (const [family, value] of [['ipv4', v4], ['ipv6', v6]] as const) {
    if (value === undefined) continue;
    let parsed: ParsedCidr;
    try {
      parsed = parseCidrWithAddress(value);
    } catch (e) {
      if (e instanceof CidrError) return e.message;
      throw e;
    }
    if (parsed.cidr.family !== (family === 'ipv4' ? 4 : 6)) return `invalid ${family === 'ipv4' ? 'IPv4' : 'IPv6'} subnet: ${value}`;
    if (hostBits(parsed.cidr) < bits) return `too narrow subnet: ${value}`;
    widths.push(hostBits(parsed.cidr));
  }
  if (widths.length === 2 && widths[0] !== widths[1]) return 'dual stack subnet must be the same size';
  return undefined;
}

/**
 * Overlaps between well-formed items where at least one is at index ≥ `from`, reported on the later
 * item's field. Malformed items are left out: their Coil error says enough.
 */
function overlapsWithin(subnets: readonly SubnetSetInput[], from: number, wellFormed: readonly boolean[]): FieldError[] {
  const labeled = subnets.flatMap((item, i) =>
    FAMILIES.flatMap((family) =>
      wellFormed[i] && item[family] != null ? [{ label: `${SUBNETS}[${i}].${family}`, cidr: item[family], index: i }] : [],
    ),
  );
  const indexOf = new Map(labeled.map((l) => [l.label, l.index]));
  const errors: FieldError[] = [];
  const seen = new Set<string>();
  for (const v of checkNoOverlap(labeled)) {
    if (v.kind !== 'overlap') continue;
    const [first, later] = indexOf.get(v.a.label)! <= indexOf.get(v.b.label)! ? [v.a, v.b] : [v.b, v.a];
    if (indexOf.get(later.label)! < from || seen.has(later.label)) continue;
    seen.add(later.label);
    errors.push(fieldError(later.label, `overlaps ${first.label} (${first.cidr})`, 'Invalid', later.cidr));
  }
  return errors;
}

/** Field text or undefined; `null` (JSON) counts as absent, `""` does not (Go would try to parse it). */
function text(value: string | null | undefined): string | undefined {
  return value ?? undefined;
}

function familiesOf(item: SubnetSetInput): string {
  return FAMILIES.filter((f) => text(item[f]) !== undefined).join(' and ') || 'none';
}

function tryParse(value: string | null | undefined): ParsedCidr | undefined {
  if (value == null) return undefined;
  try {
    return parseCidrWithAddress(value);
  } catch {
    return undefined;
  }
}
