import { randomUUID } from 'node:crypto';
import type { KubernetesObject } from '@kubernetes/client-node';
import type { Cache } from './cache.js';
import { PermanentError, TransientError, isStaleWrite, type Result } from './errors.js';
import type { EventRecorder } from './event-recorder.js';
import type { InformerEvent } from './informer.js';
import { keyOf, parseKey } from './kind.js';
import type { Logger } from './logging.js';
import type { Metrics } from './metrics.js';
import { resolveSetting, type Reconcile, type ReconcilerRegistration, type Request } from './registry.js';
import { WorkQueue } from './work-queue.js';

/** The settings a controller runs with: its registration's, bound ones read from the container. */
export interface ControllerSettings {
  /** ms between re-enqueues of every cached `for` object. */
  readonly resyncPeriodMs: number;
  /** Workers, at least 1. */
  readonly maxConcurrentReconciles: number;
}

/**
 * Reads the settings of `reg`, with their defaults (10 h resync, 1 worker); `get` resolves the
 * bound ones (the Manager passes its container's `get`).
 * @throws Error when a setting is bound and `get` is absent
 */
export function controllerSettings(reg: ReconcilerRegistration, get?: (token: symbol) => unknown): ControllerSettings {
  return {
    resyncPeriodMs: resolveSetting(reg.resyncPeriodMs ?? 36_000_000, get),
    maxConcurrentReconciles: Math.max(1, resolveSetting(reg.maxConcurrentReconciles ?? 1, get)),
  };
}

/**
 * Runs one reconciler: maps cache events to keys, feeds a {@link WorkQueue}, and drives
 * `maxConcurrentReconciles` workers that apply the retry contract of errors.ts.
 *
 * Event mapping (controller-runtime's handlers):
 * - `for` kind → the object's own key;
 * - `owns` kinds → the key of the controller ownerReference whose kind is the `for` kind
 *   (both the old and the new owner on MODIFIED, so a re-parented child updates both);
 * - `watches` → whatever keys `map` returns.
 *
 * Concurrency: workers are async loops on one thread; the queue guarantees one key is never held
 * by two workers, so a reconciler may assume exclusive ownership of its key while it runs.
 *
 * @see controller-runtime `pkg/internal/controller/controller.go`, `pkg/handler`
 */
export class Controller {
  readonly queue: WorkQueue;
  private readonly workers: Promise<void>[] = [];
  private readonly unsubscribe: (() => void)[] = [];
  private resyncTimer: NodeJS.Timeout | undefined;
  private readonly log: Logger;
  /** The reconciles' {@link ReconcileContext.signal}: aborted when they must stop. */
  private readonly abort = new AbortController();

  constructor(
    readonly registration: ReconcilerRegistration,
    private readonly reconciler: Reconcile,
    private readonly cache: Cache,
    private readonly metrics: Metrics,
    private readonly recorder: EventRecorder,
    log: Logger,
    readonly settings: ControllerSettings = controllerSettings(registration),
  ) {
    this.log = log.child({ controller: registration.name });
    this.queue = new WorkQueue({ ...registration.backoff, observer: metrics.queueObserver(registration.name) });
    metrics.initController(registration.name, this.concurrency());
    metrics.watchInProgress(registration.name, () => this.queue.unfinishedWork());
  }

  /** Subscribes to the cache and starts the workers. */
  start(): void {
    const reg = this.registration;
    this.unsubscribe.push(this.cache.onEvent(reg.for, (e) => this.queue.add(keyOf(e.object))));
    for (const owned of reg.owns ?? []) {
      this.unsubscribe.push(this.cache.onEvent(owned, (e) => this.enqueueOwners(e)));
    }
    for (const w of reg.watches ?? []) {
      this.unsubscribe.push(
        this.cache.onEvent(w.kind, (e) => {
          for (const req of w.map(e.object, this.cache)) this.queue.add(keyOf(req));
          if (e.old) for (const req of w.map(e.old, this.cache)) this.queue.add(keyOf(req));
        }),
      );
    }
    // Objects already in a synced cache produced their ADDED events before we subscribed.
    for (const obj of this.cache.list(reg.for)) this.queue.add(keyOf(obj));
    const resync = this.settings.resyncPeriodMs;
    this.resyncTimer = setInterval(() => {
      for (const obj of this.cache.list(reg.for)) this.queue.add(keyOf(obj));
    }, resync).unref();
    for (let i = 0; i < this.concurrency(); i++) this.workers.push(this.work());
    this.log.info({ workers: this.concurrency() }, 'controller started');
  }

