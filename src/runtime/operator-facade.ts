import type { KubernetesObject } from '@kubernetes/client-node';
import doti, { ResourceEventType, ResourceMetaImpl, type ResourceEvent, type ResourceMeta } from '@dot-i/k8s-operator';
import type { Cache } from './cache.js';
import type { Client } from './client.js';
import { kindId, parseKey, type KindDescriptor } from './kind.js';
import type { Logger } from './logging.js';

/**
 * dot-i's base class: Node's ESM default import is `module.exports`, whose `default` is the class;
 * Bun's is the class itself.
 */
const Operator = (doti as unknown as { default?: typeof doti.default }).default ?? (doti as unknown as typeof doti.default);

/** A watch the façade opens at start: which kind, and where its events go. */
export interface FacadeWatch {
  readonly kind: KindDescriptor;
  readonly onEvent: (e: ResourceEvent) => void;
}

/**
 * @dot-i/k8s-operator used as a thin façade: its `Operator` lifecycle (`start()` → `init()` →
 * watches; `stop()`), its `ResourceEvent` shape, and its `handleResourceFinalizer` control flow.
 * Every piece of its I/O is overridden with client-node 2.x code, because as shipped (1.3.9):
 * - `watchResource` opens a bare watch with no list and no resourceVersion, replays everything
 *   on reconnect, never reports deletes that happened while disconnected, funnels all kinds into
 *   one concurrency-1 queue and calls `process.exit(1)` on any watch error — here it subscribes
 *   to the runtime's informer {@link Cache} instead;
 * - `setResourceFinalizers` merge-patches the whole finalizer list without a resourceVersion
 *   (racing other controllers), and under client-node 2.x its URL is `undefined/apis/…`
 *   (`k8sApi.basePath` is gone) — here it is a JSON patch with a resourceVersion `test`;
 * - `setResourceStatus`/`patchResourceStatus` go through gaxios with copied auth and swallow
 *   409s — here they use the runtime {@link Client} and throw, so the reconcile is retried;
 * - `registerCustomResourceDefinition` never updates an existing CRD — CRDs ship in the chart.
 *
 * @see docs/design.md#the-operator-package
 */
export class OperatorFacade extends Operator {
  private readonly kinds = new Map<string, KindDescriptor>();
  private readonly watches: FacadeWatch[] = [];

  constructor(
    private readonly cache: Cache,
    private readonly client: Client,
    log: Logger,
  ) {
    // dot-i's logger interface takes one string; bunyan's methods accept that directly.
    super({ debug: (m) => log.debug(m), info: (m) => log.info(m), warn: (m) => log.warn(m), error: (m) => log.error(m) });
  }

  /** Declares a watch opened by `start()`. */
  addWatch(w: FacadeWatch): void {
    this.watches.push(w);
  }

  protected override async init(): Promise<void> {
    for (const w of this.watches) {
      this.kinds.set(metaId(w.kind), w.kind);
      await this.watchResource(w.kind.group, w.kind.version, w.kind.plural, async (e) => w.onEvent(e));
    }
    this.cache.start();
  }

  /** Subscribes to the informer of the kind instead of opening dot-i's bare watch. */
  protected override async watchResource(group: string, version: string, plural: string, onEvent: (event: ResourceEvent) => Promise<void>): Promise<void> {
    const kind = [...this.kinds.values()].find((k) => k.group === group && k.version === version && k.plural === plural);
    if (!kind) throw new Error(`watchResource: ${plural}.${group} was not declared`);
    this.cache.onEvent(kind, (e) => {
      const type = e.type === 'ADDED' ? ResourceEventType.Added : e.type === 'MODIFIED' ? ResourceEventType.Modified : ResourceEventType.Deleted;
      void onEvent({ type, object: e.object as KubernetesObject, meta: ResourceMetaImpl.createWithId(metaId(kind), e.object as KubernetesObject) });
    });
  }

  override stop(): void {
    void this.cache.stop();
  }

  /**
   * dot-i's finalizer flow on a cached object: adds `finalizer` to a live object (returns true:
   * the write will trigger another reconcile); on a deleting object runs `cleanup` then removes
   * the finalizer (returns true); otherwise returns false and the caller applies the spec.
   * Finalizer writes are JSON patches guarded by the object's resourceVersion.
   * @throws ApiError 422 when the object changed meanwhile (retried by the queue); whatever `cleanup` throws
   */
  async handleFinalizer<T extends KubernetesObject>(kind: KindDescriptor<T>, obj: Readonly<T>, finalizer: string, cleanup: (obj: T) => Promise<void>): Promise<boolean> {
    this.kinds.set(metaId(kind), kind);
    // dot-i pushes onto metadata.finalizers in place; cached objects are frozen, so hand it a copy.
    const object = structuredClone(obj) as T;
    const event: ResourceEvent = { type: ResourceEventType.Modified, object, meta: ResourceMetaImpl.createWithId(metaId(kind), object) };
    return this.handleResourceFinalizer(event, finalizer, async () => cleanup(object));
  }

  /** Public form of dot-i's status patch (merge patch on `/status`, resourceVersion-guarded). */
  patchStatus(meta: ResourceMeta, status: unknown): Promise<ResourceMeta | null> {
    return this.patchResourceStatus(meta, status);
  }

  protected override async setResourceFinalizers(meta: ResourceMeta, finalizers: string[]): Promise<void> {
    const kind = this.kindOf(meta);
    const obj = { metadata: { ...parseKey(meta.namespace ? `${meta.namespace}/${meta.name}` : meta.name), resourceVersion: meta.resourceVersion } };
    await this.client.setFinalizers(kind, obj, finalizers);
  }

  protected override async patchResourceStatus(meta: ResourceMeta, status: unknown): Promise<ResourceMeta | null> {
    const kind = this.kindOf(meta);
    const key = meta.namespace ? { namespace: meta.namespace, name: meta.name } : { name: meta.name };
    const updated = await this.client.patchStatus(kind, key, status as object, { resourceVersion: meta.resourceVersion });
    return ResourceMetaImpl.createWithId(meta.id, updated);
  }

  protected override async setResourceStatus(meta: ResourceMeta, status: unknown): Promise<ResourceMeta | null> {
    return this.patchResourceStatus(meta, status);
  }

  protected override registerCustomResourceDefinition(): Promise<never> {
    return Promise.reject(new Error('CRDs are installed by the Helm chart (charts/coil/crds), not at runtime'));
  }

  private kindOf(meta: ResourceMeta): KindDescriptor {
    const kind = this.kinds.get(meta.id);
    if (!kind) throw new Error(`unknown resource ${meta.id}`);
    return kind;
  }
}

function metaId(kind: KindDescriptor): string {
  return kindId(kind);
}
