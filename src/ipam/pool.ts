/**
 * An AddressPool carved into blocks: block index ↔ CIDRs, and the choice of the next block.
 * Nothing here is proportional to the pool's size — only to its number of subnets and to the
 * number of blocks handed out — so a `fd00::/48` pool of /120 blocks (2^72 of them) is as cheap as
 * a /24 (Coil's bitset over every block could not hold it;
 * docs/compatibility.md#pool-validation-gaps).
 *
 * Pure: no I/O, no clock.
 * @see docs/compatibility.md#addresspool-resource, docs/compatibility.md#addressblock-resource,
 *   docs/compatibility.md#block-allocation-in-the-controller
 */
import {
  addressBits,
  cidrContains,
  cidrContainsAddress,
  CidrError,
  formatCidr,
  hostBits,
  parseCidr,
  parseCidrWithAddress,
  subnetAt,
  subnetIndexOf,
  tryParseAddress,
  type Cidr,
} from './cidr.js';

/**
 * One `spec.subnets[]` item of an AddressPool: CIDR strings; IPv4-only, IPv6-only or dual stack
 * (both with the same number of host bits).
 */
export interface SubnetSet {
  /** IPv4 CIDR, e.g. `10.2.0.0/16`. */
  readonly ipv4?: string;
  /** IPv6 CIDR, e.g. `fd02::/112`. */
  readonly ipv6?: string;
}

/** The part of an AddressPool spec that shapes its blocks. `blockSizeBits`: a block holds 2^n addresses. */
export interface PoolSpec {
  readonly blockSizeBits: number;
  readonly subnets: readonly SubnetSet[];
}

/** One block: its index in the pool and its CIDR strings (canonical text), as an AddressBlock holds them. */
export interface BlockCidrs {
  readonly index: bigint;
  readonly ipv4?: string;
  readonly ipv6?: string;
}

/** A spec the layout cannot be built from (the webhook should have rejected it). */
export class PoolLayoutError extends Error {
  override readonly name = 'PoolLayoutError';
}

/** One subnet item placed in the pool's index space: blocks `[firstIndex, firstIndex + blockCount)`. */
export interface SubnetLayout {
  readonly ipv4?: Cidr;
  readonly ipv6?: Cidr;
  readonly firstIndex: bigint;
  readonly blockCount: bigint;
}

/**
 * A pool's block geometry. Subnets are numbered in spec order; a dual-stack item's IPv4 and IPv6
 * blocks share one index (same offset in both families). Immutable; rebuild it when the spec grows.
 */
export class PoolLayout {
  /** Total number of blocks, the `coil_controller_max_blocks` value. */
  readonly totalBlocks: bigint;

  private constructor(
    readonly blockSizeBits: number,
    readonly subnets: readonly SubnetLayout[],
  ) {
    this.totalBlocks = subnets.reduce((sum, s) => sum + s.blockCount, 0n);
  }

  /**
   * Builds the layout of `spec`. Host bits in a CIDR are cleared, as Go's ParseCIDR does, so
   * pools Coil accepted keep their geometry. Block count of an item = 2^(hostBits − blockSizeBits),
   * from the ipv4 CIDR if present, else the ipv6 one (Coil's rule).
   * @throws PoolLayoutError when an item has no CIDR, a CIDR does not parse (cause: CidrError) or
   *   is of the wrong family, is narrower than a block, or dual-stack widths differ.
   */
  static fromSpec(spec: PoolSpec): PoolLayout {
    const bits = spec.blockSizeBits;
    if (!Number.isInteger(bits) || bits < 0 || bits > 128) throw new PoolLayoutError(`invalid blockSizeBits: ${bits}`);
    let next = 0n;
    const subnets = spec.subnets.map((item, i): SubnetLayout => {
      const ipv4 = item.ipv4 === undefined ? undefined : parseItem(item.ipv4, 4, bits, i);
      const ipv6 = item.ipv6 === undefined ? undefined : parseItem(item.ipv6, 6, bits, i);
      const first = ipv4 ?? ipv6;
      if (first === undefined) throw new PoolLayoutError(`subnets[${i}]: invalid subnet`);
      if (ipv4 && ipv6 && hostBits(ipv4) !== hostBits(ipv6)) {
        throw new PoolLayoutError(`subnets[${i}]: dual stack subnet must be the same size`);
      }
      const blockCount = 1n << BigInt(hostBits(first) - bits);
      const layout = { ...(ipv4 && { ipv4 }), ...(ipv6 && { ipv6 }), firstIndex: next, blockCount };
      next += blockCount;
      return layout;
    });
    return new PoolLayout(bits, subnets);
  }

