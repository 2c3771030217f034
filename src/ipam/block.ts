/**
 * Address allocation inside one AddressBlock, as coild does it for pods on its node.
 *
 * Pure: no I/O; the caller passes the time (`nowMs`), so tests need no fake clock.
 * @see docs/compatibility.md#address-allocation-on-the-node,
 *   docs/compatibility.md#freeing-addresses-and-releasing-blocks
 */
import { addressAt, cidrSize, formatAddress, hostBits, offsetOf, parseBlockField, tryParseAddress, type Cidr } from './cidr.js';

/** Default time a freed address stays out of circulation: 30 s, longer than conntrack and ARP/ND settle after a pod dies. */
export const DEFAULT_COOLING_MS = 30_000;

/** Blocks wider than this many host bits are refused: offsets are JS numbers, and 2^32 covers an IPv4 /0. */
const MAX_BLOCK_HOST_BITS = 32;

/** The block's CIDRs (an AddressBlock's `ipv4`/`ipv6`) and the cooling period. */
export interface BlockAllocatorOptions {
  readonly ipv4?: string;
  readonly ipv6?: string;
  /** Milliseconds a freed offset stays unusable. Default {@link DEFAULT_COOLING_MS}; 0 disables cooling. */
  readonly coolingMs?: number;
}

/** One pod interface's addresses: same `offset` in each family, addresses as canonical text without mask. */
export interface AddressAllocation {
  /** `<containerID>:<ifname>`, Coil's key. */
  readonly key: string;
  readonly offset: number;
  readonly ipv4?: string;
  readonly ipv6?: string;
}

/** Outcome of {@link BlockAllocator.register}. */
export type RegisterResult =
  | { readonly kind: 'registered' }
  | { readonly kind: 'already-registered' }
  | { readonly kind: 'offset-taken'; readonly heldBy: string }
  | { readonly kind: 'key-taken'; readonly offset: number }
  | { readonly kind: 'out-of-range' };

/** The options do not describe a usable block. */
export class BlockAllocatorError extends Error {
  override readonly name = 'BlockAllocatorError';
}

/**
 * Hands out the addresses of one block. Every offset is usable, network and last included,
 * because pods get /32 and /128 (Coil does the same). Dual stack uses one offset for both families.
 *
 * - **Next-fit**: the search starts after the last allocated offset and wraps, so a freed
 *   address is not the next one handed out (Coil #234).
 * - **Cooling**: a freed offset is not handed out again until `coolingMs` after it was freed,
 *   even when that means reporting the block full — a reused address that a stale conntrack entry,
 *   route or peer cache still points at misdelivers traffic, which is worse than asking for a block.
 * - **Idempotent**: allocating an existing key returns its addresses (a retried CNI ADD).
 *
 * Memory is O(allocated + cooling) offsets, never O(block size). `nowMs` should not go backwards;
 * if it does, cooling only lasts longer.
 *
 * Concurrency: not locked; the caller (coild's per-pool lock) must not interleave calls with I/O.
 */
export class BlockAllocator {
  /** Number of addresses (offsets 0 … size−1). */
  readonly size: number;
  readonly coolingMs: number;
  private readonly ipv4: Cidr | undefined;
  private readonly ipv6: Cidr | undefined;
  private readonly offsetByKey = new Map<string, number>();
  private readonly keyByOffset = new Map<number, string>();
  /** offset → time (ms) from which it may be handed out again. */
  private readonly coolingUntil = new Map<number, number>();
  private lastOffset = -1;
  private reserved = false;

  /**
   * @throws CidrError when a CIDR does not parse, or is of the other family and not an IPv4 /
   *   IPv4-mapped form of it ({@link parseBlockField}).
   * @throws BlockAllocatorError when no CIDR is given, a family is wrong, dual-stack sizes differ,
   *   the block has more than 2^32 addresses, or `coolingMs` is negative.
   */
  constructor(options: BlockAllocatorOptions) {
    // As Coil's coild reads them: an ipv6 written in IPv4 form is the IPv4-mapped prefix (parseBlockField).
    this.ipv4 = options.ipv4 === undefined ? undefined : parseBlockField(4, options.ipv4);
    this.ipv6 = options.ipv6 === undefined ? undefined : parseBlockField(6, options.ipv6);
    this.coolingMs = options.coolingMs ?? DEFAULT_COOLING_MS;
    const first = this.ipv4 ?? this.ipv6;
    if (first === undefined) throw new BlockAllocatorError('a block needs an ipv4 or an ipv6 CIDR');
    if (this.ipv4?.family === 6 || this.ipv6?.family === 4) throw new BlockAllocatorError('CIDR of the wrong family');
    if (this.ipv4 && this.ipv6 && hostBits(this.ipv4) !== hostBits(this.ipv6)) {
      throw new BlockAllocatorError('dual stack block must be the same size in both families');
    }
    if (hostBits(first) > MAX_BLOCK_HOST_BITS) throw new BlockAllocatorError(`block wider than 2^${MAX_BLOCK_HOST_BITS} addresses`);
    if (!(this.coolingMs >= 0)) throw new BlockAllocatorError(`invalid coolingMs: ${this.coolingMs}`);
    this.size = Number(cidrSize(first));
  }

