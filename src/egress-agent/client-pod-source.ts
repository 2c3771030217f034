/**
 * The client pods of one Egress, kept as small records: list + watch Pods cluster-wide with a
 * server-side field selector, and reduce every object at once to {@link ClientPod} or drop it.
 *
 * Why not the runtime's Informer over Pods (Coil's choice,
 * docs/compatibility.md#egress-pods-watch-every-pod): it stores every pod of the cluster, spec and
 * status included. Why not a label selector: client pods opt in by annotation, and the API server
 * can select neither annotations nor values inside them; a per-Egress label would need a writer on
 * every client pod (a Pod mutating webhook, or coild patching pods with new RBAC), and it would go
 * stale when users edit the annotation. So the server filters what can be filtered —
 * `spec.hostNetwork=false` (host-network pods are never clients,
 * docs/compatibility.md#egress-client-opt-in) and phase not Succeeded/Failed (a finished pod leaves
 * the selector, so the watch reports it DELETED and its tunnel goes, as Coil's watcher does) — and
 * this class keeps only pods naming this Egress. The bytes of other pods still cross the wire once
 * per change; none is kept in memory.
 *
 * Concurrency: one list/watch loop; `onChange` is called synchronously from it and must only
 * schedule work.
 * @see docs/compatibility.md#egress-client-opt-in, docs/compatibility.md#the-nat-pod (pod watcher),
 *   Coil #363 (list/watch race)
 */
import type { V1Pod } from '@kubernetes/client-node';
import type Logger from 'bunyan';
import { ANN_EGRESS_PREFIX } from '../api/v2/keys.js';
import type { ApiTransport } from '../runtime/api-transport.js';
import { sleep } from '../runtime/clock.js';
import { isGone } from '../runtime/errors.js';

/** Server-side filter of the pod list/watch. */
export const CLIENT_POD_FIELD_SELECTOR = 'spec.hostNetwork=false,status.phase!=Succeeded,status.phase!=Failed';

/** What is kept of one client pod. */
export interface ClientPod {
  namespace: string;
  name: string;
  uid: string;
  /** `status.podIPs` (plain addresses); empty until the pod has its network. */
  ips: string[];
}

/** True when `pod`'s annotations name Egress `namespace/name` (`egress.coil.cybozu.com/<ns>: a,b`). */
export function namesEgress(annotations: Readonly<Record<string, string>> | undefined, namespace: string, name: string): boolean {
  const value = annotations?.[ANN_EGRESS_PREFIX + namespace];
  return value !== undefined && value.split(',').some((v) => v.trim() === name);
}

/** Reduces a pod to a {@link ClientPod}, or undefined when it is not a client of the Egress. */
export function toClientPod(pod: V1Pod, egress: { namespace: string; name: string }): ClientPod | undefined {
  if (pod.spec?.hostNetwork || !namesEgress(pod.metadata?.annotations, egress.namespace, egress.name)) return undefined;
  const ips = (pod.status?.podIPs ?? []).map((p) => p.ip).filter((ip): ip is string => !!ip);
  if (ips.length === 0 && pod.status?.podIP) ips.push(pod.status.podIP);
  return { namespace: pod.metadata?.namespace ?? '', name: pod.metadata?.name ?? '', uid: pod.metadata?.uid ?? '', ips };
}

/** Constructor options of {@link ClientPodSource}. */
export interface ClientPodSourceOptions {
  transport: ApiTransport;
  egress: { namespace: string; name: string };
  log: Logger;
  onChange: () => void;
  /** First retry delay, doubled up to 30 s. Default 800 ms. */
  initialBackoffMs?: number;
  /** Full relist this often (checked when a watch ends, every ≤ 4 min). Default 30 min. */
  relistPeriodMs?: number;
  /** Abort a watch that delivered nothing, not even a bookmark, for this long. Default 300 000 ms. */
  watchdogMs?: number;
}

/** The client-pod store with its list/watch loop. */
export class ClientPodSource {
  private readonly pods = new Map<string, ClientPod>();
  private synced = false;

