import type { KubernetesObject } from '@kubernetes/client-node';
import type Logger from 'bunyan';
import { Kinds } from '../api/v2/kinds.js';
import type { ApiTransport } from './api-transport.js';
import { collectionPath, objectPath } from './kind.js';

/** Repeats within this window aggregate into one Event (client-go's correlator uses 10 min). */
const SERIES_WINDOW_MS = 10 * 60_000;
/** Series remembered for aggregation; the oldest is forgotten first. */
const SERIES_LIMIT = 4096;

/** `Normal` for progress, `Warning` for anything an operator should look at. */
export type EventType = 'Normal' | 'Warning';

/**
 * Writes core/v1 Events about objects (what `kubectl describe` shows under "Events"). Best effort:
 * a failed write is logged, never thrown, because an Event must not fail a reconcile.
 * Events of cluster-scoped objects go to the `default` namespace, as client-go's recorder does.
 *
 * Repeats are aggregated like client-go's correlator: the same (object, type, reason, message)
 * within 10 minutes bumps `count` and `lastTimestamp` of the existing Event instead of creating
 * another, so a reconcile that fails the same way on every retry cannot flood etcd. Writes for
 * one such series are serialised; different series are written in parallel.
 *
 * @see client-go `tools/record`, Kubernetes API conventions "Events"
 */
export class EventRecorder {
  private readonly pending = new Set<Promise<void>>();
  /** Series key → the Event written for it and the tail of its write chain. */
  private readonly series = new Map<string, { namespace?: string; name?: string; count: number; atMs: number; tail: Promise<void> }>();

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
    const m = obj.metadata ?? {};
    const key = [m.uid ?? `${m.namespace}/${m.name}`, type, reason, message].join('\u0000');
    const entry = this.series.get(key) ?? { count: 0, atMs: 0, tail: Promise.resolve() };
    this.series.set(key, entry);
    if (this.series.size > SERIES_LIMIT) this.series.delete(this.series.keys().next().value!);
    const p = (entry.tail = entry.tail
      .then(() => this.record(entry, obj, type, reason, message))
      .catch((err: unknown) => this.log.warn({ err, reason }, 'cannot record event'))).finally(() => this.pending.delete(p));
    this.pending.add(p);
  }

  /** Waits for Events still being written (used at shutdown). */
  async flush(): Promise<void> {
    await Promise.all([...this.pending]);
  }

  private async record(entry: { namespace?: string; name?: string; count: number; atMs: number }, obj: KubernetesObject, type: EventType, reason: string, message: string): Promise<void> {
    const now = Date.now();
    if (entry.name && now - entry.atMs < SERIES_WINDOW_MS) {
      try {
        await this.transport.request({
          method: 'PATCH',
          path: objectPath(Kinds.Event, { namespace: entry.namespace!, name: entry.name }),
          body: { count: entry.count + 1, lastTimestamp: new Date(now).toISOString() },
          contentType: 'application/merge-patch+json',
        });
        entry.count++;
        entry.atMs = now;
        return;
      } catch (err) {
        // Expired or deleted meanwhile: start a new Event below.
        this.log.debug({ err, reason }, 'cannot aggregate event; creating a new one');
      }
    }
    const created = await this.write(obj, type, reason, message);
    if (created) Object.assign(entry, { namespace: created.namespace, name: created.name, count: 1, atMs: now });
  }

  private async write(obj: KubernetesObject, type: EventType, reason: string, message: string): Promise<{ namespace: string; name: string } | undefined> {
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
      const ev = await this.transport.request<KubernetesObject>({ method: 'POST', path: collectionPath(Kinds.Event, namespace), body });
      return { namespace, name: ev.metadata!.name! };
    } catch (err) {
      this.log.warn({ err, reason, object: meta.name }, 'cannot record event');
      return undefined;
    }
  }
}
