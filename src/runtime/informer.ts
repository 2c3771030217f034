import type { KubernetesObject } from '@kubernetes/client-node';
import type Logger from 'bunyan';
import type { ApiTransport } from './api-transport.js';
import { sleep } from './clock.js';
import { ApiError, isGone } from './errors.js';
import { apiVersionOf, collectionPath, keyOf, kindId, type KindDescriptor } from './kind.js';

/** What happened to an object, as seen by the informer (bookmarks and errors never reach handlers). */
export interface InformerEvent<T extends KubernetesObject> {
  readonly type: 'ADDED' | 'MODIFIED' | 'DELETED';
  /** The new state; for DELETED, the last state the informer knew. Frozen: clone before changing. */
  readonly object: Readonly<T>;
  /** The previous state for MODIFIED (and for DELETED found by a relist). */
  readonly old?: Readonly<T>;
}

/** Which objects one informer holds (server-side filters) and how it recovers. */
export interface InformerOptions {
  /** Only this namespace (namespaced kinds); all namespaces when absent. */
  readonly namespace?: string;
  readonly labelSelector?: string;
  readonly fieldSelector?: string;
  /**
   * Full relist (diffed against the store) this often, default 30 min: guards against watches
   * that stay open but go silent (kubernetes-client/javascript #958, #596).
   */
  readonly relistPeriodMs?: number;
  /** Abort a watch that delivered nothing, not even a bookmark, for this long. Default 300 000 ms. */
  readonly watchdogMs?: number;
  /** First retry delay after a failed list/watch, doubled up to `maxBackoffMs`, ±50 % jitter. Default 800 ms (kube-rs). */
  readonly initialBackoffMs?: number;
  /** Default 30 000 ms (kube-rs, client-node). */
  readonly maxBackoffMs?: number;
  /**
   * Rewrites each object before it is stored (client-go `SetTransform`), e.g. {@link stripManagedFields}
   * to keep 100,000 cached AddressBlocks within the controller's memory budget. Must return an
   * object with the same key. Default: none.
   */
  readonly transform?: (obj: KubernetesObject) => KubernetesObject;
}

/** Drops `metadata.managedFields` (a third of a small object's size; reconcilers never read it). */
export function stripManagedFields<T extends KubernetesObject>(obj: T): T {
  if (obj.metadata?.managedFields) delete obj.metadata.managedFields;
  return obj;
}

/** Derives the index values of one object (e.g. the node label of an AddressBlock). */
export type IndexFunc<T extends KubernetesObject> = (obj: Readonly<T>) => readonly string[];

type WatchEnd = 'closed' | 'relist';

/** Why the informer itself ended a watch: relist requested or stopping, watchdog, 410 Gone. */
class WatchEnded extends Error {
  constructor(readonly why: 'relist' | 'watchdog' | 'gone') {
    super(`watch ended: ${why}`);
  }
}

/**
 * A reflector and its store for one kind: list, then watch from the list's resourceVersion with
 * bookmarks; on a normal end resume from the last resourceVersion; on 410 Gone, a watchdog
 * timeout or the periodic relist, list again and diff against the store, so objects deleted while
 * the watch was down are reported as DELETED. Any error (connection refused, 5xx, 403) is logged
 * and retried with exponential backoff — the loop only ends at {@link stop}, never the process.
 *
 * This replaces client-node's `makeInformer`, which stops on any error other than 410, never
 * resyncs and never asks for bookmarks (docs/design.md#our-informer-not-client-nodes), and its
 * `Watch`, whose connection cannot be cancelled before response headers arrive.
 *
 * Concurrency: one loop per informer; handlers run synchronously inside it and must only enqueue.
 * Stored objects are deep-frozen so a handler or reconciler cannot corrupt the cache.
 *
 * @see client-go `tools/cache/reflector.go`, kube-rs `runtime/src/watcher.rs`
 */
