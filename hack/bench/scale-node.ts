/**
 * One simulated node of the scale benchmark (hack/bench/scale.ts): a coild STAND-IN made of
 * coild's own node-side parts — its informer cache with coild's kinds, selectors and index
 * (declareCoildCache of src/node-agent/rbac.ts, which coild.ts calls too), the BlockRequester, NodeIpam, the
 * BlockReleaser and the periodic NodeGc — over its own API connections, so the requests, watches
 * and deletes reaching the apiserver are the ones a coild makes. What it leaves out is the host:
 * no gRPC server, no veths, no export table (the kernel parts are stand-ins holding the node's
 * allocations in memory). A "kubelet" stand-in reacts to the node's own Pod watch: a Pod bound to
 * the node gets an address (NodeIpam.allocate, as coild's ADD does) and a status with its IP (the
 * kubelet's write); a failed ADD is tried again after the kubelet's pod-worker backoff (10 s with
 * up to 50 % jitter, {@link ADD_RETRY_MS}) for as long as the Pod is there without an IP; a
 * deleted Pod's address is freed (coild's DEL).
 */
import type { KubeConfig, KubernetesObject, V1Pod } from '@kubernetes/client-node';
import type { KindDescriptor } from '../../src/runtime/kind.js';
import bunyan from 'bunyan';
import type { CoildConfig } from '../../src/node-agent/config.js';
import { BlockExport } from '../../src/node-agent/ipam/block-export.js';
import { BlockReleaser } from '../../src/node-agent/ipam/block-release.js';
import { BlockRequester, type BlockRequestOutcome } from '../../src/node-agent/ipam/block-request.js';
import { NodeGc } from '../../src/node-agent/ipam/gc.js';
import { NodeIpam } from '../../src/node-agent/ipam/node-ipam.js';
import type { RouteExportChange, RouteExporter } from '../../src/node-agent/ipam/route-export.js';
import { KeyedMutex } from '../../src/node-agent/podnet/keyed-mutex.js';
import type { PodCheckOptions, PodNetwork, PodNetworkEntry, PodNetworkInitResult, PodNetworkResult } from '../../src/node-agent/podnet/pod-network.js';
import { COILD_ACCESS, declareCoildCache } from '../../src/node-agent/rbac.js';
import { Kinds } from '../../src/api/v2/kinds.js';
import { Cache } from '../../src/runtime/cache.js';
import { Client } from '../../src/runtime/client.js';
import type { ApiTransport } from '../../src/runtime/api-transport.js';

/**
 * After a failed ADD the kubelet's pod worker syncs the Pod again after its `backOffPeriod`
 * (10 s, kubelet.go) jittered by up to `workerBackOffPeriodJitterFactor` (0.5, pod_workers.go):
 * a failed sandbox creation (the CNI ADD) is retried 10–15 s later, again and again.
 */
export const ADD_RETRY_MS = { base: 10_000, jitter: 0.5 } as const;

/** coild's flags that matter here (its defaults unless the benchmark says otherwise). */
export interface SimNodeSettings {
  readonly pool: string;
  readonly allocTimeoutMs: number;
  readonly coolingMs: number;
  readonly blockReleaseGraceMs: number;
  readonly lowWaterMark: number;
  readonly gcIntervalMs: number;
  /** Namespace of the coild DaemonSet (coild caches the DaemonSets of its own namespace). */
  readonly namespace: string;
}

/** What the benchmark learns from one node. */
export interface SimNodeObserver {
  /** The BlockRequester settled a request (the block is in the node's cache): `waitMs` since its creation. */
  onAnswered?(node: string, result: 'allocated' | 'failed', waitMs: number): void;
  /** The releaser gave blocks back. */
  onReleased?(node: string, names: string[]): void;
  /** An ADD failed (no block in time, out of blocks, API error); the kubelet stand-in tries it again after {@link ADD_RETRY_MS}. */
  onAddFailed?(node: string, pod: string, err: unknown): void;
  /** The node's cache delivered a watch event of `kind` (what the apiserver sends every node). */
  onWatchEvent?(kind: string): void;
  /** The kubelet stand-in tries a failed ADD again. */
  onAddRetried?(node: string, pod: string): void;
  /** An ADD succeeded, `ms` after the ADD (its last try) began. */
  onAdded?(node: string, pod: string, ms: number): void;
}

/** Told every log record of info and above (message and fields), e.g. to count the retryNow hurry's. */
export type MessageCounter = (msg: string, record: Record<string, unknown>) => void;

