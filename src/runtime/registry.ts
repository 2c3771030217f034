import type { KubernetesObject } from '@kubernetes/client-node';
import type { Newable } from 'inversify';
import type { FieldError } from '../api/v2/field-error.js';
import type { Cache } from './cache.js';
import type { Result } from './errors.js';
import type { IndexFunc } from './informer.js';
import type { KindDescriptor, ObjectKey } from './kind.js';
import type { Logger } from './logging.js';
import type { Runnable, RunnableOptions } from './runnable.js';

/** What a reconciler is asked to reconcile: a key, never the event (level-based). */
export interface Request extends ObjectKey {}

/** Per-reconcile context; deliberately without the triggering event (kube-rs `ReconcileReason` is hidden too). */
export interface ReconcileContext {
  /** Consecutive failed attempts of this key before this one (0 on a first try). */
  readonly attempt: number;
  /** UUID of this reconcile, also in every log line of `log`. */
  readonly reconcileID: string;
  /** Child logger with `controller`, `object` and `reconcileID` fields. */
  readonly log: Logger;
  /**
   * Aborted when this reconcile must stop: its controller is stopping and the drain deadline
   * passed, or the leader lost its Lease. Check it between writes (`signal.throwIfAborted()`) and
   * pass it to long waits; the Lease is released only once every leader-only reconcile returned.
   */
  readonly signal: AbortSignal;
}

/** The reconciler contract. @see errors.ts for the retry contract */
export interface Reconcile {
  reconcile(req: Request, ctx: ReconcileContext): Promise<Result>;
}

/** An extra watch: objects of `kind` map to keys of the reconciled kind. */
export interface WatchSpec<T extends KubernetesObject = KubernetesObject> {
  readonly kind: KindDescriptor<T>;
  /**
   * Keys of the `for` kind to reconcile when `obj` changes (e.g. a BlockRequest from an AddressBlock's
   * label). `cache` lets a map look up related objects (e.g. the AddressBlocks of a deleted Node by
   * index), as controller-runtime map funcs use the client captured at setup.
   */
  readonly map: (obj: Readonly<T>, cache: Cache) => readonly Request[];
}

/**
 * Builds a {@link WatchSpec} with `map` typed by the kind (an object literal in `watches: [...]`
 * would type `obj` as `any`, because option arrays accept every kind).
 * @example watches: [watchKind(AddressBlock, (b) => [{ name: b.metadata!.labels![LABEL_REQUEST]! }])]
 */
export function watchKind<T extends KubernetesObject>(kind: KindDescriptor<T>, map: (obj: Readonly<T>) => readonly Request[]): WatchSpec<T> {
  return { kind, map };
}

/** An index the reconciler needs on the cache. */
export interface IndexSpec<T extends KubernetesObject = KubernetesObject> {
  readonly kind: KindDescriptor<T>;
  readonly name: string;
  readonly fn: IndexFunc<T>;
}

/** Builds an {@link IndexSpec} with `fn` typed by the kind (see {@link watchKind}). */
export function indexKind<T extends KubernetesObject>(kind: KindDescriptor<T>, name: string, fn: IndexFunc<T>): IndexSpec<T> {
  return { kind, name, fn };
}

/** One RBAC rule (emitted into the chart by hack/, as controller-gen does from markers). */
export interface RbacRule {
  readonly group: string;
  readonly resources: readonly string[];
  readonly verbs: readonly string[];
  /** Limits the rule to these object names (e.g. `bind` on one ClusterRole). */
  readonly resourceNames?: readonly string[];
}

/**
 * A reconciler setting whose value the program supplies at run time: `read` picks it from the
 * object bound in the Manager's container under `token` (e.g. the IPAM options built from
 * `--gc-interval`). The Manager reads it when it builds the controller, so the flag stays the one
 * source of the value; nothing copies the registration to change it. Build with {@link fromBinding}.
 */
export interface BoundSetting<T> {
  readonly token: symbol;
  readonly read: (bound: never) => T;
}

