/**
 * coild's own metrics, registered on the program's prom-client Registry (never the global one).
 * Coil exports no per-node address metrics and no allocation or BlockRequest latency
 * (docs/compatibility.md#metrics-gaps); names follow `coil_<program>_<noun>_<unit>`
 * (docs/design.md#metric-names).
 *
 * - `coil_coild_allocated_addresses{pool}`, `coil_coild_free_addresses{pool}`,
 *   `coil_coild_cooling_addresses{pool}`, `coil_coild_blocks{pool}` (gauges, read at scrape time);
 * - `coil_coild_block_requests_total{pool,result}` (`allocated` | `failed`);
 * - `coil_coild_block_request_wait_seconds{pool}` (creation → answer);
 * - `coil_coild_cni_duration_seconds{command,result}` (ADD/DEL as coild handles them, locks included);
 * - `coil_coild_block_request_oldest_pending_seconds{pool}` (age of the request in flight, 0 when
 *   none is, for every pool asked for since start; read at scrape time) — a request nobody
 *   answers never reaches the wait histogram;
 * - `coil_coild_ready` (1 when `/readyz` would answer OK, else 0);
 * - `coil_coild_unreadable_blocks{pool}` (gauge): AddressBlocks of this node coild cannot read and
 *   skips (docs/node-state.md#unreadable-blocks);
 * - `coil_coild_orphan_addresses{pool,state}` (gauge): addresses wired on this node that no
 *   AddressBlock of the node holds, kept wired while their block is claimed back
 *   (docs/ipam-recovery.md).
 */
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { NodeIpam } from './ipam/node-ipam.js';
import type { Orphan } from './ipam/orphans.js';

/** Latency buckets in seconds: 1 ms … 60 s (an ADD waiting for a block takes seconds). */
const BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

/** The metrics; construct once per Registry. @throws Error when the registry already has them */
export class NodeAgentMetrics {
  readonly blockRequests: Counter<'pool' | 'result'>;
  readonly blockRequestWait: Histogram<'pool'>;
  readonly cniDuration: Histogram<'command' | 'result'>;

  constructor(registry: Registry, ipam: () => NodeIpam | undefined, o: { pending?: () => Array<{ pool: string; sinceMs: number | undefined }>; ready?: () => boolean; orphans?: () => readonly Orphan[] } = {}) {
    const registers = [registry];
    new Gauge({
      name: 'coil_coild_block_request_oldest_pending_seconds', help: 'Age of the BlockRequest in flight, per pool asked for since start (0 when none is in flight)', labelNames: ['pool'], registers,
      collect() {
        this.reset();
        const now = Date.now();
        for (const p of o.pending?.() ?? []) this.set({ pool: p.pool }, p.sinceMs === undefined ? 0 : Math.max(0, (now - p.sinceMs) / 1000));
      },
    });
    new Gauge({
      name: 'coil_coild_ready', help: '1 when coild can serve CNI ADD (its readiness), else 0', registers,
      collect() {
        this.set(o.ready?.() === false ? 0 : 1);
      },
    });
    const perPool = (name: string, help: string, value: (ipam: NodeIpam, pool: string, nowMs: number) => number): void => {
      new Gauge({
        name, help, labelNames: ['pool'], registers,
        collect() {
          this.reset();
          const i = ipam();
          if (!i) return;
          const nowMs = Date.now();
          for (const pool of new Set(i.nodeBlocks().map((b) => b.pool))) this.set({ pool }, value(i, pool, nowMs));
        },
      });
    };
    const sum = (i: NodeIpam, pool: string, f: (b: ReturnType<NodeIpam['nodeBlocks']>[number]) => number): number =>
      i.nodeBlocks().filter((b) => b.pool === pool).reduce((n, b) => n + f(b), 0);
    new Gauge({
      name: 'coil_coild_unreadable_blocks', help: 'AddressBlocks of this node that coild cannot read and skips, per pool', labelNames: ['pool'], registers,
      collect() {
        this.reset();
        for (const b of ipam()?.unreadableBlocks() ?? []) this.inc({ pool: b.pool });
      },
    });
    new Gauge({
      name: 'coil_coild_orphan_addresses', help: 'Addresses wired on this node that no AddressBlock of the node holds (kept wired, block claimed back), per pool and state', labelNames: ['pool', 'state'], registers,
      collect() {
        this.reset();
        for (const x of o.orphans?.() ?? []) this.inc({ pool: x.pool, state: x.state });
      },
    });
    perPool('coil_coild_allocated_addresses', 'Addresses of this node held by pods, per pool', (i, p) => sum(i, p, (b) => b.allocator.usedCount));
    perPool('coil_coild_free_addresses', 'Addresses of this node an ADD could get now, per pool', (i, p) => i.freeCount(p));
    perPool('coil_coild_cooling_addresses', 'Freed addresses not yet reusable, per pool', (i, p, now) => sum(i, p, (b) => b.allocator.coolingCount(now)));
    perPool('coil_coild_blocks', 'AddressBlocks held by this node, per pool', (i, p) => sum(i, p, () => 1));
    this.blockRequests = new Counter({ name: 'coil_coild_block_requests_total', help: 'BlockRequests answered, by result', labelNames: ['pool', 'result'], registers });
    this.blockRequestWait = new Histogram({ name: 'coil_coild_block_request_wait_seconds', help: 'Time from creating a BlockRequest to its answer', labelNames: ['pool'], buckets: BUCKETS, registers });
    this.cniDuration = new Histogram({ name: 'coil_coild_cni_duration_seconds', help: 'CNI ADD/DEL handling time in coild', labelNames: ['command', 'result'], buckets: BUCKETS, registers });
  }

  /** For `BlockRequester.onAnswered`. */
  observeBlockRequest(pool: string, result: 'allocated' | 'failed', waitMs: number): void {
    this.blockRequests.inc({ pool, result });
    this.blockRequestWait.observe({ pool }, waitMs / 1000);
  }

  /** For `CniService.observe`. */
  observeCni(command: 'ADD' | 'DEL', durationMs: number, ok: boolean): void {
    this.cniDuration.observe({ command, result: ok ? 'success' : 'error' }, durationMs / 1000);
  }
}
