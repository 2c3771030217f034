import type { KubernetesObject } from '@kubernetes/client-node';
import doti, { ResourceEventType, ResourceMetaImpl, type OperatorLogger, type ResourceEvent, type ResourceMeta } from '@dot-i/k8s-operator';
import type { Cache } from './cache.js';
import type { Client } from './client.js';
import { kindId, parseKey, type KindDescriptor } from './kind.js';
import type { Logger } from './logging.js';

/**
 * dot-i's base class: Node's ESM default import is `module.exports`, whose `default` is the class;
 * Bun's is the class itself.
 */
const Operator = (doti as unknown as { default?: typeof doti.default }).default ?? (doti as unknown as typeof doti.default);

/**
 * dot-i's `Operator` without its constructor. That constructor only builds the I/O this façade
 * replaces: it loads a second KubeConfig of its own (`loadFromDefault`: `$KUBECONFIG`,
 * `~/.kube/config` or the pod's service account — whatever the program was told), a CoreV1Api on
 * it, and the queue of its bare watches. This stand-in constructor keeps only the logger; dot-i's
 * prototype, and so its `start()` and `handleResourceFinalizer`, are inherited unchanged.
 */
const OperatorBase = function OperatorBase(this: { logger: OperatorLogger }, logger: OperatorLogger) {
  this.logger = logger;
} as unknown as typeof Operator;
OperatorBase.prototype = Operator.prototype;

/** A watch the façade opens at start: which kind, and where its events go. */
export interface FacadeWatch {
  readonly kind: KindDescriptor;
  readonly onEvent: (e: ResourceEvent) => void;
}

/**
 * What coil takes from @dot-i/k8s-operator, and only that:
 * - its `Operator` lifecycle: the Manager starts its caches through `start()` → `init()` →
 *   `watchResource()` per kind, and stops them through `stop()`;
 * - its finalizer flow, `handleResourceFinalizer`: add the finalizer to a live object, run the
 *   cleanup and remove it from a deleting one ({@link handleFinalizer}; the AddressPool
 *   reconciler's finalizer goes this way);
 * - its `ResourceEvent` shape.
 *
 * Its I/O is not used, because as shipped (1.3.9):
 * - its constructor loads a default KubeConfig of its own (see {@link OperatorBase});
 * - `watchResource` opens a bare watch with no list and no resourceVersion, replays everything
 *   on reconnect, never reports deletes that happened while disconnected, funnels all kinds into
 *   one concurrency-1 queue and calls `process.exit(1)` on any watch error — here it subscribes
 *   to the runtime's informer {@link Cache} instead;
 * - `setResourceFinalizers` merge-patches the whole finalizer list without a resourceVersion
 *   (racing other controllers), and under client-node 2.x its URL is `undefined/apis/…`
 *   (`k8sApi.basePath` is gone) — here it is a JSON patch with a resourceVersion `test`;
 * - `setResourceStatus`/`patchResourceStatus` go through gaxios with copied auth and swallow
 *   409s, and `registerCustomResourceDefinition` never updates an existing CRD — coil never calls
 *   them: status is written with the runtime {@link Client}, CRDs ship in the chart.
 *
 * @see docs/design.md#the-operator-package
 */
export class OperatorFacade extends OperatorBase {
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

  protected override async setResourceFinalizers(meta: ResourceMeta, finalizers: string[]): Promise<void> {
    const kind = this.kindOf(meta);
    const obj = { metadata: { ...parseKey(meta.namespace ? `${meta.namespace}/${meta.name}` : meta.name), resourceVersion: meta.resourceVersion } };
    await this.client.setFinalizers(kind, obj, finalizers);
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
