/**
 * BlockExport: keeps the export table (119) equal to this node's AddressBlocks, reserved ones
 * included, through `RouteExporter.sync`. Level-triggered: every AddressBlock event of this node
 * (and every GC pass) re-reads the whole set from the cache; events arriving while a sync runs
 * collapse into one more sync, so a burst of block changes costs at most two batches.
 * @see docs/compatibility.md#export-table-119,
 *   Coil #370 (flush on shutdown: {@link BlockExport.clear})
 */
import type Logger from 'bunyan';
import type { AddressBlock } from '../../api/v2/addressblock.js';
import { CidrError, formatCidr, parseBlockField } from '../../ipam/cidr.js';
import type { Cache } from '../../runtime/cache.js';
import { Kinds } from '../../api/v2/kinds.js';
import type { RouteExporter } from './route-export.js';

/** Constructor options of {@link BlockExport}. */
export interface BlockExportOptions {
  /** Cache holding only this node's AddressBlocks. */
  readonly cache: Cache;
  readonly exporter: RouteExporter;
  readonly logger: Logger;
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
export class BlockExport {
  private unsubscribe: (() => void) | undefined;
  private running: Promise<void> | undefined;
  private dirty = false;
  private stopped = false;

  constructor(private readonly o: BlockExportOptions) {}

  /** Follows the cache and syncs once now. @throws what the first sync throws */
  async start(): Promise<void> {
    this.unsubscribe = this.o.cache.onEvent(Kinds.AddressBlock, () => this.trigger());
    await this.sync();
  }

  /** Stops following the cache (routes stay: BIRD keeps advertising a live node's blocks). */
  async stop(): Promise<void> {
    this.stopped = true;
    this.unsubscribe?.();
    await this.running?.catch(() => undefined);
  }

  /** Requests a sync soon; errors are logged and the next event or GC pass retries. */
  trigger(): void {
    if (this.stopped) return;
    if (this.running) {
      this.dirty = true;
      return;
    }
    this.sync().catch((err: unknown) => this.o.logger.error({ err }, 'export table sync failed'));
  }

  /**
   * Syncs the export table with the cache now (after a sync already running).
   * @throws NetlinkError when the kernel refuses
   */
  async sync(): Promise<void> {
    while (this.running) await this.running.catch(() => undefined);
    const run = (async () => {
      do {
        this.dirty = false;
        const change = await this.o.exporter.sync(blockCidrs(this.o.cache.list(Kinds.AddressBlock)));
        if (change.added.length + change.deleted.length > 0) this.o.logger.info(change, 'export table synced');
      } while (this.dirty && !this.stopped);
    })();
    this.running = run;
    try {
      await run;
    } finally {
      this.running = undefined;
    }
  }

  /** {@link sync}, except after {@link stop}: a block appearing late must not re-export what {@link clear} flushed. */
  async syncUnlessStopped(): Promise<void> {
    if (!this.stopped) await this.sync();
  }

  /** Flushes the export table (Coil #370: the Node is gone, stop advertising its blocks). */
  async clear(): Promise<void> {
    await this.stop();
    await this.o.exporter.clear();
  }
}