  /**
   * Gives `key` an address: its existing one, else the next free, non-cooling offset after the
   * last allocation (wrapping).
   * @returns undefined when no offset is free and out of cooling, or the block is reserved.
   */
  allocate(key: string, nowMs: number): AddressAllocation | undefined {
    const existing = this.get(key);
    if (existing !== undefined || this.reserved) return existing;
    this.expireCooling(nowMs);
    if (this.keyByOffset.size + this.coolingUntil.size >= this.size) return undefined;
    for (let step = 1; step <= this.size; step++) {
      const offset = (this.lastOffset + step) % this.size;
      if (this.keyByOffset.has(offset) || this.coolingUntil.has(offset)) continue;
      this.take(key, offset);
      this.lastOffset = offset;
      return this.describe(key, offset);
    }
    return undefined;
  }

  /**
   * Records an allocation that already exists (coild restart: rebuilt from the pod routes).
   * Moves the next-fit cursor to the highest registered offset: cooling state was lost with the
   * old process, and offsets past every live pod are the least likely to have been freed recently.
   */
  register(key: string, offset: number): RegisterResult {
    if (!Number.isInteger(offset) || offset < 0 || offset >= this.size) return { kind: 'out-of-range' };
    const heldBy = this.keyByOffset.get(offset);
    if (heldBy === key) return { kind: 'already-registered' };
    if (heldBy !== undefined) return { kind: 'offset-taken', heldBy };
    const held = this.offsetByKey.get(key);
    if (held !== undefined) return { kind: 'key-taken', offset: held };
    this.take(key, offset);
    this.lastOffset = Math.max(this.lastOffset, offset);
    return { kind: 'registered' };
  }

  /**
   * Releases `key`'s address; it cools for `coolingMs` from `nowMs`.
   * @returns false when `key` holds nothing here (a repeated CNI DEL is not an error).
   */
  free(key: string, nowMs: number): boolean {
    const offset = this.offsetByKey.get(key);
    if (offset === undefined) return false;
    this.offsetByKey.delete(key);
    this.keyByOffset.delete(offset);
    if (this.coolingMs > 0) this.coolingUntil.set(offset, nowMs + this.coolingMs);
    return true;
  }

  /**
   * Marks the block as wholly in use: nothing more is allocated from it and it never reads as
   * empty, so it is never released. For blocks labelled `coil.cybozu.com/reserved` (v1 migration).
   * Existing allocations may still be registered and freed.
   */
  reserveAll(): void {
    this.reserved = true;
  }

  /** True after {@link reserveAll}. */
  get isReserved(): boolean {
    return this.reserved;
  }

  /** `key`'s allocation, if any. */
  get(key: string): AddressAllocation | undefined {
    const offset = this.offsetByKey.get(key);
    return offset === undefined ? undefined : this.describe(key, offset);
  }

  /** Number of keys holding an address. */
  get usedCount(): number {
    return this.offsetByKey.size;
  }

  /** Offsets freed less than `coolingMs` before `nowMs`. */
  coolingCount(nowMs: number): number {
    let n = 0;
    for (const until of this.coolingUntil.values()) if (until > nowMs) n++;
    return n;
  }

  /** Offsets {@link allocate} could hand out at `nowMs`: 0 when reserved. */
  freeCount(nowMs: number): number {
    return this.reserved ? 0 : this.size - this.usedCount - this.coolingCount(nowMs);
  }

  /** True when no key holds an address and the block is not reserved: coild may release it. */
  get isEmpty(): boolean {
    return !this.reserved && this.offsetByKey.size === 0;
  }

  /** All allocations, by ascending offset. */
  allocations(): AddressAllocation[] {
    return [...this.keyByOffset.entries()].sort(([a], [b]) => a - b).map(([offset, key]) => this.describe(key, offset));
  }

  /**
   * The offset of an address of this block (either family), for {@link register} during recovery.
   * @returns undefined when the text is not an address of this block.
   */
  offsetOfAddress(address: string): number | undefined {
    const parsed = tryParseAddress(address);
    const cidr = parsed?.family === 4 ? this.ipv4 : this.ipv6;
    const offset = parsed === undefined || cidr === undefined ? undefined : offsetOf(cidr, parsed);
    return offset === undefined ? undefined : Number(offset);
  }

  private take(key: string, offset: number): void {
    this.offsetByKey.set(key, offset);
    this.keyByOffset.set(offset, key);
    this.coolingUntil.delete(offset);
  }

  private expireCooling(nowMs: number): void {
    for (const [offset, until] of this.coolingUntil) if (until <= nowMs) this.coolingUntil.delete(offset);
  }

  private describe(key: string, offset: number): AddressAllocation {
    const at = (c: Cidr): string => formatAddress(c.family, addressAt(c, BigInt(offset))!);
    return { key, offset, ...(this.ipv4 && { ipv4: at(this.ipv4) }), ...(this.ipv6 && { ipv6: at(this.ipv6) }) };
  }
}
