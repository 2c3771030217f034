import type { KubernetesObject } from '@kubernetes/client-node';
import type Logger from 'bunyan';
import type { ApiTransport } from './api-transport.js';
import { Informer, type IndexFunc, type InformerEvent, type InformerOptions } from './informer.js';
import { keyOf, kindId, type KindDescriptor, type ObjectKey } from './kind.js';

/** Per-kind cache settings: server-side selectors and recovery knobs (controller-runtime's `ByObject`). */
export type CacheKindOptions = InformerOptions;

/** Filters of {@link Cache.list}, applied to cached objects. */
export interface CacheListOptions {
  readonly namespace?: string;
  /** Equality-based label match: every pair must be present. */
  readonly labels?: Readonly<Record<string, string>>;
}

/**
 * The informer cache: one {@link Informer} per kind, reads served from memory, indexes, and
 * "synced" tracking for readiness. Reconcilers read here, never from the API server, so a burst of
 * events costs no API calls; the trade-off is staleness, which level-based reconciling tolerates
 * (a write based on a stale read fails its resourceVersion precondition and is retried).
 *
 * Kinds must be declared (by the Manager from `for`/`owns`/`watches`/`reads`, or with
 * {@link ensure}) before reads; reading an undeclared kind throws instead of silently returning
 * nothing, which would look like "object absent".
 *
 * Returned objects are frozen; clone (`structuredClone`) before building a write from them.
 *
 * @see controller-runtime `pkg/cache`, kube-rs `reflector::Store` (readers may be stale)
 */
export class Cache {
  private readonly informers = new Map<string, Informer>();
  private started = false;

  constructor(
    private readonly transport: ApiTransport,
    private readonly log: Logger,
    /** Defaults for every informer; a kind's own options override them. */
    private readonly defaults: InformerOptions = {},
  ) {}

  /**
   * Declares `kind` (once; later calls return the same informer and must not change selectors).
   * Starts its informer at once if the cache already runs.
   */
  ensure<T extends KubernetesObject>(kind: KindDescriptor<T>, options: CacheKindOptions = {}): Informer<T> {
    const id = kindId(kind);
    let inf = this.informers.get(id) as Informer<T> | undefined;
    if (!inf) {
      inf = new Informer<T>(kind, this.transport, this.log.child({ informer: id }), { ...this.defaults, ...options });
      this.informers.set(id, inf as unknown as Informer);
      if (this.started) inf.start();
    }
    return inf;
  }

  /** The informer of a declared kind. @throws Error when `kind` was never declared */
  informer<T extends KubernetesObject>(kind: KindDescriptor<T>): Informer<T> {
    const inf = this.informers.get(kindId(kind));
    if (!inf) throw new Error(`${kindId(kind)} is not cached: declare it in for/owns/watches/reads or Cache.ensure()`);
    return inf as unknown as Informer<T>;
  }

  /** All declared kinds. */
  kinds(): KindDescriptor[] {
    return [...this.informers.values()].map((i) => i.kind);
  }

  /** Object by key; `undefined` when absent from the cache. */
  get<T extends KubernetesObject>(kind: KindDescriptor<T>, key: ObjectKey | string): Readonly<T> | undefined {
    return this.informer(kind).get(typeof key === 'string' ? key : keyOf(key));
  }

  /** Cached objects of `kind`, optionally filtered by namespace and labels. */
  list<T extends KubernetesObject>(kind: KindDescriptor<T>, opts: CacheListOptions = {}): Readonly<T>[] {
    return this.informer(kind)
      .list()
      .filter((o) => opts.namespace === undefined || o.metadata?.namespace === opts.namespace)
      .filter((o) => Object.entries(opts.labels ?? {}).every(([k, v]) => o.metadata?.labels?.[k] === v));
  }

  /**
   * Registers an index, e.g. AddressBlocks by node label. Declares the kind if needed.
   * @see controller-runtime `FieldIndexer.IndexField`
   */
  addIndex<T extends KubernetesObject>(kind: KindDescriptor<T>, name: string, fn: IndexFunc<T>): void {
    this.ensure(kind).addIndex(name, fn);
  }

  /** Objects whose index `name` yields `value`. @throws Error for an unknown kind or index */
  byIndex<T extends KubernetesObject>(kind: KindDescriptor<T>, name: string, value: string): Readonly<T>[] {
    return this.informer(kind).byIndex(name, value);
  }

  /** Subscribes to changes of `kind`; returns the unsubscribe function. */
  onEvent<T extends KubernetesObject>(kind: KindDescriptor<T>, handler: (e: InformerEvent<T>) => void): () => void {
    return this.ensure(kind).onEvent(handler);
  }

  /**
   * Cuts short the backoff of `kind`'s informer, if it waits one, so it lists again now
   * ({@link Informer.retryNow}). @returns true when it was backing off
   * @throws Error when `kind` was never declared
   */
  retryNow<T extends KubernetesObject>(kind: KindDescriptor<T>): boolean {
    return this.informer(kind).retryNow();
  }

  /** Starts every declared informer (and any declared later). */
  start(): void {
    this.started = true;
    for (const inf of this.informers.values()) inf.start();
  }

  /** Stops every informer. */
  async stop(): Promise<void> {
    await Promise.all([...this.informers.values()].map((i) => i.stop()));
  }

  /** True when every declared informer has completed its first list. */
  hasSynced(): boolean {
    return [...this.informers.values()].every((i) => i.hasSynced());
  }

  /**
   * Waits until {@link hasSynced}. @throws Error naming the unsynced kinds after `timeoutMs`
   * (controller-runtime's `CacheSyncTimeout`, default 120 000 ms)
   */
  async waitForSync(timeoutMs = 120_000): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        const missing = [...this.informers.values()].filter((i) => !i.hasSynced()).map((i) => kindId(i.kind));
        reject(new Error(`cache not synced after ${timeoutMs} ms: ${missing.join(', ')}`));
      }, timeoutMs);
    });
    try {
      await Promise.race([Promise.all([...this.informers.values()].map((i) => i.waitForSync())), timeout]);
    } finally {
      clearTimeout(timer);
    }
  }
}