/**
 * The host side of the stand-in: the node's pod interfaces are exactly its live allocations (no
 * kernel), so GC finds nothing to free or adopt and does its block and export work only.
 */
class HostStandIn implements PodNetwork, RouteExporter {
  readonly entries = new Map<string, PodNetworkEntry>();
  async init(): Promise<PodNetworkInitResult> {
    return { mtuBytes: undefined, addedRuleFamilies: [] };
  }
  async setup(): Promise<PodNetworkResult> {
    throw new Error('the scale stand-in wires no pods');
  }
  async check(_o: PodCheckOptions): Promise<string[]> {
    return [];
  }
  async destroy(containerId: string, ifname: string): Promise<void> {
    this.entries.delete(`${containerId}:${ifname}`);
  }
  async reap(): Promise<void> {}
  async list(): Promise<PodNetworkEntry[]> {
    return [...this.entries.values()];
  }
  async inspect(containerId: string, ifname: string): Promise<PodNetworkEntry | undefined> {
    return this.entries.get(`${containerId}:${ifname}`);
  }
  async sync(): Promise<RouteExportChange> {
    return { added: [], deleted: [] };
  }
  async clear(): Promise<RouteExportChange> {
    return { added: [], deleted: [] };
  }
}

/** coild's client, noting when each BlockRequest's create was sent (performance.now()), by its UID. */
class TimingClient extends Client {
  readonly sentAt = new Map<string, number>();
  override async create<T extends KubernetesObject>(kind: KindDescriptor<T>, obj: T): Promise<T> {
    const t0 = performance.now();
    const made = await super.create(kind, obj);
    if (kind === (Kinds.BlockRequest as unknown)) {
      if (this.sentAt.size > 1000) this.sentAt.clear();
      this.sentAt.set(made.metadata!.uid!, t0);
    }
    return made;
  }
}

/** One simulated node. */
export class SimNode {
  readonly cache: Cache;
  readonly client: TimingClient;
  readonly requester: BlockRequester;
  readonly ipam: NodeIpam;
  readonly releaser: BlockReleaser;
  private readonly gc: NodeGc;
  private readonly host = new HostStandIn();
  private readonly abort = new AbortController();
  private readonly loops: Promise<void>[] = [];
  /** Pods (UID) whose ADD runs. */
  private readonly adding = new Set<string>();
  /** The kubelet's retries of failed ADDs, by Pod UID (cleared on the Pod's delete and at stop). */
  private readonly retries = new Map<string, NodeJS.Timeout>();

  constructor(
    readonly name: string,
    transport: ApiTransport,
    private readonly settings: SimNodeSettings,
    private readonly observer: SimNodeObserver,
    count: MessageCounter,
    /** The kubelet's connection (its Pod status writes are not coild's cost). */
    private readonly kubelet: Client,
  ) {
    // Every warning, and the few info messages the benchmark counts, reach `count`; nothing is printed.
    const logger = bunyan.createLogger({ name: 'coild', node: name, streams: [{ type: 'raw', level: 'info', stream: { write: (r: object) => count((r as { msg: string }).msg, r as Record<string, unknown>) } }] });
    this.cache = new Cache(transport, logger);
    this.client = new TimingClient(transport, 'coild');
    const config = { nodeName: name, pod: { namespace: settings.namespace, name: `coild-${name}` }, enableIpam: true, enableEgress: false } as unknown as CoildConfig;
    declareCoildCache(this.cache, config);
    this.requester = new BlockRequester({
      cache: this.cache, client: this.client, nodeName: name, logger: logger.child({ logger: 'block-request' }),
      onAnswered: (_pool, result, waitMs) => observer.onAnswered?.(name, result, waitMs),
    });
    this.ipam = new NodeIpam({
      cache: this.cache, requester: this.requester, logger: logger.child({ logger: 'node-ipam' }),
      coolingMs: settings.coolingMs, lowWaterMark: settings.lowWaterMark, allocTimeoutMs: settings.allocTimeoutMs,
      onBlocksChanged: () => this.releaser.schedule(),
    });
    this.releaser = new BlockReleaser({
      ipam: this.ipam, client: this.client, logger: logger.child({ logger: 'block-release' }), graceMs: settings.blockReleaseGraceMs,
      onReleased: (names) => observer.onReleased?.(name, names),
    });
    const exporter = new BlockExport({ cache: this.cache, exporter: this.host, logger: logger.child({ logger: 'route-exporter' }) });
    this.gc = new NodeGc({ ipam: this.ipam, podNetwork: this.host, releaser: this.releaser, exporter, locks: new KeyedMutex(), logger: logger.child({ logger: 'gc' }), intervalMs: settings.gcIntervalMs });
    if (observer.onWatchEvent) {
      for (const c of COILD_ACCESS.common.caches.concat(COILD_ACCESS.ipam.caches)) this.cache.onEvent(c.kind, () => observer.onWatchEvent!(c.kind.kind));
    }
    this.cache.onEvent(Kinds.Pod, (e) => {
      const pod = e.object as V1Pod;
      if (e.type === 'DELETED') this.del(pod);
      else if (!pod.metadata?.deletionTimestamp && !pod.status?.podIP) void this.add(pod);
    });
  }

