/**
 * NodeIpam: the addresses of this node's AddressBlocks, as coild hands them to pods.
 *
 * Blocks come from the AddressBlock informer (label `coil.cybozu.com/node=<node>`); each is a
 * `BlockAllocator` (src/ipam: next-fit with cooling). Allocation is idempotent per
 * `<containerID>:<ifname>` (Coil's key). When a pool has no free address here, the ADD waits on
 * the {@link BlockRequester} without holding anything, so other pools and other blocks keep
 * serving (Coil #368).
 * @see docs/compatibility.md#address-allocation-on-the-node,
 *   docs/compatibility.md#freeing-addresses-and-releasing-blocks,
 *   docs/compatibility.md#a-lossy-blockrequest-handshake,
 *   docs/compatibility.md#blocks-released-the-moment-they-empty
 */
import type Logger from 'bunyan';
import { isReserved, poolOf, type AddressBlock } from '../../api/v2/addressblock.js';
import { BlockAllocator, BlockAllocatorError, type AddressAllocation } from '../../ipam/block.js';
import { canonicalAddress, CidrError } from '../../ipam/cidr.js';
import type { Cache } from '../../runtime/cache.js';
import type { BlockRequester } from './block-request.js';
import type { PodNetwork } from '../podnet/pod-network.js';
import { Kinds } from '../../api/v2/kinds.js';

/** One of this node's blocks. `reserved`, `releasing` and `deleting` blocks are never allocated from. */
export interface NodeBlock {
  readonly name: string;
  /**
   * metadata.uid of the AddressBlock this entry tracks. Block names are reused (`<pool>-<index>`,
   * lowest free index first), and after a watch gap the cache may show a released block's
   * successor as an update of the same name rather than a delete and an add.
   */
  readonly uid: string | undefined;
  readonly pool: string;
  readonly index: number;
  readonly ipv4?: string;
  readonly ipv6?: string;
  readonly allocator: BlockAllocator;
  /** Label `coil.cybozu.com/reserved=true`: exported, never allocated from, never released. */
  reserved: boolean;
  /** coild is releasing it (finalizer removal and delete in progress). */
  releasing: boolean;
  /**
   * Has a deletionTimestamp (someone deleted it; our finalizer holds it while pods use it). Not
   * allocated from, and released as soon as it is empty and cooled, without the grace period —
   * in Coil a hand-deleted block hung until coild restarted (Coil #202).
   */
  deleting: boolean;
  /** When the last address left (ms since the epoch); undefined while in use. */
  emptySinceMs: number | undefined;
}

/**
 * An AddressBlock of this node that coild cannot read (a CIDR that does not parse, dual-stack
 * sizes that differ, a block too wide): skipped — never allocated from, never released by coild —
 * and reported, so one bad block never stops the node's others (docs/node-state.md#unreadable-blocks).
 */
export interface UnreadableBlock {
  readonly name: string;
  readonly uid: string | undefined;
  readonly pool: string;
  readonly index: number;
  readonly ipv4?: string;
  readonly ipv6?: string;
  /** Why it cannot be read (the parser's message). */
  readonly reason: string;
}

/**
 * An address held by one pod interface, with what introspection shows about it. `ipv4`/`ipv6`
 * are the pod's addresses: for an allocation recovered from the host, the wired ones, both
 * halves, even one its block does not hold ({@link NodeAllocation.withoutBlock}).
 */
export interface NodeAllocation extends AddressAllocation {
  readonly pool: string;
  readonly blockName: string;
  readonly containerId: string;
  readonly ifname: string;
  readonly podName?: string;
  readonly podNamespace?: string;
  /**
   * Wired addresses of this interface that its block does not hold: a family the block lacks
   * (its pool was re-created without it), or an address other than the block's at the offset.
   * coild keeps them wired and exported alone (docs/ipam-recovery.md#a-family-the-pool-no-longer-has).
   */
  readonly withoutBlock?: { readonly ipv4?: string; readonly ipv6?: string };
}

/** A pod interface's addresses as the host shows them (recovery, GC adoption, a lost block). */
export interface WiredEntry {
  readonly pool: string;
  readonly containerId: string;
  readonly ifname: string;
  readonly ipv4?: string;
  readonly ipv6?: string;
}