  /**
   * The CIDRs of block `index`: subnet base + local index × 2^blockSizeBits, masks
   * /(32 − blockSizeBits) and /(128 − blockSizeBits). O(number of subnets).
   * @returns undefined when `index` is negative or ≥ {@link totalBlocks}.
   */
  blockAt(index: bigint): BlockCidrs | undefined {
    const subnet = this.subnets.find((s) => index >= s.firstIndex && index < s.firstIndex + s.blockCount);
    if (subnet === undefined) return undefined;
    const local = index - subnet.firstIndex;
    const carve = (c: Cidr): string => formatCidr(subnetAt(c, addressBits(c.family) - this.blockSizeBits, local)!);
    return {
      index,
      ...(subnet.ipv4 && { ipv4: carve(subnet.ipv4) }),
      ...(subnet.ipv6 && { ipv6: carve(subnet.ipv6) }),
    };
  }

  /**
   * The index of the block holding `address` (either family; an IPv4-mapped IPv6 address is also
   * looked up in an IPv4-mapped ipv6 subnet as written). O(number of subnets).
   * @returns undefined when no subnet of the pool holds it, or the text is no address
   */
  indexOfAddress(address: string): bigint | undefined {
    const a = tryParseAddress(address);
    if (a === undefined) return undefined;
    for (const s of this.subnets) {
      const c = a.family === 4 ? s.ipv4 : s.ipv6;
      if (c === undefined || !cidrContainsAddress(c, a)) continue;
      return s.firstIndex + ((a.value - c.base) >> BigInt(this.blockSizeBits));
    }
    return undefined;
  }

  /**
   * Inverse of {@link blockAt}, used to check AddressBlocks read back from the API server.
   * @returns the index, or undefined when the CIDRs are not exactly one block of this pool (wrong
   *   size, host bits set, outside every subnet, missing or extra family, or v4/v6 at different indices).
   * @throws CidrError when a CIDR string does not parse.
   */
  indexOfBlock(cidrs: { readonly ipv4?: string; readonly ipv6?: string }): bigint | undefined {
    const v4 = cidrs.ipv4 === undefined ? undefined : parseCidrWithAddress(cidrs.ipv4);
    const v6 = cidrs.ipv6 === undefined ? undefined : parseCidrWithAddress(cidrs.ipv6);
    if (v4?.hasHostBits || v6?.hasHostBits) return undefined;
    for (const s of this.subnets) {
      const i4 = localIndex(s.ipv4, v4?.cidr, this.blockSizeBits);
      const i6 = localIndex(s.ipv6, v6?.cidr, this.blockSizeBits);
      if (i4 === null || i6 === null) continue;
      const local = i4 ?? i6;
      if (local === undefined || (i4 !== undefined && i6 !== undefined && i4 !== i6)) continue;
      return s.firstIndex + local;
    }
    return undefined;
  }
}

/** Local block index of `block` in `subnet`; undefined when both are absent, null on mismatch. */
function localIndex(subnet: Cidr | undefined, block: Cidr | undefined, bits: number): bigint | undefined | null {
  if (subnet === undefined || block === undefined) return subnet === block ? undefined : null;
  if (hostBits(block) !== bits || !cidrContains(subnet, block)) return null;
  return subnetIndexOf(subnet, block)!;
}

function parseItem(text: string, family: 4 | 6, bits: number, i: number): Cidr {
  let cidr: Cidr;
  try {
    cidr = parseCidr(text);
  } catch (e) {
    if (e instanceof CidrError) throw new PoolLayoutError(`subnets[${i}]: ${e.message}`, { cause: e });
    throw e;
  }
  if (cidr.family !== family) throw new PoolLayoutError(`subnets[${i}]: invalid IPv${family} subnet: ${text}`);
  if (hostBits(cidr) < bits) throw new PoolLayoutError(`subnets[${i}]: too narrow subnet: ${text}`);
  return cidr;
}

/**
 * Chooses the lowest free block index (Coil's rule: a freed index is reused first) and returns its
 * CIDRs. Runs in O(|used|) time and O(1) memory whatever the pool size, because the lowest free
 * index is at most |used|.
 * @param used indices already taken; indices ≥ totalBlocks are harmless.
 * @returns undefined when the pool is exhausted (the caller answers the BlockRequest `Failed`,
 *   reason "out of blocks").
 * @see docs/compatibility.md#block-allocation-in-the-controller (the lowest free index, as Coil)
 */