  constructor(private readonly o: ClientPodSourceOptions) {}

  /** True after the first complete list. */
  hasSynced(): boolean {
    return this.synced;
  }

  /** The current client pods. */
  list(): ClientPod[] {
    return [...this.pods.values()];
  }

  /** Lists and watches until `signal` aborts; errors are logged and retried with backoff. */
  async run(signal: AbortSignal): Promise<void> {
    let failures = 0;
    while (!signal.aborted) {
      try {
        const rv = await this.relist(signal);
        const listedAt = Date.now();
        failures = 0;
        let from = rv;
        // Guards against watches that stay open but miss events (the runtime Informer does the same).
        while (!signal.aborted && Date.now() - listedAt < (this.o.relistPeriodMs ?? 30 * 60_000)) {
          const next = await this.watch(from, signal);
          if (next === undefined) break;
          from = next;
        }
      } catch (err) {
        if (signal.aborted) return;
        failures++;
        const delayMs = Math.min(30_000, (this.o.initialBackoffMs ?? 800) * 2 ** (failures - 1));
        this.o.log.warn({ err, retryInMs: delayMs }, 'client pod list/watch failed; retrying');
        await sleep(delayMs, signal);
      }
    }
  }

  private async relist(signal: AbortSignal): Promise<string> {
    const fresh = new Map<string, ClientPod>();
    let cont: string | undefined;
    let rv = '';
    do {
      const page = await this.o.transport.request<{ items: V1Pod[]; metadata: { resourceVersion?: string; continue?: string } }>({
        method: 'GET', path: '/api/v1/pods', signal,
        query: { fieldSelector: CLIENT_POD_FIELD_SELECTOR, limit: 500, continue: cont },
      });
      for (const pod of page.items) {
        const c = toClientPod(pod, this.o.egress);
        if (c) fresh.set(`${c.namespace}/${c.name}`, c);
      }
      rv = page.metadata.resourceVersion ?? rv;
      cont = page.metadata.continue || undefined;
    } while (cont);
    this.pods.clear();
    for (const [k, v] of fresh) this.pods.set(k, v);
    this.synced = true;
    this.o.onChange();
    return rv;
  }

  /** One watch from `rv`. @returns the resourceVersion to resume from, or undefined to relist */
  private async watch(rv: string, signal: AbortSignal): Promise<string | undefined> {
    const ctrl = new AbortController();
    const onAbort = (): void => ctrl.abort();
    signal.addEventListener('abort', onAbort, { once: true });
    let last = rv;
    let relist = false;
    let timedOut = false;
    let timer: NodeJS.Timeout | undefined;
    // Watchdog: bookmarks arrive about once a minute, so silence this long means a dead stream.
    const arm = (): void => {
      clearTimeout(timer);
      timer = setTimeout(() => { timedOut = true; ctrl.abort(); }, this.o.watchdogMs ?? 300_000);
    };
    const onEvent = (type: string, raw: unknown): void => {
      const obj = raw as V1Pod;
      if (type === 'ERROR') {
        relist = true; // 410 Gone or another error: a fresh list is the safe answer
        ctrl.abort();
        return;
      }
      last = obj.metadata?.resourceVersion ?? last;
      if (type === 'BOOKMARK') return;
      const key = `${obj.metadata?.namespace ?? ''}/${obj.metadata?.name ?? ''}`;
      const c = type === 'DELETED' ? undefined : toClientPod(obj, this.o.egress);
      const before = this.pods.get(key);
      if (c) this.pods.set(key, c);
      else this.pods.delete(key);
      if (c || before) this.o.onChange();
    };
    arm();
    try {
      await this.o.transport.watch({
        path: '/api/v1/pods',
        query: { resourceVersion: rv, allowWatchBookmarks: true, fieldSelector: CLIENT_POD_FIELD_SELECTOR, timeoutSeconds: 240 },
      }, ctrl.signal, onEvent, arm);
      return relist ? undefined : last;
    } catch (err) {
      if (signal.aborted || relist || timedOut || isGone(err)) return undefined;
      throw err;
    } finally {
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
    }
  }
}