/** What an ADD asks for. */
export interface AllocateRequest {
  readonly pool: string;
  readonly containerId: string;
  readonly ifname: string;
  readonly podName?: string;
  readonly podNamespace?: string;
}

/** Why an allocation failed: the pool is out of blocks, or no block arrived in time. */
export class NodeIpamError extends Error {
  override readonly name = 'NodeIpamError';
  constructor(
    readonly kind: 'out-of-blocks' | 'timeout',
    message: string,
  ) {
    super(message);
  }
}

/** Constructor options of {@link NodeIpam}. */
export interface NodeIpamOptions {
  /** Cache holding this node's AddressBlocks. */
  readonly cache: Cache;
  readonly requester: BlockRequester;
  readonly logger: Logger;
  /** A freed address is not handed out again for this long (`--cooling-period`). Default 30 000 ms. */
  readonly coolingMs?: number;
  /**
   * Request the next block when a pool's free addresses here fall below this (`--low-water-mark`,
   * AWS VPC CNI's warm pool); 0 disables prefetch. Default 8.
   */
  readonly lowWaterMark?: number;
  /** How long one ADD waits for a new block. Default 30 000 ms (Coil: 10 s). */
  readonly allocTimeoutMs?: number;
  /** Called after blocks appear, vanish or empty (route export, release timer). */
  readonly onBlocksChanged?: () => void;
  /**
   * Writes this node's blocks to the export table (table 119) now. Started when a block appears;
   * an ADD does not return an address before the sync that includes its block has run, so a
   * router learns the block no later than the pod is up (Coil: the export table is re-synced on
   * each block allocation, docs/compatibility.md#export-table-119). A failed sync is logged; the
   * cache-driven sync (block-export.ts) and the GC retry it.
   */
  readonly exportSync?: () => Promise<void>;
  /** Clock, ms since the epoch. Default Date.now. */
  readonly now?: () => number;
  /**
   * Told once per AddressBlock (name and UID) that cannot be read, with the reason; coild records
   * a Warning Event on the block. The block is skipped, the others are tracked as usual.
   */
  readonly onUnreadableBlock?: (block: Readonly<AddressBlock>, reason: string) => void;
  /**
   * Told the addresses a deleted block still held (they stay held: {@link NodeIpam.expect});
   * coild hands them to OrphanAddresses, which claims the block back.
   */
  readonly onAddressesOrphaned?: (entries: WiredEntry[]) => void;
  /**
   * Told when an {@link NodeIpam.expect}ed address was registered into a block that appeared,
   * with the wired addresses that block does not hold (kept in the allocation: {@link NodeIpam.register}).
   */
  readonly onExpectedRegistered?: (key: string, blockName: string, withoutBlock?: WiredEntry) => void;
  /**
   * Told when a key is freed or stops being held ({@link NodeIpam.free}: DEL, a failed ADD, CNI
   * GC, a leak release, GC of a veth gone): coild forgets its orphaned addresses and their routes.
   */
  readonly onFreed?: (key: string) => void;
}

/** Allocation key of one pod interface (Coil's `<containerID>:<ifname>`). */
export function allocationKey(containerId: string, ifname: string): string {
  return `${containerId}:${ifname}`;
}

/**
 * The node's address book. Every state change is synchronous (JavaScript's single thread is the
 * pool lock), so no lock is ever held across an await; callers serialise per key (KeyedMutex).
 */
export class NodeIpam {
  private readonly blocks = new Map<string, NodeBlock>();
  /** This node's blocks that cannot be read, by name. */
  private readonly unreadable = new Map<string, UnreadableBlock>();
  /**
   * Addresses wired on the host that no block holds yet (orphans.ts), by key: registered the
   * moment their block appears, before any ADD can be served from it.
   */
  private readonly expected = new Map<string, WiredEntry>();
  private readonly allocs = new Map<string, NodeAllocation>();
  /** The export sync started for the newest block (see NodeIpamOptions.exportSync). */
  private exported: Promise<void> = Promise.resolve();
  /** Pools whose last BlockRequest was answered `out of blocks` (cleared when a block arrives). */
  private readonly exhausted = new Set<string>();
  private unsubscribe: (() => void) | undefined;
  readonly coolingMs: number;
  private readonly lowWaterMark: number;
  private readonly allocTimeoutMs: number;
  private readonly now: () => number;