  /** Starts the caches, waits until they synced, then runs coild's loops as its Manager would. */
  async start(syncTimeoutMs = 600_000): Promise<void> {
    this.cache.start();
    await this.cache.waitForSync(syncTimeoutMs);
    this.ipam.start();
    const signal = this.abort.signal;
    this.loops.push(this.requester.run(signal), this.releaser.run(signal), this.gc.runnable().run(signal));
  }

  /** Asks for one more block of the pool (what a node's first ADD does), resolving with the outcome. */
  requestBlock(timeoutMs: number): Promise<BlockRequestOutcome> {
    return this.requester.request(this.settings.pool, timeoutMs);
  }

  /** Stops the loops and the caches (a node powered off: nothing is cleaned up in the API). */
  async stop(): Promise<void> {
    this.abort.abort();
    for (const t of this.retries.values()) clearTimeout(t);
    this.retries.clear();
    await Promise.allSettled(this.loops);
    this.ipam.stop();
    await this.cache.stop();
  }

  /** ADD: an address for the pod, then (kubelet) its status with the IP. */
  private async add(pod: V1Pod): Promise<void> {
    const uid = pod.metadata!.uid!;
    if (this.adding.has(uid) || this.ipam.lookup(uid, 'eth0')) return;
    this.adding.add(uid);
    const t0 = performance.now();
    try {
      const a = await this.ipam.allocate({ pool: this.settings.pool, containerId: uid, ifname: 'eth0', podName: pod.metadata!.name!, podNamespace: pod.metadata!.namespace! });
      this.host.entries.set(`${uid}:eth0`, { pool: a.pool, containerId: uid, ifname: 'eth0', hostIfname: `veth${uid.slice(0, 8)}`, ...(a.ipv4 && { ipv4: a.ipv4 }) });
      this.observer.onAdded?.(this.name, pod.metadata!.name!, performance.now() - t0);
      if (a.ipv4) {
        await this.kubelet.patchStatus(Kinds.Pod, { namespace: pod.metadata!.namespace!, name: pod.metadata!.name! }, { phase: 'Running', podIP: a.ipv4, podIPs: [{ ip: a.ipv4 }] }).catch(() => undefined);
      }
    } catch (err) {
      this.observer.onAddFailed?.(this.name, pod.metadata!.name!, err);
      this.retryAdd(pod);
    } finally {
      this.adding.delete(uid);
    }
  }

  /** The kubelet's next sync of a Pod whose ADD failed: the ADD again, if the Pod is still there and has no address. */
  private retryAdd(pod: V1Pod): void {
    const uid = pod.metadata!.uid!;
    if (this.abort.signal.aborted || this.retries.has(uid)) return;
    const delay = ADD_RETRY_MS.base * (1 + Math.random() * ADD_RETRY_MS.jitter);
    this.retries.set(uid, setTimeout(() => {
      this.retries.delete(uid);
      const now = this.cache.get(Kinds.Pod, { namespace: pod.metadata!.namespace!, name: pod.metadata!.name! }) as V1Pod | undefined;
      if (this.abort.signal.aborted || now?.metadata?.uid !== uid || now.metadata?.deletionTimestamp) return;
      this.observer.onAddRetried?.(this.name, pod.metadata!.name!);
      void this.add(now);
    }, delay));
  }

  /** DEL: the pod's address is freed (it cools, then its block may be released). */
  private del(pod: V1Pod): void {
    const uid = pod.metadata!.uid!;
    clearTimeout(this.retries.get(uid));
    this.retries.delete(uid);
    this.host.entries.delete(`${uid}:eth0`);
    this.ipam.free(uid, 'eth0');
  }
}

/** The kube config of one node's own connections (a coild has its own). */
export type NodeTransportFactory = (kubeConfig: KubeConfig) => ApiTransport;
