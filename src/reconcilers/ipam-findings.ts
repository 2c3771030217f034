/**
 * `coil_controller_ipam_findings{kind}`: the findings of `kubectl coil ipam check`
 * (src/ipam/ipam-check.ts, the same module) counted per kind, computed from coil-controller's
 * informer cache each time Prometheus scrapes — no API call, no timer. The chart's alert rules
 * fire on them (charts/coil/templates/prometheusrule.yaml; docs/observability.md#alerts).
 *
 * Which kinds: those computable from the API objects the controller caches — orphan blocks,
 * blocks stuck deleting, stale BlockRequests, pools above the usage threshold — and, when the
 * cache holds Pods, Pod IPs without a block of their node and duplicate Pod IPs. Leaks and
 * unreadable blocks need coild's view of its node: coild exports those itself.
 *
 * Runs on every replica (its cache is synced on standbys too); alerts take `max by (kind)`.
 * Nothing is exported until the cache has synced: half a cache would show false orphans.
 *
 * Cost: one check runs on the event loop the reconcilers share — 100 ms for 100,000 blocks, about
 * 360 ms with 150,000 Pods as well (hack/bench/ipam-check.ts, on a loaded 2-core machine) — so
 * counts are computed at most once per `findingsRecomputeMs` (IpamOptions, 60 s); a scrape in between gets the
 * last ones. The alerts wait minutes (`for:`), so a minute's delay changes nothing they say.
 */
import { Gauge } from 'prom-client';
import { inject } from 'inversify';
import { Kinds } from '../api/v2/kinds.js';
import type { KindDescriptor } from '../runtime/kind.js';
import { API_FINDING_KINDS, checkIpam, countFindings, type IpamFacts, type PodFacts } from '../ipam/ipam-check.js';
import { blockFacts, nodeRef, podFacts, poolFacts, requestFacts } from '../api/v2/ipam-facts.js';
import { Cache } from '../runtime/cache.js';
import { IPAM_OPTIONS, type IpamOptions } from './options.js';
import { RunnableLoop } from '../runtime/decorators.js';
import { Metrics } from '../runtime/metrics.js';
import type { Runnable } from '../runtime/runnable.js';

/** Kinds whose findings need Pods. */
const POD_KINDS = new Set(['pod-ip-without-block', 'duplicate-pod-ip']);

@RunnableLoop({ name: 'ipam-findings-metrics', leaderOnly: false })
export class IpamFindingsMetrics implements Runnable {
  private last: { readonly atMs: number; readonly counts: Record<string, number> } | undefined;

  constructor(
    @inject(Cache) private readonly cache: Cache,
    @inject(Metrics) metrics: Metrics,
    @inject(IPAM_OPTIONS) private readonly options: IpamOptions,
  ) {
    // Declared here, before the cache starts; the IPAM reconcilers cache them anyway.
    for (const k of [Kinds.AddressPool, Kinds.AddressBlock, Kinds.Node, Kinds.BlockRequest] as KindDescriptor[]) cache.ensure(k);
    const self = this; // collect() is called with the gauge as `this`
    new Gauge({
      name: 'coil_controller_ipam_findings',
      help: 'IPAM inconsistencies found in the controller\'s cache, per kind of finding (the checks of kubectl coil ipam check)',
      labelNames: ['kind'],
      registers: [metrics.registry],
      collect() {
        this.reset();
        const counts = self.cachedCount(Date.now());
        for (const [kind, n] of Object.entries(counts ?? {})) this.set({ kind }, n);
      },
    });
  }

  /** Nothing to do but be constructed: the gauge computes when scraped. */
  run(signal: AbortSignal): Promise<void> {
    return new Promise((resolve) => (signal.aborted ? resolve() : signal.addEventListener('abort', () => resolve(), { once: true })));
  }

  /** {@link count}, reused for `findingsRecomputeMs`. */
  cachedCount(nowMs: number): Record<string, number> | undefined {
    if (this.last && nowMs - this.last.atMs < this.options.findingsRecomputeMs && nowMs >= this.last.atMs) return this.last.counts;
    const counts = this.count(nowMs);
    this.last = counts && { atMs: nowMs, counts };
    return counts;
  }

  /**
   * The counts at `nowMs`, per kind computable from the cache.
   * @returns undefined until the cache has synced, or when it lacks a kind the checks need
   */
  count(nowMs: number): Record<string, number> | undefined {
    const has = (k: KindDescriptor): boolean => this.cache.kinds().some((c) => c.group === k.group && c.plural === k.plural);
    if (!this.cache.hasSynced() || ![Kinds.AddressPool, Kinds.AddressBlock, Kinds.Node, Kinds.BlockRequest].every(has)) return undefined;
    const withPods = has(Kinds.Pod);
    const facts: IpamFacts = {
      nowMs,
      pools: this.cache.list(Kinds.AddressPool).map(poolFacts),
      blocks: this.cache.list(Kinds.AddressBlock).map(blockFacts),
      nodes: this.cache.list(Kinds.Node).map(nodeRef),
      requests: this.cache.list(Kinds.BlockRequest).map(requestFacts),
      ...(withPods && { pods: this.cache.list(Kinds.Pod).map(podFacts).filter((p): p is PodFacts => p !== undefined) }),
    };
    const all = countFindings(checkIpam(facts, this.options.findingThresholds));
    const out: Record<string, number> = {};
    for (const kind of API_FINDING_KINDS) if (withPods || !POD_KINDS.has(kind)) out[kind] = all[kind];
    return out;
  }
}