  constructor(private readonly o: NodeIpamOptions) {
    this.coolingMs = o.coolingMs ?? 30_000;
    this.lowWaterMark = o.lowWaterMark ?? 8;
    this.allocTimeoutMs = o.allocTimeoutMs ?? 30_000;
    this.now = o.now ?? Date.now;
  }

  /** Loads the cached blocks and follows the informer. Call after the cache synced. */
  start(): void {
    this.unsubscribe = this.o.cache.onEvent(Kinds.AddressBlock, () => this.syncBlocks());
    this.syncBlocks();
  }

  stop(): void {
    this.unsubscribe?.();
  }

  /**
   * Gives the key an address of `pool`: its existing one (idempotent ADD), else one from this
   * node's blocks, asking for a new block when all are full.
   * @throws NodeIpamError `out-of-blocks` when the controller answered Failed, `timeout` when no
   *   block arrived within `allocTimeoutMs`
   * @throws ApiError when the BlockRequest cannot be created
   */
  async allocate(req: AllocateRequest): Promise<NodeAllocation> {
    const key = allocationKey(req.containerId, req.ifname);
    const deadline = this.now() + this.allocTimeoutMs;
    for (;;) {
      const got = this.allocs.get(key) ?? this.tryAllocate(key, req);
      if (got) {
        this.prefetch(req.pool);
        await this.exported;
        return got;
      }
      const left = deadline - this.now();
      if (left <= 0) break;
      const outcome = await this.o.requester.request(req.pool, left);
      if (outcome.kind === 'failed') {
        this.exhausted.add(req.pool);
        throw new NodeIpamError('out-of-blocks', `pool ${req.pool} has no free block for this node (${outcome.reason}${outcome.message ? `: ${outcome.message}` : ''})`);
      }
      if (outcome.kind === 'timeout') break;
      this.syncBlocks();
    }
    throw new NodeIpamError('timeout', `no address block of pool ${req.pool} arrived within ${this.allocTimeoutMs} ms`);
  }

  /** The key's allocation, if any. */
  lookup(containerId: string, ifname: string): NodeAllocation | undefined {
    return this.allocs.get(allocationKey(containerId, ifname));
  }

  /**
   * Frees the key's address; it cools for `coolingMs`. @returns the freed allocation, or
   * undefined when the key held nothing (a repeated DEL)
   */
  free(containerId: string, ifname: string): NodeAllocation | undefined {
    const key = allocationKey(containerId, ifname);
    this.expected.delete(key);
    this.o.onFreed?.(key);
    const a = this.allocs.get(key);
    if (!a) return undefined;
    this.allocs.delete(key);
    const block = this.blocks.get(a.blockName);
    const nowMs = this.now();
    block?.allocator.free(key, nowMs);
    if (block?.allocator.isEmpty) {
      block.emptySinceMs = nowMs;
      this.o.onBlocksChanged?.();
    }
    return a;
  }

