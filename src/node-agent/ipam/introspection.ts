/**
 * coild's health port (`--health-addr`, default :9385): the `/healthz` and `/readyz` probes and
 * `GET /ipam`, a JSON view of this node's IPAM state in the spirit of the AWS VPC CNI's
 * `/ip-manager` introspection endpoint: every block with its used/free/cooling counts, and every
 * allocation with the pod it belongs to. `coild ipam-status`
 * (ipam-status.ts) prints it as tables. With `--secure-endpoints` (the default) the port is HTTPS
 * and `/ipam` answers only callers allowed `get` on the non-resource path `/ipam` (the chart's
 * ClusterRole `coil-ipam-view`; src/runtime/secure-serving.ts). Nothing here changes state: a
 * leak is released through the API server (leak-release-requests.ts).
 */
import type { Server } from 'node:http';
import { boundPort, closeServer, listenEndpoints, type BindAddress, type EndpointSecurity, type Handler } from '../../runtime/secure-serving.js';
import type { NodeIpam } from './node-ipam.js';
import type { Orphan } from './orphans.js';

/** One block in {@link IpamSnapshot}. Counts are addresses. */
export interface BlockView {
  name: string;
  pool: string;
  index: number;
  ipv4?: string;
  ipv6?: string;
  size: number;
  used: number;
  free: number;
  cooling: number;
  reserved: boolean;
  releasing: boolean;
  /** Deleted by someone; goes once its pods are gone. */
  deleting: boolean;
  /** When the block became empty (RFC 3339), while it is empty. */
  emptySince?: string;
}

/** One allocation in {@link IpamSnapshot}. Addresses without prefix. */
export interface AllocationView {
  pool: string;
  block: string;
  containerId: string;
  ifname: string;
  ipv4?: string;
  ipv6?: string;
  /** Absent for allocations recovered from the host after a restart (the alias does not hold them). */
  podNamespace?: string;
  podName?: string;
}

/**
 * One AddressBlock of this node that coild cannot read and skips (NodeIpam's UnreadableBlock):
 * `coil ipam check` reports it, with the block's UID.
 */
export interface UnreadableBlockView {
  name: string;
  uid?: string;
  pool: string;
  index: number;
  ipv4?: string;
  ipv6?: string;
  reason: string;
}

/**
 * An address wired on this node that no AddressBlock of the node holds (OrphanAddresses): kept
 * wired, its block claimed back (docs/ipam-recovery.md). `coil ipam check` reports it.
 */
export interface OrphanView {
  pool: string;
  containerId: string;
  ifname: string;
  ipv4?: string;
  ipv6?: string;
  podNamespace?: string;
  podName?: string;
  /** The block claimed back, `<pool>-<index>`. */
  block?: string;
  /** The block holding the interface's other address, which does not hold these (OrphanEntry.registeredIn). */
  registeredIn?: string;
  /** `no-pod`, `no-pool`, `outside-block`, `unreadable-block`, `claiming`, `granted` or `refused` (OrphanState). */
  state: string;
  message?: string;
}

/** The body of `GET /ipam`. */
export interface IpamSnapshot {
  node: string;
  /** RFC 3339 time of the snapshot. */
  time: string;
  pools: { name: string; blocks: number; used: number; free: number; cooling: number; requestPending: boolean }[];
  blocks: BlockView[];
  allocations: AllocationView[];
  /** Blocks labelled with this node that coild cannot read; skipped, never fatal to the others. */
  unreadableBlocks: UnreadableBlockView[];
  /** Addresses on the host no block of this node holds, kept wired (docs/ipam-recovery.md). */
  orphans: OrphanView[];
}

