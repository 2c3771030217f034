import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { QueueObserver } from './work-queue.js';

/** controller-runtime's `controller_runtime_reconcile_time_seconds` buckets, in seconds. */
const RECONCILE_BUCKETS = [
  0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0,
  3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60,
];
/** client-go workqueue buckets: `ExponentialBuckets(1e-8, 10, 12)`, 10 ns … 1000 s. */
const QUEUE_BUCKETS = Array.from({ length: 12 }, (_, i) => Number((1e-8 * 10 ** i).toPrecision(1)));

/**
 * Every metric of one process, registered on a prom-client {@link Registry} instance owned here
 * (never the global default registry: two Managers in one test process must not collide, and
 * nothing is registered at import time).
 *
 * Names, labels and buckets are controller-runtime's and client-go's, so existing dashboards and
 * alerts work unchanged: `controller_runtime_reconcile_total{controller,result}`,
 * `…_reconcile_errors_total`, `…_terminal_reconcile_errors_total`, `…_reconcile_time_seconds`,
 * `…_max_concurrent_reconciles`, `…_active_workers`, `workqueue_{depth,adds_total,
 * queue_duration_seconds,work_duration_seconds,retries_total}{name,controller}`,
 * `workqueue_unfinished_work_seconds`, `workqueue_longest_running_processor_seconds`,
 * `leader_election_master_status{name}`, `controller_runtime_webhook_{requests_total,
 * latency_seconds,requests_in_flight}`, `certwatcher_read_certificate{,_errors}_total`, plus
 * prom-client's `process_*`/`nodejs_*` defaults.
 *
 * @see docs/design.md#metric-names, controller-runtime `pkg/internal/controller/metrics`
 */
export class Metrics {
  readonly registry = new Registry();
  readonly reconcileTotal: Counter<'controller' | 'result'>;
  readonly reconcileErrors: Counter<'controller'>;
  readonly terminalReconcileErrors: Counter<'controller'>;
  readonly reconcileTime: Histogram<'controller'>;
  readonly maxConcurrentReconciles: Gauge<'controller'>;
  readonly activeWorkers: Gauge<'controller'>;
  readonly queueDepth: Gauge<'name' | 'controller'>;
  readonly queueAdds: Counter<'name' | 'controller'>;
  readonly queueDuration: Histogram<'name' | 'controller'>;
  readonly workDuration: Histogram<'name' | 'controller'>;
  readonly queueRetries: Counter<'name' | 'controller'>;
  readonly unfinishedWork: Gauge<'name' | 'controller'>;
  readonly longestRunning: Gauge<'name' | 'controller'>;
  /** Per controller: reads the queue's in-progress ages at scrape time. */
  private readonly inProgress = new Map<string, () => { totalMs: number; longestMs: number }>();
  readonly leaderStatus: Gauge<'name'>;
  readonly webhookRequests: Counter<'webhook' | 'code'>;
  readonly webhookLatency: Histogram<'webhook'>;
  readonly webhookInFlight: Gauge<'webhook'>;
  readonly certReads: Counter;
  readonly certReadErrors: Counter;