  /**
   * Records an allocation found on the host: by start-up recovery, or by GC adopting a veth that
   * holds none. The block is the one of `pool` holding the address; the pool of the alias is
   * trusted first, then any block. A block being released is refused: its release is already
   * on its way to the apiserver and would take the address from under the pod.
   *
   * `entry` must be a read of the host that no ADD or DEL of the key can have overtaken: the
   * recovery listing, taken before coild serves, or {@link PodNetwork.inspect} under the key's
   * lock. A stale listing would register the veth of a finished DEL (PodNetwork.list).
   *
   * The allocation keeps every wired address: one of a family the block lacks, or other than the
   * block's at the offset (a pool re-created otherwise while the pod ran), is kept in the
   * allocation and returned as `withoutBlock`, for coild to export and report
   * (docs/ipam-recovery.md#a-family-the-pool-no-longer-has). Coil keeps the block's half only.
   * @returns the block name and the wired addresses it does not hold, or a reason it could not
   *   be registered (`noBlock` when no block of this node holds either address:
   *   docs/ipam-recovery.md)
   */
  register(entry: WiredEntry): { ok: true; blockName: string; withoutBlock?: WiredEntry } | { ok: false; reason: string; noBlock?: true } {
    const key = allocationKey(entry.containerId, entry.ifname);
    const wired = [entry.ipv4, entry.ipv6].filter((a): a is string => a !== undefined);
    if (wired.length === 0) return { ok: false, reason: 'no pod route in the pod table' };
    const candidates = [...this.blocks.values()].sort((a, b) => Number(b.pool === entry.pool) - Number(a.pool === entry.pool));
    // Either family may be the one a block holds: after an IPv6-only pool replaced a dual-stack one, the IPv4 half is the stray.
    for (const address of wired) {
      for (const b of candidates) {
        const offset = b.allocator.offsetOfAddress(address);
        if (offset === undefined) continue;
        if (b.releasing) return { ok: false, reason: `${b.name} is being released` };
        const r = b.allocator.register(key, offset);
        if (r.kind !== 'registered' && r.kind !== 'already-registered') return { ok: false, reason: `${b.name}: ${r.kind}` };
        const described = b.allocator.get(key)!;
        const [ipv4, ipv6] = [entry.ipv4 === undefined ? undefined : canonicalAddress(entry.ipv4), entry.ipv6 === undefined ? undefined : canonicalAddress(entry.ipv6)];
        const stray = { ...(ipv4 !== undefined && ipv4 !== described.ipv4 && { ipv4 }), ...(ipv6 !== undefined && ipv6 !== described.ipv6 && { ipv6 }) };
        const withoutBlock = stray.ipv4 === undefined && stray.ipv6 === undefined ? undefined : stray;
        this.allocs.set(key, {
          key, offset: described.offset, pool: b.pool, blockName: b.name, containerId: entry.containerId, ifname: entry.ifname,
          ...(ipv4 !== undefined && { ipv4 }), ...(ipv6 !== undefined && { ipv6 }),
          ...(withoutBlock && { withoutBlock }),
        });
        b.emptySinceMs = undefined;
        return { ok: true, blockName: b.name, ...(withoutBlock && { withoutBlock: { pool: entry.pool, containerId: entry.containerId, ifname: entry.ifname, ...withoutBlock } }) };
      }
    }
    return { ok: false, reason: `no block of this node holds ${wired.join(' or ')}`, noBlock: true };
  }

  /**
   * Holds an address wired on the host that no block of this node holds (its block was lost and
   * is being claimed back: docs/ipam-recovery.md#claim-back): when a block holding it appears,
   * it is registered in the same turn, before an ADD could be given the address. A key that a
   * DEL frees is dropped; a registration for a veth gone meanwhile is freed by the next GC pass.
   */
  expect(entry: WiredEntry): void {
    this.expected.set(allocationKey(entry.containerId, entry.ifname), { ...entry });
  }

  /** Stops holding the key's address for a block to come. */
  unexpect(key: string): void {
    this.expected.delete(key);
  }

  /** Every allocation, by key order. */
  allocations(): NodeAllocation[] {
    return [...this.allocs.values()];
  }

  /** This node's blocks, by pool then index. */
  nodeBlocks(): NodeBlock[] {
    return [...this.blocks.values()].sort((a, b) => a.pool.localeCompare(b.pool) || a.index - b.index);
  }

  /** Addresses of `pool` an ADD could get here now (excluding cooling, reserved and releasing blocks). */
  freeCount(pool: string): number {
    const nowMs = this.now();
    let n = 0;
    for (const b of this.blocks.values()) if (b.pool === pool && !b.releasing && !b.deleting) n += b.allocator.freeCount(nowMs);
    return n;
  }

  /**
   * Whether an ADD of `pool` can succeed without news from the controller: a free address here,
   * or no `out of blocks` answer since this node last got a block of it (CNI STATUS).
   */
  isUsable(pool: string): boolean {
    return this.freeCount(pool) > 0 || !this.exhausted.has(pool);
  }

