/**
 * BlockExport: keeps the export table (119) equal to this node's AddressBlocks, reserved ones
 * included, plus the host routes coild adds beside them ({@link BlockExportOptions.extra}: the
 * shared SNAT addresses this node routes, the addresses of running Pods no block holds),
 * through `RouteExporter.sync`. Level-triggered: every AddressBlock event of this node
 * (and every GC pass) re-reads the whole set from the cache; events arriving while a sync runs
 * collapse into one more sync, so a burst of block changes costs at most two batches. In coild it
 * is a Manager runnable like the other loops ({@link BlockExport.run}).
 * @see docs/compatibility.md#export-table-119,
 *   Coil #370 (flush on shutdown: {@link BlockExport.clear})
 */
import type Logger from 'bunyan';
import type { AddressBlock } from '../../api/v2/addressblock.js';
import { CidrError, formatCidr, parseBlockField } from '../../ipam/cidr.js';
import type { Cache } from '../../runtime/cache.js';
import type { Runnable } from '../../runtime/runnable.js';
import { CoalescingSync } from '../../runtime/coalescing-sync.js';
import { Kinds } from '../../api/v2/kinds.js';
import type { RouteExporter } from './route-export.js';

/** Constructor options of {@link BlockExport}. */
export interface BlockExportOptions {
  /** Cache holding only this node's AddressBlocks. */
  readonly cache: Cache;
  readonly exporter: RouteExporter;
  readonly logger: Logger;
  /**
   * Host CIDRs exported beside the blocks: the shared SNAT addresses this node routes to an
   * Egress's active NAT pod (egress/snat-routes.ts), and the addresses of this node's running
   * Pods that no block holds (OrphanAddresses.exported, docs/ipam-recovery.md); wired by coild.
   * Call {@link trigger} when they change.
   */
  readonly extra?: () => readonly string[];
}

/**
 * Block CIDRs of every cached AddressBlock, canonical, each field read as Coil's coild reads it
 * (an ipv6 in IPv4 form is the IPv4-mapped prefix: parseBlockField). A field that cannot be read
 * is left out rather than failing the sync of every other block; NodeIpam reports the block.
 */
export function blockCidrs(blocks: readonly Readonly<AddressBlock>[]): string[] {
  return blocks.flatMap((b) => ([[4, b.ipv4], [6, b.ipv6]] as const).flatMap(([family, text]) => {
    if (typeof text !== 'string' || text === '') return [];
    try {
      return [formatCidr(parseBlockField(family, text))];
    } catch (e) {
      if (e instanceof CidrError) return [];
      throw e;
    }
  }));
}

/** Table-119 sync driven by the AddressBlock cache. At most one sync runs at a time. */
export class BlockExport implements Runnable {
  private unsubscribe: (() => void) | undefined;
  private readonly loop = new CoalescingSync({
    sync: async () => {
      const change = await this.o.exporter.sync([...blockCidrs(this.o.cache.list(Kinds.AddressBlock)), ...(this.o.extra?.() ?? [])]);
      if (change.added.length + change.deleted.length > 0) this.o.logger.info(change, 'export table synced');
    },
    onError: (err) => this.o.logger.error({ err }, 'export table sync failed'),
  });
  /** Settled by the first sync of {@link run}: see {@link firstSync}. */
  private readonly first: { promise: Promise<void>; settle: (err?: unknown) => void };

  constructor(private readonly o: BlockExportOptions) {
    let settle!: (err?: unknown) => void;
    const promise = new Promise<void>((resolve, reject) => { settle = (err) => (err === undefined ? resolve() : reject(err)); });
    promise.catch(() => undefined); // awaited by firstSync's caller, if any
    this.first = { promise, settle };
  }

  /** Follows the cache and syncs once now (outside a Manager). @throws what the first sync throws */
  async start(): Promise<void> {
    this.unsubscribe = this.o.cache.onEvent(Kinds.AddressBlock, () => this.trigger());
    await this.sync();
  }

  /**
   * The Manager runnable: follows the cache and syncs once, then until `signal` aborts, and
   * {@link stop}s. A failed first sync ends the run with its error (the Manager runs it again
   * after its backoff); later failures are logged and retried by the next event or GC pass.
   */
  async run(signal: AbortSignal): Promise<void> {
    const unsubscribe = this.o.cache.onEvent(Kinds.AddressBlock, () => this.trigger());
    try {
      try {
        await this.sync();
        this.first.settle();
      } catch (err) {
        this.first.settle(err);
        throw err;
      }
      if (!signal.aborted) await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
    } finally {
      unsubscribe();
      if (signal.aborted) await this.stop();
    }
  }

  /**
   * Resolves once the first sync of {@link run} has succeeded (coild's start waits for the export
   * table, as it did when the export started there).
   * @throws what that first sync threw
   */
  firstSync(): Promise<void> {
    return this.first.promise;
  }

  /** Stops following the cache (routes stay: BIRD keeps advertising a live node's blocks). */
  async stop(): Promise<void> {
    this.unsubscribe?.();
    await this.loop.stop();
  }

  /** Requests a sync soon; errors are logged and the next event or GC pass retries. */
  trigger(): void {
    this.loop.trigger();
  }

  /**
   * Syncs the export table with the cache now (after a sync already running).
   * @throws NetlinkError when the kernel refuses
   */
  async sync(): Promise<void> {
    await this.loop.sync();
  }

  /** {@link sync}, except after {@link stop}: a block appearing late must not re-export what {@link clear} flushed. */
  async syncUnlessStopped(): Promise<void> {
    if (!this.loop.isStopped) await this.sync();
  }

  /** Flushes the export table (Coil #370: the Node is gone, stop advertising its blocks). */
  async clear(): Promise<void> {
    await this.stop();
    await this.o.exporter.clear();
  }
}