  /** @param opts.defaultMetrics also collect prom-client's `process_*`/`nodejs_*` (default true) */
  constructor(opts: { defaultMetrics?: boolean } = {}) {
    const registers = [this.registry];
    this.reconcileTotal = new Counter({ name: 'controller_runtime_reconcile_total', help: 'Total number of reconciliations per controller', labelNames: ['controller', 'result'], registers });
    this.reconcileErrors = new Counter({ name: 'controller_runtime_reconcile_errors_total', help: 'Total number of reconciliation errors per controller', labelNames: ['controller'], registers });
    this.terminalReconcileErrors = new Counter({ name: 'controller_runtime_terminal_reconcile_errors_total', help: 'Total number of terminal reconciliation errors per controller', labelNames: ['controller'], registers });
    this.reconcileTime = new Histogram({ name: 'controller_runtime_reconcile_time_seconds', help: 'Length of time per reconciliation per controller', labelNames: ['controller'], buckets: RECONCILE_BUCKETS, registers });
    this.maxConcurrentReconciles = new Gauge({ name: 'controller_runtime_max_concurrent_reconciles', help: 'Maximum number of concurrent reconciles per controller', labelNames: ['controller'], registers });
    this.activeWorkers = new Gauge({ name: 'controller_runtime_active_workers', help: 'Number of currently used workers per controller', labelNames: ['controller'], registers });
    this.queueDepth = new Gauge({ name: 'workqueue_depth', help: 'Current depth of workqueue', labelNames: ['name', 'controller'], registers });
    this.queueAdds = new Counter({ name: 'workqueue_adds_total', help: 'Total number of adds handled by workqueue', labelNames: ['name', 'controller'], registers });
    this.queueDuration = new Histogram({ name: 'workqueue_queue_duration_seconds', help: 'How long in seconds an item stays in workqueue before being requested', labelNames: ['name', 'controller'], buckets: QUEUE_BUCKETS, registers });
    this.workDuration = new Histogram({ name: 'workqueue_work_duration_seconds', help: 'How long in seconds processing an item from workqueue takes', labelNames: ['name', 'controller'], buckets: QUEUE_BUCKETS, registers });
    this.queueRetries = new Counter({ name: 'workqueue_retries_total', help: 'Total number of retries handled by workqueue', labelNames: ['name', 'controller'], registers });
    const inProgress = this.inProgress;
    // Computed when scraped (prom-client calls collect()), instead of client-go's 500 ms ticker.
    this.unfinishedWork = new Gauge({
      name: 'workqueue_unfinished_work_seconds',
      help: 'How many seconds of work has been done that is in progress and has not been observed by work_duration. Large values indicate stuck threads.',
      labelNames: ['name', 'controller'],
      registers,
      collect() {
        for (const [name, read] of inProgress) this.set({ name, controller: name }, read().totalMs / 1000);
      },
    });
    this.longestRunning = new Gauge({
      name: 'workqueue_longest_running_processor_seconds',
      help: 'How many seconds has the longest running processor for workqueue been running.',
      labelNames: ['name', 'controller'],
      registers,
      collect() {
        for (const [name, read] of inProgress) this.set({ name, controller: name }, read().longestMs / 1000);
      },
    });
    this.leaderStatus = new Gauge({ name: 'leader_election_master_status', help: 'Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master', labelNames: ['name'], registers });
    this.webhookRequests = new Counter({ name: 'controller_runtime_webhook_requests_total', help: 'Total number of admission requests by HTTP status code', labelNames: ['webhook', 'code'], registers });
    this.webhookLatency = new Histogram({ name: 'controller_runtime_webhook_latency_seconds', help: 'Histogram of the latency of processing admission requests', labelNames: ['webhook'], registers });
    this.webhookInFlight = new Gauge({ name: 'controller_runtime_webhook_requests_in_flight', help: 'Current number of admission requests being served', labelNames: ['webhook'], registers });
    this.certReads = new Counter({ name: 'certwatcher_read_certificate_total', help: 'Total number of certificate reads', registers });
    this.certReadErrors = new Counter({ name: 'certwatcher_read_certificate_errors_total', help: 'Total number of certificate read errors', registers });
    if (opts.defaultMetrics ?? true) collectDefaultMetrics({ register: this.registry });
  }

  /** Zero-initialises a controller's series, so dashboards show 0 rather than "no data" before the first reconcile. */
  initController(name: string, maxConcurrent: number): void {
    this.maxConcurrentReconciles.set({ controller: name }, maxConcurrent);
    this.activeWorkers.set({ controller: name }, 0);
    for (const result of ['success', 'error', 'requeue', 'requeue_after'] as const) this.reconcileTotal.inc({ controller: name, result }, 0);
    this.reconcileErrors.inc({ controller: name }, 0);
    this.terminalReconcileErrors.inc({ controller: name }, 0);
    this.queueRetries.inc({ name, controller: name }, 0);
    this.queueAdds.inc({ name, controller: name }, 0);
  }

  /** Exposes the in-progress ages of controller `name`'s queue as the unfinished-work gauges. */
  watchInProgress(name: string, read: () => { totalMs: number; longestMs: number }): void {
    this.inProgress.set(name, read);
  }

  /** The work-queue observer of controller `name` (both `name` and `controller` labels carry it, as in controller-runtime). */
  queueObserver(name: string): QueueObserver {
    const l = { name, controller: name };
    return {
      depth: (n) => this.queueDepth.set(l, n),
      added: () => this.queueAdds.inc(l),
      queueLatencyMs: (ms) => this.queueDuration.observe(l, ms / 1000),
      workDurationMs: (ms) => this.workDuration.observe(l, ms / 1000),
      retried: () => this.queueRetries.inc(l),
    };
  }
}