export class Informer<T extends KubernetesObject = KubernetesObject> {
  private readonly store = new Map<string, Readonly<T>>();
  private readonly indexers = new Map<string, IndexFunc<T>>();
  /**
   * Index name → value → the key holding it, or a Set when several do: most index values name one
   * object (a Pod's address), and a Set per value would cost ~150 bytes more each (150,000 Pods).
   * A value no object yields any more is dropped.
   */
  private readonly indices = new Map<string, Map<string, string | Set<string>>>();
  private readonly handlers = new Set<(e: InformerEvent<T>) => void>();
  private readonly syncWaiters: (() => void)[] = [];
  private resourceVersion = '';
  private synced = false;
  private running: Promise<void> | undefined;
  private readonly stopping = new AbortController();
  /** Ends the current watch at once (also while it is still connecting) and makes the loop relist. */
  private cancelWatch: (() => void) | undefined;
  private relistDue = false;
  private relistTimer: NodeJS.Timeout | undefined;
  /** Ends the backoff wait in progress, if any ({@link retryNow}). */
  private endBackoff: (() => void) | undefined;

  constructor(
    readonly kind: KindDescriptor<T>,
    private readonly transport: ApiTransport,
    private readonly log: Logger,
    readonly options: InformerOptions = {},
  ) {}

  /** Starts the list/watch loop in the background; idempotent. */
  start(): void {
    if (this.running || this.stopping.signal.aborted) return;
    const period = this.options.relistPeriodMs ?? 30 * 60_000;
    this.relistTimer = setInterval(() => this.requestRelist(), period).unref();
    this.running = this.run();
  }

  /** Stops the loop and aborts the open watch; the store keeps its last content. */
  async stop(): Promise<void> {
    this.stopping.abort();
    clearInterval(this.relistTimer);
    this.cancelWatch?.();
    await this.running;
  }

  /** True once the first list has been stored (reads before that may miss objects). */
  hasSynced(): boolean {
    return this.synced;
  }

  /** Resolves when {@link hasSynced} becomes true. */
  waitForSync(): Promise<void> {
    return this.synced ? Promise.resolve() : new Promise((r) => this.syncWaiters.push(r));
  }

  /** Subscribes to changes; the returned function unsubscribes. */
  onEvent(handler: (e: InformerEvent<T>) => void): () => void {
    this.handlers.add(handler);
    return () => this.handlers.delete(handler);
  }

  /** Object by key (`ns/name` or `name`), as last seen; may lag the server. */
  get(key: string): Readonly<T> | undefined {
    return this.store.get(key);
  }

  /** All stored objects. */
  list(): Readonly<T>[] {
    return [...this.store.values()];
  }

  /** Adds (or replaces) an index and builds it over the current store. */
  addIndex(name: string, fn: IndexFunc<T>): void {
    this.indexers.set(name, fn);
    this.indices.set(name, new Map());
    for (const [key, obj] of this.store) this.index(key, undefined, obj);
  }

  /** Objects whose index `name` yields `value`. @throws Error for an unknown index */
  byIndex(name: string, value: string): Readonly<T>[] {
    const idx = this.indices.get(name);
    if (!idx) throw new Error(`no index ${name} on ${kindId(this.kind)}`);
    const keys = idx.get(value);
    return (keys === undefined ? [] : typeof keys === 'string' ? [keys] : [...keys]).map((k) => this.store.get(k)!).filter(Boolean);
  }

  /**
   * Ends a backoff wait in progress, so the loop lists again now. For a reader that waits on this
   * cache for something it needs at once (coild's ADD waiting for its new AddressBlock): after an
   * API server or etcd outage the doubling has often grown to seconds (up to `maxBackoffMs`), and
   * the server is usually back well before it runs out. No effect while listing or watching.
   * @returns true when a backoff was cut short
   */
  retryNow(): boolean {
    const end = this.endBackoff;
    if (end === undefined) return false;
    this.endBackoff = undefined;
    end();
    return true;
  }

  /** True while the loop waits out a backoff after a failed list or watch. */
  get backingOff(): boolean {
    return this.endBackoff !== undefined;
  }

  /** Makes the loop list again after the current watch (used by the periodic relist). */
  requestRelist(): void {
    this.relistDue = true;
    this.cancelWatch?.();
  }