/** A setting fixed in the decorator, or one the program supplies ({@link BoundSetting}). */
export type Setting<T> = T | BoundSetting<T>;

/**
 * A {@link BoundSetting} typed by the bound object.
 * @example resyncPeriodMs: fromBinding(IPAM_OPTIONS, (o: IpamOptions) => o.gcIntervalMs)
 */
export function fromBinding<O, T>(token: symbol, read: (bound: O) => T): BoundSetting<T> {
  return { token, read: read as (bound: never) => T };
}

/**
 * The value of `setting`; a bound one is read from `get(token)` (the container's binding).
 * @throws Error for a bound setting when `get` is absent or the token is unbound
 */
export function resolveSetting<T extends number | string | boolean>(setting: Setting<T>, get?: (token: symbol) => unknown): T {
  if (typeof setting !== 'object') return setting;
  if (!get) throw new Error(`setting bound to ${String(setting.token)} needs a container to read it from`);
  return setting.read(get(setting.token) as never);
}

/**
 * Options of `@Reconciler`. `watches` and `indexes` take `any` kinds because their `map`/`fn`
 * parameters make WatchSpec/IndexSpec contravariant; build them with {@link watchKind} /
 * {@link indexKind} to keep the types.
 */
export interface ReconcilerOptions {
  /** Unique, metric-label-safe controller name (`[a-z0-9-]+`). */
  readonly name: string;
  /** The reconciled kind; its events enqueue the object's own key. */
  readonly for: KindDescriptor;
  /** Kinds whose controller ownerReference points at a `for` object; their events enqueue the owner. */
  readonly owns?: readonly KindDescriptor[];
  readonly watches?: readonly WatchSpec<any>[];
  /** Kinds only read from the cache (no trigger). */
  readonly reads?: readonly KindDescriptor[];
  readonly indexes?: readonly IndexSpec<any>[];
  /** Run only on the elected leader. Default true. */
  readonly leaderOnly?: boolean;
  /** Parallel workers (distinct keys only). Default 1, as controller-runtime. */
  readonly maxConcurrentReconciles?: Setting<number>;
  /**
   * Re-enqueue every cached `for` object this often (ms). Default 36 000 000 ms (10 h,
   * controller-runtime `SyncPeriod`). A program flag sets it through {@link fromBinding}.
   */
  readonly resyncPeriodMs?: Setting<number>;
  /** Per-key error backoff; defaults 5 ms → 300 000 ms (see {@link WorkQueueOptions}). */
  readonly backoff?: { readonly baseDelayMs?: number; readonly maxDelayMs?: number };
  readonly rbac?: readonly RbacRule[];
  /** Registry to record into instead of the default one. */
  readonly registry?: Registry;
}

/** A reconciler class with its options, as recorded by `@Reconciler`. */
export interface ReconcilerRegistration extends Omit<ReconcilerOptions, 'registry'> {
  readonly target: Newable<Reconcile>;
}

/** Admission verdict: field errors deny (422 Invalid naming each path); warnings pass through. */
export type Verdict = readonly FieldError[] | { readonly errors?: readonly FieldError[]; readonly warnings?: readonly string[] } | void;

/** A validating webhook handler; absent methods allow. Validators must not mutate their inputs. */
export interface Validator<T extends KubernetesObject = KubernetesObject> {
  validateCreate?(obj: Readonly<T>): Verdict | Promise<Verdict>;
  validateUpdate?(old: Readonly<T>, obj: Readonly<T>): Verdict | Promise<Verdict>;
  validateDelete?(old: Readonly<T>): Verdict | Promise<Verdict>;
}

/** A mutating webhook handler: fills defaults on `obj` (a private copy); the runtime computes the JSON patch. */
export interface Defaulter<T extends KubernetesObject = KubernetesObject> {
  default(obj: T): void | Promise<void>;
}

/** Admission operations a webhook registers for. */
export type Operation = 'CREATE' | 'UPDATE' | 'DELETE' | 'CONNECT';

