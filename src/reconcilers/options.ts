/**
 * Tunables of the IPAM reconcilers, bound in the container under {@link IPAM_OPTIONS} by the
 * program (from flags) or by a test. Durations in milliseconds.
 */

import { DEFAULT_THRESHOLDS, type CheckThresholds } from '../ipam/ipam-check.js';

/** Injection token of {@link IpamOptions}. */
export const IPAM_OPTIONS = Symbol.for('coil.reconcilers.IpamOptions');

/** Options of the AddressPool, BlockRequest and AddressBlock GC reconcilers. */
export interface IpamOptions {
  /**
   * How often every AddressBlock is checked against the Nodes even without an event (Coil
   * `--gc-interval`, default 3 600 000 ms). Node deletions are also watched, so this is a safety
   * net, not the main path (docs/compatibility.md#orphaned-block-gc-in-the-controller: Coil only
   * polls).
   */
  readonly gcIntervalMs: number;
  /**
   * A Node NotReady for longer than this (by its Ready condition's lastTransitionTime) may lose
   * the blocks no pod of it uses any more, without coild (Coil #204). Default 3 600 000 ms: far
   * beyond pod eviction (300 s) and a reboot, so a partitioned node whose pods were force-deleted
   * but may still run keeps its addresses while it could plausibly come back; a dead node's
   * blocks still free within the hour, Coil's GC cadence. 0 disables the reclaim.
   */
  readonly nodeNotReadyReclaimMs: number;
  /** While a dead node's block still has pods, re-check this often. Default 60 000 ms. */
  readonly reclaimRecheckMs: number;
  /**
   * Answered BlockRequests are deleted this long after their answer (Coil's controller never
   * deletes them, docs/compatibility.md "BlockRequests"). coild deletes the requests it consumed, as Coil's
   * coild does, so this is the safety net for requests whose coild is gone or is Coil's.
   * Default 300 000 ms: coild waits seconds for an answer and, after
   * a restart, finds its blocks by the `coil.cybozu.com/request` and node labels, so nothing reads
   * a request minutes after it was answered. 0 keeps them (Coil's behaviour).
   */
  readonly blockRequestTtlMs: number;
  /**
   * An AddressPool's status is written only once its spec has been unchanged this long (ms),
   * so a client that updates the object its create (or update) returned does not meet a 409 from
   * our status write (Coil writes no status; its own tests update right after create). Default
   * 5 000 ms.
   */
  readonly poolStatusSettleMs: number;
  /**
   * At most one status write per pool per this period (ms). Every coild watches every AddressPool,
   * so each status write is an event sent to every node: under churn a write a second cost each
   * node one event a second, and the apiserver N of them (docs/performance.md#scale). Every block
   * event re-enqueues the pool, so without a floor a burst of 100 allocations would also cost 100
   * writes, each making the next one's cached resourceVersion stale (409). The gauges are updated
   * on every reconcile regardless. Default 10 000 ms.
   */
  readonly poolStatusIntervalMs: number;
  /**
   * How long the answer to "does the apiserver serve `addresspools/status`?" is trusted before
   * discovery is asked again (ms). Coil's AddressPool CRD has no status subresource, and Helm never
   * upgrades a chart's CRDs, so after installing over Coil the status cannot be written until the
   * CRDs are upgraded (docs/compatibility.md). Default 300 000 ms.
   */
  readonly crdProbeIntervalMs: number;
  /**
   * Thresholds of `coil_controller_ipam_findings` (ipam-findings.ts): when a deleting block is
   * stuck, a BlockRequest stale, a pool too full. Default the ones `kubectl coil ipam check`
   * uses (src/ipam/ipam-check.ts DEFAULT_THRESHOLDS: 5 min, 1 min, 90 %).
   */
  readonly findingThresholds: CheckThresholds;
  /**
   * A scrape of `coil_controller_ipam_findings` sooner than this after the last computation reuses
   * its counts (ms): one computation holds the event loop for hundreds of ms at 150,000 Pods
   * (ipam-findings.ts). Default 60 000 ms.
   */
  readonly findingsRecomputeMs: number;
  /**
   * BlockRequests the blockrequest reconciler answers at once (its workers; `--blockrequest-max-concurrent-reconciles`,
   * an integer ≥ 1). Default 16. Each reconcile waits on two API round trips (the AddressBlock's
   * create, the request's status) and allocates synchronously (PoolManager.allocate), so the workers
   * only overlap those waits: at a cold start of N nodes the controller answers about
   * concurrency ÷ (two write latencies) requests a second and the last node waits N ÷ that
   * (docs/performance.md#scale measures it per value).
   */
  readonly blockRequestConcurrency: number;
}

/** The defaults documented on {@link IpamOptions}. */
export const DEFAULT_IPAM_OPTIONS: IpamOptions = Object.freeze({
  gcIntervalMs: 3_600_000,
  nodeNotReadyReclaimMs: 3_600_000,
  reclaimRecheckMs: 60_000,
  blockRequestTtlMs: 300_000,
  poolStatusSettleMs: 5_000,
  poolStatusIntervalMs: 10_000,
  crdProbeIntervalMs: 300_000,
  findingThresholds: DEFAULT_THRESHOLDS,
  findingsRecomputeMs: 60_000,
  blockRequestConcurrency: 16,
});