  /**
   * Stops taking new keys and waits up to `timeoutMs` for in-flight reconciles to finish (the
   * drain); then aborts their context's signal and waits up to `abortGraceMs` more for them to
   * return. A deposed leader passes 0: its reconciles are aborted at once.
   * @returns true once no reconcile runs; false when one still runs after both waits
   */
  async stop(timeoutMs = 30_000, abortGraceMs = ABORT_GRACE_MS): Promise<boolean> {
    for (const u of this.unsubscribe.splice(0)) u();
    clearInterval(this.resyncTimer);
    this.queue.shutdown();
    const stopped = Promise.all(this.workers).then(() => true);
    if (await within(stopped, timeoutMs)) return true;
    this.log.warn({ timeoutMs, running: this.queue.inFlight() }, 'reconciles still running at the shutdown deadline; aborting them');
    this.abort.abort(new Error(`controller ${this.registration.name} is stopping`));
    if (await within(stopped, abortGraceMs)) return true;
    this.log.error({ abortGraceMs, running: this.queue.inFlight() }, 'reconciles still running after their signal was aborted');
    return false;
  }

  private concurrency(): number {
    return this.settings.maxConcurrentReconciles;
  }

  private enqueueOwners(e: InformerEvent<KubernetesObject>): void {
    const owner = this.registration.for;
    for (const obj of e.old ? [e.object, e.old] : [e.object]) {
      for (const ref of obj.metadata?.ownerReferences ?? []) {
        if (!ref.controller || ref.kind !== owner.kind || groupOf(ref.apiVersion) !== owner.group) continue;
        const ns = owner.namespaced ? obj.metadata?.namespace : undefined;
        this.queue.add(keyOf(ns ? { namespace: ns, name: ref.name } : { name: ref.name }));
      }
    }
  }

  private async work(): Promise<void> {
    for (;;) {
      const key = await this.queue.get();
      if (key === undefined) return;
      try {
        await this.reconcileKey(key);
      } finally {
        this.queue.done(key);
      }
    }
  }

  private async reconcileKey(key: string): Promise<void> {
    const name = this.registration.name;
    const reconcileID = randomUUID();
    const log = this.log.child({ object: key, reconcileID });
    const req: Request = parseKey(key);
    const attempt = this.queue.numRequeues(key);
    this.metrics.activeWorkers.inc({ controller: name });
    const endTimer = this.metrics.reconcileTime.startTimer({ controller: name });
    let result: Result;
    try {
      result = (await this.reconciler.reconcile(req, { attempt, reconcileID, log, signal: this.abort.signal })) ?? {};
    } catch (err) {
      if (isStaleWrite(err)) {
        // The cache was behind (errors.ts): not an error; try again once it may have caught up.
        this.metrics.reconcileTotal.inc({ controller: name, result: 'requeue' });
        const delay = this.queue.addRateLimited(key);
        log.debug({ err, attempt: attempt + 1, retryInMs: delay }, 'write refused on a stale resourceVersion; requeued');
        return;
      }
      this.metrics.reconcileErrors.inc({ controller: name });
      this.metrics.reconcileTotal.inc({ controller: name, result: 'error' });
      if (err instanceof PermanentError) {
        this.queue.forget(key);
        this.metrics.terminalReconcileErrors.inc({ controller: name });
        log.error({ err }, 'reconcile failed permanently; not retrying until the object changes');
        const obj = this.cache.get(this.registration.for, key);
        if (obj) this.recorder.event(obj, 'Warning', 'ReconcileFailed', err.message);
      } else {
        const delay = this.queue.addRateLimited(key, err instanceof TransientError ? err.delayMs : undefined);
        log.warn({ err, attempt: attempt + 1, retryInMs: delay }, 'reconcile failed; retrying');
      }
      return;
    } finally {
      endTimer();
      this.metrics.activeWorkers.dec({ controller: name });
    }
    this.queue.forget(key);
    if (result.requeueAfterMs !== undefined && result.requeueAfterMs > 0) {
      this.metrics.reconcileTotal.inc({ controller: name, result: 'requeue_after' });
      this.queue.addAfter(key, result.requeueAfterMs);
    } else {
      this.metrics.reconcileTotal.inc({ controller: name, result: 'success' });
    }
    log.debug({ requeueAfterMs: result.requeueAfterMs }, 'reconciled');
  }
}

/**
 * How long {@link Controller.stop} waits for aborted reconciles to return: one that checks its
 * signal between writes returns at its next check, well within this.
 */
export const ABORT_GRACE_MS = 5_000;

/** Whether `done` settles within `ms` (a timer of 0 still lets an already settled one win). */
async function within(done: Promise<boolean>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<boolean>((r) => (timer = setTimeout(() => r(false), ms)));
  try {
    return await Promise.race([done, late]);
  } finally {
    clearTimeout(timer);
  }
}

function groupOf(apiVersion: string): string {
  return apiVersion.includes('/') ? apiVersion.slice(0, apiVersion.indexOf('/')) : '';
}
