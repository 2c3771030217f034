/**
 * RouteExporter: this node's AddressBlocks as routes in the export table, for an external router
 * (BIRD: `kernel table 119; learn`) to advertise. Declarative, as Coil's `RouteExporter.Sync`:
 * read the table, add what is missing, delete what is extra.
 * @see docs/compatibility.md#export-table-119, Coil #370 (flush on shutdown)
 */
import { EXPORT_TABLE_ID, PROTOCOL_ID } from '../../api/v2/keys.js';
import { formatCidr } from '../../ipam/cidr.js';
import { parseRoutePrefix } from '../../netlink/cidr.js';
import type { IpRunner } from '../../netlink/iproute2/ip-runner.js';
import { NetlinkExecutor } from '../../netlink/netlink-executor.js';
import { readRoutes, type Route } from '../../netlink/route.js';
import { rt, type RtRequest } from '../../netlink/rt-request.js';

/** Kernel side of route export. Overlapping calls run one after another, in call order. */
export interface RouteExporter {
  /**
   * Makes the export table hold exactly `<cidr> dev lo proto <protocolId>` for each of `desired`
   * (IPv4 and IPv6 CIDR strings, e.g. `10.100.0.32/27`, `fd00::/120`), in one batch.
   * @returns what changed, as CIDR strings
   * @throws TypeError when a CIDR is malformed or has host bits set (nothing is changed)
   * @throws NetlinkError when the kernel refuses; call again to converge
   */
  sync(desired: readonly string[]): Promise<RouteExportChange>;
  /**
   * Removes every route of the export table (Coil #370: when the Node is gone, stop advertising).
   * @throws NetlinkError
   */
  clear(): Promise<RouteExportChange>;
}

/** What a sync changed. */
export interface RouteExportChange {
  added: string[];
  deleted: string[];
}

/** Constructor options of {@link IpRouteExporter}. */
export interface IpRouteExporterOptions {
  /** Executor of every kernel call (reads are dumps, writes typed requests). Default: one on {@link ip}. */
  kernel?: NetlinkExecutor;
  /** Without {@link kernel}: an executor on this iproute2 runner alone. Default: a new IpRunner. */
  ip?: IpRunner;
  /** netns file path standing in for the host netns (tests); default: coild's own netns. */
  hostNetns?: string;
  /** Export table id (coild `--export-table-id`). Default 119. */
  tableId?: number;
  /** Protocol id of exported routes (coild `--protocol-id`). Default 30. */
  protocolId?: number;
}

/**
 * The {@link RouteExporter} on the NetlinkExecutor (rtnetlink, else iproute2). Every route of the table counts as coil's: routes someone
 * else put there are deleted too, as in Coil, because BIRD advertises the whole table.
 */
export class IpRouteExporter implements RouteExporter {
  private readonly kernel: NetlinkExecutor;
  private readonly hostNetns: string | undefined;
  private readonly tableId: number;
  private readonly protocolId: number;
  /** Tail of the running syncs: two interleaved read-modify-write passes would undo each other. */
  private chain: Promise<unknown> = Promise.resolve();

  constructor(options: IpRouteExporterOptions = {}) {
    this.kernel = options.kernel ?? new NetlinkExecutor(options.ip ? { ip: options.ip } : {});
    this.hostNetns = options.hostNetns;
    this.tableId = options.tableId ?? EXPORT_TABLE_ID;
    this.protocolId = options.protocolId ?? PROTOCOL_ID;
  }

  sync(desired: readonly string[]): Promise<RouteExportChange> {
    const run = this.chain.then(() => this.syncNow(desired));
    this.chain = run.catch(() => undefined);
    return run;
  }

  clear(): Promise<RouteExportChange> {
    return this.sync([]);
  }

  private async syncNow(desired: readonly string[]): Promise<RouteExportChange> {
    // Canonical CIDR text on both sides, so `fd00:0::/120` matches the kernel's `fd00::/120`.
    const want = new Set(desired.map((c) => formatCidr(parseRoutePrefix(c))));
    const host = { netns: this.hostNetns, table: this.tableId };
    const [v4, v6] = await Promise.all([readRoutes(this.kernel, { ...host, family: 4 }), readRoutes(this.kernel, { ...host, family: 6 })]);
    const have = new Map<string, Route>();
    for (const [family, routes] of [[4, v4], [6, v6]] as const) {
      for (const r of routes) have.set(cidrOfDst(r.dst, family), r);
    }
    const isExported = (r: Route | undefined): boolean => r?.dev === 'lo' && r.protocol === String(this.protocolId);
    const lines: RtRequest[] = [];
    const change: RouteExportChange = { added: [], deleted: [] };
    for (const [cidr, r] of have) {
      if (want.has(cidr) && isExported(r)) continue;
      // A wanted prefix routed some other way (another dev or proto) is deleted and re-added.
      lines.push(rt.routeDel({ dst: cidr, table: this.tableId, ...(r.dev ? { dev: r.dev } : {}) }));
      if (!want.has(cidr)) change.deleted.push(cidr);
    }
    for (const cidr of want) {
      if (isExported(have.get(cidr))) continue;
      lines.push(rt.routeAdd({ dst: cidr, dev: 'lo', protocol: this.protocolId, table: this.tableId }));
      change.added.push(cidr);
    }
    if (lines.length > 0) await this.kernel.apply(lines, { netns: this.hostNetns });
    return change;
  }
}

/** A `dst` as ip prints it (`default`, `10.0.0.5`, `fd00::/120`) → full CIDR string. */
function cidrOfDst(dst: string, family: 4 | 6): string {
  if (dst === 'default') return family === 4 ? '0.0.0.0/0' : '::/0';
  return formatCidr(parseRoutePrefix(dst));
}