  /** Blocks that may be released now: empty, not cooling, not reserved, empty for `graceMs` (or being deleted). */
  releasable(graceMs: number): NodeBlock[] {
    const nowMs = this.now();
    return this.nodeBlocks().filter(
      (b) => !b.reserved && !b.releasing && b.allocator.isEmpty && b.allocator.coolingCount(nowMs) === 0 && (b.deleting || nowMs - (b.emptySinceMs ?? nowMs) >= graceMs),
    );
  }

  /** Earliest time (ms since the epoch) an empty block becomes releasable; undefined when none is empty. */
  nextReleaseAtMs(graceMs: number): number | undefined {
    let at: number | undefined;
    for (const b of this.blocks.values()) {
      if (b.reserved || b.releasing || !b.allocator.isEmpty || b.emptySinceMs === undefined) continue;
      const t = Math.max(b.emptySinceMs + (b.deleting ? 0 : graceMs), b.emptySinceMs + this.coolingMs);
      at = at === undefined ? t : Math.min(at, t);
    }
    return at;
  }

  /** Re-reads the cache: adds new blocks, drops deleted ones, follows reserved/deletion marks. */
  syncBlocks(): void {
    const seen = new Set<string>();
    let changed = false;
    let appeared = false;
    for (const ab of this.o.cache.list<AddressBlock>(Kinds.AddressBlock)) {
      const name = ab.metadata?.name;
      const pool = poolOf(ab);
      if (!name || !pool) continue;
      seen.add(name);
      let b = this.blocks.get(name);
      if (b && ab.metadata?.uid !== undefined && b.uid !== undefined && b.uid !== ab.metadata.uid) {
        // The block we tracked is gone and a new one took its name: forget the old one first.
        this.forgetBlock(b);
        b = undefined;
      }
      if (!b) {
        const allocator = this.readBlock(ab, name, pool);
        if (allocator === undefined) continue;
        b = { name, uid: ab.metadata?.uid, pool, index: ab.index, ...(ab.ipv4 && { ipv4: ab.ipv4 }), ...(ab.ipv6 && { ipv6: ab.ipv6 }), allocator, reserved: false, releasing: false, deleting: false, emptySinceMs: this.now() };
        this.blocks.set(name, b);
        this.exhausted.delete(pool);
        changed = true;
        appeared = true;
      }
      if (isReserved(ab) && !b.reserved) {
        b.allocator.reserveAll();
        b.reserved = true;
      }
      if (ab.metadata?.deletionTimestamp && !b.deleting) {
        b.deleting = true;
        changed = true;
      }
    }
    for (const [name, b] of this.blocks) {
      if (seen.has(name)) continue;
      this.forgetBlock(b);
      changed = true;
    }
    for (const name of this.unreadable.keys()) if (!seen.has(name)) this.unreadable.delete(name);
    if (appeared) this.registerExpected();
    if (changed) this.o.onBlocksChanged?.();
    const exportSync = this.o.exportSync;
    if (appeared && exportSync) {
      this.exported = this.exported.then(exportSync).catch((err: unknown) => {
        this.o.logger.error({ err }, 'export table sync for a new block failed; the next sync retries');
      });
    }
  }

  /** Registers the expected addresses a new block holds (see {@link expect}). */
  private registerExpected(): void {
    for (const [key, e] of this.expected) {
      if (this.allocs.has(key)) {
        this.expected.delete(key);
        continue;
      }
      const r = this.register(e);
      if (!r.ok) continue;
      this.expected.delete(key);
      this.o.logger.info({ key, block: r.blockName, ipv4: e.ipv4, ipv6: e.ipv6, withoutBlock: r.withoutBlock }, 'registered an address whose block came back');
      this.o.onExpectedRegistered?.(key, r.blockName, r.withoutBlock);
    }
  }