/** Options of `@ValidatingWebhook` / `@MutatingWebhook`. */
export interface WebhookOptions {
  readonly for: KindDescriptor;
  /** Default CREATE and UPDATE. */
  readonly operations?: readonly Operation[];
  /** Default `Fail`: never admit what could not be checked. */
  readonly failurePolicy?: 'Fail' | 'Ignore';
  /** Default `None`. */
  readonly sideEffects?: 'None' | 'NoneOnDryRun';
  /** URL path; default derived from the GVK as controller-runtime does (`/validate-<group-dashed>-<version>-<kind>`). */
  readonly path?: string;
  readonly registry?: Registry;
}

/** A webhook class with its options and type, as recorded by the decorators. */
export interface WebhookRegistration extends Omit<WebhookOptions, 'registry'> {
  readonly type: 'validating' | 'mutating';
  readonly target: Newable<Validator | Defaulter>;
  readonly path: string;
}

/** A runnable class with its options, as recorded by `@RunnableLoop`. */
export interface RunnableRegistration extends RunnableOptions {
  readonly target: Newable<Runnable>;
}

/**
 * What the decorators recorded: reconciler, webhook and runnable classes with their options. A Registry is
 * plain data; nothing runs until a Manager reads it at start. Tests build their own instance (or
 * swap the default with {@link setDefaultRegistry}) so each Manager sees only what it tests, as
 * kopf's `registry=` allows.
 *
 * @throws Error from {@link addReconciler} on a duplicate name (names are metric labels) and from
 *   {@link addWebhook} on a duplicate path
 */
export class Registry {
  readonly reconcilers: ReconcilerRegistration[] = [];
  readonly webhooks: WebhookRegistration[] = [];
  readonly runnables: RunnableRegistration[] = [];

  /** Records a reconciler. @throws Error on an invalid or duplicate name */
  addReconciler(reg: ReconcilerRegistration): void {
    if (!/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/.test(reg.name)) throw new Error(`reconciler name ${JSON.stringify(reg.name)} is not a valid metric label (lower-case, digits, dashes)`);
    if (this.reconcilers.some((r) => r.name === reg.name)) throw new Error(`duplicate reconciler name ${reg.name}`);
    this.reconcilers.push(reg);
  }

  /** Records a runnable. @throws Error on a duplicate name */
  addRunnable(reg: RunnableRegistration): void {
    if (this.runnables.some((r) => r.name === reg.name)) throw new Error(`duplicate runnable name ${reg.name}`);
    this.runnables.push(reg);
  }

  /** Records a webhook. @throws Error on a duplicate path */
  addWebhook(reg: WebhookRegistration): void {
    if (this.webhooks.some((w) => w.path === reg.path)) throw new Error(`duplicate webhook path ${reg.path}`);
    this.webhooks.push(reg);
  }

  /**
   * Records the reconcilers, webhooks and runnables of `source` whose class is in `targets`, as they were
   * registered (a program assembles its parts from what the decorators recorded).
   * @returns this, for chaining
   */
  addFrom(source: Registry, targets: ReadonlySet<Newable<unknown>>): this {
    for (const r of source.reconcilers) if (targets.has(r.target)) this.addReconciler(r);
    for (const w of source.webhooks) if (targets.has(w.target)) this.addWebhook(w);
    for (const r of source.runnables) if (targets.has(r.target)) this.addRunnable(r);
    return this;
  }
}

/**
 * Holds the default registry used by decorators without `registry:`. This is the only
 * process-wide value in the runtime, and exists so `@Reconciler({...})` on a class reads like
 * kopf's `@kopf.on…`; programs and tests that want isolation pass their own Registry.
 */
const defaults: { registry: Registry } = { registry: new Registry() };

/** The registry decorators record into when given no `registry` option. */
export function defaultRegistry(): Registry {
  return defaults.registry;
}

/** Replaces the default registry (tests); returns the previous one so it can be restored. */
export function setDefaultRegistry(registry: Registry): Registry {
  const previous = defaults.registry;
  defaults.registry = registry;
  return previous;
}
