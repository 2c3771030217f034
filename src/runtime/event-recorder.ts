import type { KubernetesObject } from '@kubernetes/client-node';
import type Logger from 'bunyan';
import type { ApiTransport } from './api-transport.js';

/** `Normal` for progress, `Warning` for anything an operator should look at. */
export type EventType = 'Normal' | 'Warning';

/**
 * Writes core/v1 Events about objects (what `kubectl describe` shows under "Events"). Best effort:
 * a failed write is logged, never thrown, because an Event must not fail a reconcile.
 * Events of cluster-scoped objects go to the `default` namespace, as client-go's recorder does.
 *
 * @see client-go `tools/record`, Kubernetes API conventions "Events"
 */
export class EventRecorder {
  private readonly pending = new Set<Promise<void>>();

  constructor(
    private readonly transport: ApiTransport,
    /** `source.component` and `reportingComponent`, e.g. `coil-controller`. */
    private readonly component: string,
    /** `reportingInstance`, e.g. the pod name. */
    private readonly instance: string,
    private readonly log: Logger,
  ) {}

  /**
   * Records an Event on `obj`. `reason` is UpperCamelCase and machine-readable (`BlockAllocated`);
   * `message` is for humans. Returns at once; the write happens in the background.
   */
  event(obj: KubernetesObject, type: EventType, reason: string, message: string): void {
    const p = this.write(obj, type, reason, message).finally(() => this.pending.delete(p));
    this.pending.add(p);
  }

  /** Waits for Events still being written (used at shutdown). */
  async flush(): Promise<void> {
    await Promise.all([...this.pending]);
  }

  private async write(obj: KubernetesObject, type: EventType, reason: string, message: string): Promise<void> {
    const meta = obj.metadata ?? {};
    const namespace = meta.namespace || 'default';
    const now = new Date().toISOString();
    const body = {
      apiVersion: 'v1',
      kind: 'Event',
      metadata: { generateName: `${meta.name ?? 'object'}.`, namespace },
      involvedObject: { apiVersion: obj.apiVersion, kind: obj.kind, name: meta.name, namespace: meta.namespace, uid: meta.uid, resourceVersion: meta.resourceVersion },
      type,
      reason,
      message: message.slice(0, 1024),
      source: { component: this.component },
      reportingComponent: this.component,
      reportingInstance: this.instance,
      firstTimestamp: now,
      lastTimestamp: now,
      count: 1,
    };
    try {
      await this.transport.request({ method: 'POST', path: `/api/v1/namespaces/${encodeURIComponent(namespace)}/events`, body });
    } catch (err) {
      this.log.warn({ err, reason, object: meta.name }, 'cannot record event');
    }
  }
}