  /**
   * The block's allocator, or undefined when the block cannot be read: then it is recorded in
   * {@link unreadableBlocks} and reported once per name and UID (logged, `onUnreadableBlock`).
   */
  private readBlock(ab: Readonly<AddressBlock>, name: string, pool: string): BlockAllocator | undefined {
    try {
      const allocator = new BlockAllocator({ ...(ab.ipv4 && { ipv4: ab.ipv4 }), ...(ab.ipv6 && { ipv6: ab.ipv6 }), coolingMs: this.coolingMs });
      this.unreadable.delete(name);
      return allocator;
    } catch (err) {
      if (!(err instanceof BlockAllocatorError || err instanceof CidrError)) throw err;
      const known = this.unreadable.get(name);
      if (known !== undefined && known.uid === ab.metadata?.uid) return undefined;
      const reason = err.message;
      this.unreadable.set(name, { name, uid: ab.metadata?.uid, pool, index: ab.index, ...(ab.ipv4 && { ipv4: ab.ipv4 }), ...(ab.ipv6 && { ipv6: ab.ipv6 }), reason });
      this.o.logger.error({ block: name, ipv4: ab.ipv4, ipv6: ab.ipv6, reason }, 'AddressBlock cannot be read; skipped (the node\'s other blocks are served)');
      this.o.onUnreadableBlock?.(ab, reason);
      return undefined;
    }
  }

  /** This node's AddressBlocks that cannot be read and are skipped, by name. */
  unreadableBlocks(): UnreadableBlock[] {
    return [...this.unreadable.values()].sort((a, b) => a.name.localeCompare(b.name));
  }

  /**
   * Drops a block whose AddressBlock is gone (its finalizer removed by hand while pods use it).
   * The addresses it still held stay their pods': each is held for its block to come back
   * ({@link expect}) and handed to `onAddressesOrphaned`, which claims the block back
   * (docs/ipam-recovery.md).
   */
  private forgetBlock(b: NodeBlock): void {
    const orphaned: WiredEntry[] = [];
    for (const a of b.allocator.allocations()) {
      const alloc = this.allocs.get(a.key);
      this.allocs.delete(a.key);
      if (alloc === undefined) continue;
      const entry = { pool: alloc.pool, containerId: alloc.containerId, ifname: alloc.ifname, ...(alloc.ipv4 && { ipv4: alloc.ipv4 }), ...(alloc.ipv6 && { ipv6: alloc.ipv6 }) };
      this.expected.set(a.key, entry);
      orphaned.push(entry);
    }
    this.blocks.delete(b.name);
    if (orphaned.length > 0) {
      this.o.logger.warn({ block: b.name, used: orphaned.length }, 'AddressBlock deleted while addresses are in use: they stay their pods\', and the block is claimed back');
      this.o.onAddressesOrphaned?.(orphaned);
    }
  }

  /** Marks a block as leaving (no allocation from it) or back in service after a failed release. */
  setReleasing(name: string, releasing: boolean): void {
    const b = this.blocks.get(name);
    if (b) b.releasing = releasing;
  }

  private tryAllocate(key: string, req: AllocateRequest): NodeAllocation | undefined {
    const nowMs = this.now();
    for (const b of this.nodeBlocks()) {
      if (b.pool !== req.pool || b.releasing || b.deleting || b.reserved) continue;
      const a = b.allocator.allocate(key, nowMs);
      if (!a) continue;
      b.emptySinceMs = undefined;
      const alloc: NodeAllocation = {
        ...a, pool: b.pool, blockName: b.name, containerId: req.containerId, ifname: req.ifname,
        ...(req.podName !== undefined && { podName: req.podName }), ...(req.podNamespace !== undefined && { podNamespace: req.podNamespace }),
      };
      this.allocs.set(key, alloc);
      return alloc;
    }
    return undefined;
  }

  /** Warm pool: ask for the next block early, once the pool is in use here and runs low. */
  private prefetch(pool: string): void {
    if (this.lowWaterMark <= 0 || this.o.requester.isPending(pool) || this.freeCount(pool) >= this.lowWaterMark) return;
    this.o.requester.request(pool, this.allocTimeoutMs).then(
      (outcome) => {
        if (outcome.kind === 'allocated') this.syncBlocks();
      },
      (err: unknown) => this.o.logger.warn({ err, pool }, 'warm prefetch of a block failed'),
    );
  }
}