  private async run(): Promise<void> {
    let failures = 0;
    const stop = this.stopping.signal;
    while (!stop.aborted) {
      try {
        await this.relist();
        for (;;) {
          // The backoff starts again once the server has accepted a watch: the outage that ends
          // this watch (an apiserver or etcd restart hours later) is a new one, retried from the
          // initial delay, not from where the last outage left the doubling. Not on a good list
          // alone: a server that lists fine but refuses every watch (RBAC without `watch`) must
          // not be relisted in a hot loop.
          const end = await this.watch(() => (failures = 0));
          // 'closed': the server ended the watch (timeoutSeconds); resume from the last resourceVersion.
          if (stop.aborted || end !== 'closed') break;
        }
      } catch (e) {
        if (stop.aborted) break;
        failures++;
        const base = Math.min(this.options.maxBackoffMs ?? 30_000, (this.options.initialBackoffMs ?? 800) * 2 ** (failures - 1));
        const delay = Math.round(base * (0.5 + Math.random()));
        this.log.warn({ kind: kindId(this.kind), err: e, retryInMs: delay, failures }, 'list/watch failed; retrying');
        const cut = new AbortController();
        this.endBackoff = () => cut.abort();
        try {
          await sleep(delay, AbortSignal.any([stop, cut.signal]));
        } finally {
          this.endBackoff = undefined;
        }
      }
    }
  }

  private async relist(): Promise<void> {
    this.relistDue = false;
    const fresh = new Map<string, T | Readonly<T>>();
    let cont: string | undefined;
    let rv = '';
    do {
      const page = await this.transport.request<{ items: T[]; metadata: { resourceVersion?: string; continue?: string } }>({
        method: 'GET',
        path: collectionPath(this.kind, this.options.namespace),
        query: { labelSelector: this.options.labelSelector, fieldSelector: this.options.fieldSelector, limit: 500, continue: cont },
        signal: this.stopping.signal,
      });
      // Transformed page by page, so a large list never holds every raw object at once. An object
      // whose resourceVersion has not moved since we stored it is the stored one: reusing it means
      // a relist after a 410 allocates pages, not a second copy of the cache (100,000 blocks:
      // tens of MB the heap would otherwise need, for a moment, on top of the cache).
      for (const item of page.items) {
        const key = keyOf(item);
        const known = this.store.get(key);
        const rv = item.metadata?.resourceVersion;
        if (known !== undefined && rv !== undefined && known.metadata?.resourceVersion === rv) fresh.set(key, known);
        // Items of a list carry no apiVersion/kind; restore them so objects look like watch events.
        else fresh.set(key, this.transformed({ ...item, apiVersion: item.apiVersion ?? apiVersionOf(this.kind), kind: item.kind ?? this.kind.kind }));
      }
      rv = page.metadata.resourceVersion ?? rv;
      cont = page.metadata.continue || undefined;
    } while (cont);
    for (const [key, old] of [...this.store]) if (!fresh.has(key)) this.remove(key, old, true);
    for (const obj of fresh.values()) this.upsert(obj as T);
    this.resourceVersion = rv;
    if (!this.synced) {
      this.synced = true;
      for (const w of this.syncWaiters.splice(0)) w();
    }
  }