/** Builds the snapshot at `nowMs`. */
export function ipamSnapshot(ipam: NodeIpam, node: string, pendingPools: readonly string[], nowMs: number, orphans: readonly Orphan[] = []): IpamSnapshot {
  const blocks: BlockView[] = ipam.nodeBlocks().map((b) => {
    const cooling = b.allocator.coolingCount(nowMs);
    return {
      name: b.name, pool: b.pool, index: b.index, ...(b.ipv4 && { ipv4: b.ipv4 }), ...(b.ipv6 && { ipv6: b.ipv6 }),
      size: b.allocator.size, used: b.allocator.usedCount, free: b.releasing || b.deleting ? 0 : b.allocator.freeCount(nowMs), cooling,
      reserved: b.reserved, releasing: b.releasing, deleting: b.deleting,
      ...(b.allocator.isEmpty && b.emptySinceMs !== undefined && { emptySince: new Date(b.emptySinceMs).toISOString() }),
    };
  });
  const names = [...new Set([...blocks.map((b) => b.pool), ...pendingPools])].sort();
  const pools = names.map((name) => {
    const of = blocks.filter((b) => b.pool === name);
    const total = (f: (b: BlockView) => number): number => of.reduce((n, b) => n + f(b), 0);
    return { name, blocks: of.length, used: total((b) => b.used), free: total((b) => b.free), cooling: total((b) => b.cooling), requestPending: pendingPools.includes(name) };
  });
  const allocations: AllocationView[] = ipam
    .allocations()
    .map((a) => ({
      pool: a.pool, block: a.blockName, containerId: a.containerId, ifname: a.ifname,
      ...(a.ipv4 && { ipv4: a.ipv4 }), ...(a.ipv6 && { ipv6: a.ipv6 }),
      ...(a.podNamespace && { podNamespace: a.podNamespace }), ...(a.podName && { podName: a.podName }),
    }))
    .sort((x, y) => x.block.localeCompare(y.block) || (x.ipv4 ?? x.ipv6 ?? '').localeCompare(y.ipv4 ?? y.ipv6 ?? '', undefined, { numeric: true }));
  const unreadableBlocks: UnreadableBlockView[] = ipam.unreadableBlocks().map((b) => ({
    name: b.name, ...(b.uid !== undefined && { uid: b.uid }), pool: b.pool, index: b.index,
    ...(b.ipv4 !== undefined && { ipv4: b.ipv4 }), ...(b.ipv6 !== undefined && { ipv6: b.ipv6 }), reason: b.reason,
  }));
  const orphanViews: OrphanView[] = orphans.map(({ key: _, ...o }) => ({ ...o }));
  return { node, time: new Date(nowMs).toISOString(), pools, blocks, allocations, unreadableBlocks, orphans: orphanViews };
}

/** What the health server asks its owner. */
export interface IntrospectionOptions {
  /** `/healthz`: undefined when alive, else the reason. */
  readonly health: () => string | undefined;
  /** `/readyz`: undefined when ready (cache synced, recovered, serving), else the reason. */
  readonly ready: () => string | undefined;
  /** `/ipam`: the current snapshot, or undefined before recovery finished. */
  readonly snapshot: () => IpamSnapshot | undefined;
  /** coild runs without IPAM (`--enable-ipam=false`): `/ipam` answers 404 saying so. */
  readonly ipamDisabled?: boolean;
  /** How `/ipam` is served (the probes are open either way); default plain HTTP. */
  readonly security?: EndpointSecurity;
}

/** The health-port HTTP(S) server. */
export class IntrospectionServer {
  private server: Server | undefined;

  constructor(private readonly o: IntrospectionOptions) {}

  /** Listens on `addr`. @returns the bound port @throws Error when the port is taken */
  async listen(addr: BindAddress): Promise<number> {
    const probe = (check: () => string | undefined, name: string): Handler => (_req, res) => {
      const reason = check();
      res.writeHead(reason === undefined ? 200 : 500, { 'content-type': 'text/plain' }).end(reason === undefined ? 'ok' : `[-]${name} failed: ${reason}\n`);
    };
    const ipam: Handler = (_req, res) => {
      if (this.o.ipamDisabled) return void res.writeHead(404, { 'content-type': 'text/plain' }).end('IPAM is disabled on this node (coild --enable-ipam=false)\n');
      const snap = this.o.snapshot();
      if (snap === undefined) res.writeHead(503, { 'content-type': 'text/plain' }).end('IPAM state not recovered yet\n');
      else res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(snap, null, 1));
    };
    this.server = await listenEndpoints(addr, {
      probes: { '/healthz': probe(this.o.health, 'healthz'), '/readyz': probe(this.o.ready, 'readyz') },
      routes: { '/ipam': { handle: ipam } },
    }, this.o.security ?? { mode: 'plain' });
    return boundPort(this.server);
  }

  async close(): Promise<void> {
    if (this.server) await closeServer(this.server);
  }
}