export function allocateBlock(layout: PoolLayout, used: ReadonlySet<bigint>): BlockCidrs | undefined {
  let index = 0n;
  while (used.has(index)) index++;
  return layout.blockAt(index);
}

/**
 * The allocated block indices of one pool, kept in memory by the controller and rebuilt from the
 * informer cache's AddressBlocks. Memory is O(allocated blocks); {@link allocate} is amortised O(1)
 * because every index below a remembered low-water mark is known to be taken.
 *
 * Concurrency: not locked. JS runs one reconcile step at a time, so a caller that calls
 * {@link allocate} (which marks the index at once) before its first `await` cannot hand the same
 * block to two requests; if the AddressBlock create then fails, it calls {@link remove}.
 * @see docs/compatibility.md#block-allocation-in-the-controller
 */
export class PoolState {
  private readonly indices = new Set<bigint>();
  /** Every index below this one is allocated. */
  private lowWater = 0n;

  constructor(private currentLayout: PoolLayout) {}

  /** The layout allocations are carved from. */
  get layout(): PoolLayout {
    return this.currentLayout;
  }

  /** Replaces the layout after `spec.subnets` grew (append-only, so existing indices keep their CIDRs). */
  setLayout(layout: PoolLayout): void {
    this.currentLayout = layout;
  }

  /** Total blocks of the pool (`coil_controller_max_blocks`). */
  get maxBlocks(): bigint {
    return this.currentLayout.totalBlocks;
  }

  /** Blocks held (`coil_controller_allocated_blocks`). */
  get allocatedCount(): number {
    return this.indices.size;
  }

  /** The allocated indices, read-only, for {@link allocateBlock} or invariant checks. */
  get used(): ReadonlySet<bigint> {
    return this.indices;
  }

  /** True when `index` is allocated. */
  has(index: bigint): boolean {
    return this.indices.has(index);
  }

  /**
   * Records an existing block (from the cache). Indices outside the layout are still recorded, so
   * counts match what exists in the API server.
   * @returns false when it was already recorded.
   * @throws RangeError when `index` is negative.
   */
  add(index: bigint): boolean {
    if (index < 0n) throw new RangeError(`negative block index ${index}`);
    if (this.indices.has(index)) return false;
    this.indices.add(index);
    return true;
  }

  /** Forgets a block (deleted, or its create failed). @returns false when it was not recorded. */
  remove(index: bigint): boolean {
    if (!this.indices.delete(index)) return false;
    if (index < this.lowWater) this.lowWater = index;
    return true;
  }

  /** The block {@link allocate} would hand out, without taking it. */
  peekFree(): BlockCidrs | undefined {
    while (this.indices.has(this.lowWater)) this.lowWater++;
    return this.currentLayout.blockAt(this.lowWater);
  }

  /**
   * Takes the lowest free block (Coil's rule) that `skip` does not refuse, and marks it allocated.
   * A skipped index stays free (the low-water mark does not pass it), so it is offered again once
   * `skip` lets it go. O(skipped + 1) calls of `skip`.
   * @param skip says a free block must not be handed out now (it holds a live Pod's address:
   *   docs/ipam-recovery.md#what-the-controller-never-hands-out)
   * @returns undefined when the pool is exhausted ("out of blocks"), skipped blocks included
   */
  allocate(skip?: (block: BlockCidrs) => boolean): BlockCidrs | undefined {
    const first = this.peekFree();
    if (first === undefined) return undefined;
    for (let index = first.index; ; index++) {
      if (this.indices.has(index)) continue;
      const block = index === first.index ? first : this.currentLayout.blockAt(index);
      if (block === undefined) return undefined;
      if (skip?.(block)) continue;
      this.add(index);
      return block;
    }
  }

  /**
   * Takes block `index` if it is free (a claim back: docs/ipam-recovery.md#claim-back).
   * @returns its CIDRs, `taken` when it is allocated, or `out-of-range` past the pool
   */
  take(index: bigint): BlockCidrs | 'taken' | 'out-of-range' {
    const block = index < 0n ? undefined : this.currentLayout.blockAt(index);
    if (block === undefined) return 'out-of-range';
    if (this.indices.has(index)) return 'taken';
    this.add(index);
    return block;
  }
}