  /** One watch from the current resourceVersion; `onOpen` once the server has accepted it. */
  private async watch(onOpen: () => void): Promise<WatchEnd> {
    if (this.relistDue) return 'relist';
    const watchdogMs = this.options.watchdogMs ?? 300_000;
    const abort = new AbortController();
    const cancel = (): void => abort.abort(new WatchEnded('relist'));
    this.cancelWatch = cancel;
    let timer: NodeJS.Timeout | undefined;
    const feed = (): void => {
      clearTimeout(timer);
      // Watchdog: nothing arrived, not even a bookmark; the connection may be dead without an error.
      timer = setTimeout(() => abort.abort(new WatchEnded('watchdog')), watchdogMs);
    };
    let end: WatchEnd = 'closed';
    const onEvent = (type: string, raw: unknown): void => {
      const obj = raw as T & { code?: number; message?: string; reason?: string };
      if (type === 'ADDED' || type === 'MODIFIED') this.upsert(this.transformed(obj));
      else if (type === 'DELETED') this.remove(keyOf(obj), obj, false);
      else if (type === 'BOOKMARK') this.resourceVersion = obj.metadata?.resourceVersion ?? this.resourceVersion;
      else if (type === 'ERROR') {
        if (obj.code !== 410) throw new ApiError(obj.code ?? 0, obj.reason ?? '', `watch ${kindId(this.kind)}: ${obj.message ?? 'error event'}`);
        end = 'relist';
        abort.abort(new WatchEnded('gone'));
      }
    };
    feed();
    try {
      await this.transport.watch(
        {
          path: collectionPath(this.kind, this.options.namespace),
          query: {
            resourceVersion: this.resourceVersion,
            allowWatchBookmarks: true,
            // Below the watchdog, so a healthy server always ends the watch first.
            timeoutSeconds: Math.max(1, Math.floor((watchdogMs / 1000) * (0.5 + Math.random() * 0.3))),
            labelSelector: this.options.labelSelector,
            fieldSelector: this.options.fieldSelector,
          },
        },
        abort.signal,
        onEvent,
        feed,
        onOpen,
      );
      return this.stopping.signal.aborted || this.relistDue ? 'relist' : end;
    } catch (err) {
      if (err instanceof WatchEnded || isGone(err)) return 'relist';
      throw err;
    } finally {
      clearTimeout(timer);
      if (this.cancelWatch === cancel) this.cancelWatch = undefined;
    }
  }

  private transformed(raw: T): T {
    return (this.options.transform ? this.options.transform(raw) : raw) as T;
  }

  private upsert(obj: T): void {
    const key = keyOf(obj);
    const old = this.store.get(key);
    if (obj.metadata?.resourceVersion) this.resourceVersion = obj.metadata.resourceVersion;
    if (old && old.metadata?.resourceVersion === obj.metadata?.resourceVersion) return;
    const frozen = deepFreeze(obj);
    this.store.set(key, frozen);
    this.index(key, old, frozen);
    this.emit(old ? { type: 'MODIFIED', object: frozen, old } : { type: 'ADDED', object: frozen });
  }

  private remove(key: string, last: T | Readonly<T>, fromRelist: boolean): void {
    const old = this.store.get(key);
    if (!old && fromRelist) return;
    this.store.delete(key);
    this.index(key, old, undefined);
    const object = deepFreeze(fromRelist ? (old ?? last) : last);
    this.emit(old && fromRelist ? { type: 'DELETED', object, old } : { type: 'DELETED', object });
  }

  private index(key: string, old: Readonly<T> | undefined, obj: Readonly<T> | undefined): void {
    for (const [name, fn] of this.indexers) {
      const idx = this.indices.get(name)!;
      for (const v of old ? fn(old) : []) {
        const keys = idx.get(v);
        if (keys === key) idx.delete(v);
        else if (typeof keys === 'object') {
          keys.delete(key);
          if (keys.size <= 1) {
            const [only] = keys;
            if (only === undefined) idx.delete(v);
            else idx.set(v, only);
          }
        }
      }
      for (const v of obj ? fn(obj) : []) {
        const keys = idx.get(v);
        if (keys === undefined) idx.set(v, key);
        else if (typeof keys === 'string') {
          if (keys !== key) idx.set(v, new Set([keys, key]));
        } else keys.add(key);
      }
    }
  }

  private emit(e: InformerEvent<T>): void {
    for (const h of this.handlers) {
      try {
        h(e);
      } catch (err) {
        this.log.error({ err, kind: kindId(this.kind) }, 'informer event handler threw');
      }
    }
  }
}

function deepFreeze<O>(o: O): Readonly<O> {
  if (o && typeof o === 'object' && !Object.isFrozen(o)) {
    Object.freeze(o);
    for (const v of Object.values(o)) deepFreeze(v);
  }
  return o;
}
