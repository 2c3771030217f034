/**
 * CniService: coild's CNI logic behind the gRPC shell. ADD picks the pool, allocates from
 * {@link NodeIpam} and wires the pod with {@link PodNetwork}; DEL undoes both and tolerates
 * missing state; CHECK compares the kernel with the allocation; GC and STATUS are CNI 1.1's.
 * @see docs/compatibility.md#pool-choice, docs/compatibility.md#add-del-and-check; CNI spec SPEC.md
 *   "CNI operations"
 */
import type { V1Node, V1Pod } from '@kubernetes/client-node';
import { kindRule } from '../../runtime/rbac.js';
import type Logger from 'bunyan';
import { ANN_POOL, DEFAULT_POOL } from '../../api/v2/keys.js';
import type { Cache } from '../../runtime/cache.js';
import type { Client } from '../../runtime/client.js';
import type { EventRecorder } from '../../runtime/event-recorder.js';
import type { RbacRule } from '../../runtime/registry.js';
import { CniError, CniErrorCode } from './cni-error.js';
import type { CniArgs, CniHandler, CniResult } from './cni-handler.js';
import type { KeyedMutex } from '../podnet/keyed-mutex.js';
import { podAddresses } from '../../ipam/pod-ips.js';
import { Kinds } from '../../api/v2/kinds.js';
import { allocationKey, NodeIpamError, type NodeAllocation, type NodeIpam } from '../ipam/node-ipam.js';
import type { PodNetwork } from '../podnet/pod-network.js';

/** Constructor options of {@link CniService}. */
export interface CniServiceOptions {
  readonly ipam: NodeIpam;
  readonly podNetwork: PodNetwork;
  /** Cache with this node's Pods and Node, all Namespaces and AddressPools. */
  readonly cache: Cache;
  /** For a Pod the cache does not hold yet (created a moment ago). */
  readonly client: Client;
  readonly recorder: EventRecorder;
  /** The per-key lock shared with GC. */
  readonly locks: KeyedMutex;
  readonly nodeName: string;
  readonly logger: Logger;
  /** STATUS: why ADD cannot succeed now (not synced, not recovered), or undefined when ready. */
  readonly notReadyReason: () => string | undefined;
  /** Told of each ADD/DEL with its duration (ms) and whether it succeeded (metrics). */
  readonly observe?: (command: 'ADD' | 'DEL', durationMs: number, ok: boolean) => void;
  /** Client-side egress (egress-watcher.ts); absent: annotations are ignored. */
  readonly egress?: EgressHook;
}

/** What ADD/DEL tell the client-side egress: a wired pod (it may name Egresses) and a removed one. */
export interface EgressHook {
  /** @throws when the pod names Egresses that cannot be set up (ADD then fails and is undone) */
  onAdd(pod: Readonly<V1Pod>, a: { namespace: string; name: string; containerId: string; ifname: string; netns: string; ips: string[] }): Promise<void>;
  onDel(containerId: string, ifname: string): Promise<void>;
}

/** The {@link CniHandler} of coild. Calls for one `<containerID>:<ifname>` run one at a time. */
export class CniService implements CniHandler {
  /**
   * What it calls beyond the cache: a live read of a Pod the cache has not seen yet. Its Events
   * (a pool out of blocks) go through the Manager's recorder.
   */
  static readonly rbac: readonly RbacRule[] = [kindRule(Kinds.Pod, ['get'])];

  constructor(private readonly o: CniServiceOptions) {}

  /**
   * ADD, Coil's steps: refuse chaining, find the pod and its namespace's pool, allocate, wire;
   * a failed wiring frees the address again.
   * @throws CniError 2 when chained, 4 without pod name/namespace, 3 for an unknown pod, 7 for a
   *   pool that does not exist, 11 when no block arrived in time, 999 for out of blocks and
   *   kernel failures
   */
  async add(args: CniArgs): Promise<CniResult> {
    return this.timed('ADD', () => this.o.locks.run(allocationKey(args.containerId, args.ifname), () => this.addLocked(args)));
  }

  async del(args: CniArgs): Promise<void> {
    await this.timed('DEL', () =>
      this.o.locks.run(allocationKey(args.containerId, args.ifname), async () => {
        await this.o.podNetwork.destroy(args.containerId, args.ifname).catch((err: unknown) => {
          throw new CniError(CniErrorCode.INTERNAL, 'failed to destroy pod network', { cause: err, details: String(err) });
        });
        this.o.ipam.free(args.containerId, args.ifname);
        await this.o.egress?.onDel(args.containerId, args.ifname);
      }),
    );
  }

  /** @throws CniError 3 when coild holds no address for the key, 999 listing what differs */
  async check(args: CniArgs): Promise<void> {
    await this.o.locks.run(allocationKey(args.containerId, args.ifname), async () => {
      const a = this.o.ipam.lookup(args.containerId, args.ifname);
      if (!a) throw new CniError(CniErrorCode.UNKNOWN_CONTAINER, `no address is allocated to ${args.containerId}:${args.ifname}`);
      const problems = await this.o.podNetwork.check({
        containerId: args.containerId, ifname: args.ifname, ...(args.netns && { netnsPath: args.netns }),
        ...(a.ipv4 && { ipv4: a.ipv4 }), ...(a.ipv6 && { ipv6: a.ipv6 }),
      });
      if (problems.length > 0) throw new CniError(CniErrorCode.INTERNAL, `pod network check failed: ${problems.join('; ')}`, { details: problems.join('\n') });
    });
  }

  /** CNI 1.1 GC: releases every attachment coild holds that the runtime did not list as valid. */
  async gc(args: CniArgs): Promise<void> {
    const valid = new Set(args.validAttachments.map((v) => allocationKey(v.containerId, v.ifname)));
    // The Pods the API server shows are the truth (docs/ipam-recovery.md): an attachment whose
    // address a live Pod of this node shows in status.podIPs is kept even if the runtime left it
    // out; were its sandbox really gone, its veth went with the netns and NodeGc frees it.
    const live = new Set(this.o.cache.list(Kinds.Pod).filter((p) => p.spec?.nodeName === this.o.nodeName).flatMap((p) => podAddresses(p)));
    const listed = this.o.ipam.allocations().filter((a) => !valid.has(allocationKey(a.containerId, a.ifname)));
    const kept = listed.filter((a) => [a.ipv4, a.ipv6].some((ip) => ip !== undefined && live.has(ip)));
    if (kept.length > 0) this.o.logger.warn({ kept: kept.map((a) => `${a.containerId}:${a.ifname}`) }, 'CNI GC: kept attachments the runtime did not list whose address a live Pod of this node shows');
    const stale = listed.filter((a) => !kept.includes(a));
    for (const a of stale) {
      await this.o.locks.run(allocationKey(a.containerId, a.ifname), async () => {
        await this.o.podNetwork.destroy(a.containerId, a.ifname);
        this.o.ipam.free(a.containerId, a.ifname);
      });
    }
    if (stale.length > 0) this.o.logger.info({ freed: stale.map((a) => `${a.containerId}:${a.ifname}`) }, 'CNI GC freed stale attachments');
  }

  /** CNI 1.1 STATUS. @throws CniError 50 while coild cannot serve ADD */
  async status(): Promise<void> {
    const reason = this.o.notReadyReason();
    if (reason !== undefined) throw new CniError(CniErrorCode.PLUGIN_NOT_AVAILABLE, reason);
  }

  private async addLocked(args: CniArgs): Promise<CniResult> {
    if (args.args.IS_CHAINED === 'true') {
      throw new CniError(CniErrorCode.UNSUPPORTED_FIELD, 'coil must be called as the first plugin when IPAM related features are enabled');
    }
    const name = args.args.K8S_POD_NAME ?? '';
    const namespace = args.args.K8S_POD_NAMESPACE ?? '';
    if (!name || !namespace) throw new CniError(CniErrorCode.INVALID_ENVIRONMENT_VARIABLES, 'missing pod name/namespace');
    const pod = await this.getPod(namespace, name);
    if (!pod) throw new CniError(CniErrorCode.UNKNOWN_CONTAINER, `pod not found: ${namespace}/${name}`);
    const pool = await this.poolOf(namespace);

    let alloc: NodeAllocation;
    try {
      alloc = await this.o.ipam.allocate({ pool, containerId: args.containerId, ifname: args.ifname, podName: name, podNamespace: namespace });
    } catch (err) {
      throw this.allocationError(err, pod, pool);
    }
    try {
      const node = this.o.cache.get<V1Node>(Kinds.Node, { name: this.o.nodeName });
      const hostIPv4 = internalIp(node, 4);
      const hostIPv6 = internalIp(node, 6);
      if (alloc.ipv4 && !hostIPv4) throw new Error(`node ${this.o.nodeName} has no IPv4 InternalIP to use as the pod gateway`);
      const r = await this.o.podNetwork.setup(args.netns, {
        containerId: args.containerId, ifname: args.ifname, pool,
        ...(alloc.ipv4 && { ipv4: alloc.ipv4, hostIPv4 }), ...(alloc.ipv6 && { ipv6: alloc.ipv6 }), ...(hostIPv6 && { hostIPv6 }),
      });
      // As Coil (docs/compatibility.md#client-pod-egress-setup): an egress client whose tunnels
      // cannot be set up fails ADD (and is undone below).
      await this.o.egress?.onAdd(pod, { namespace, name, containerId: args.containerId, ifname: args.ifname, netns: args.netns,
        ips: [alloc.ipv4, alloc.ipv6].filter((a): a is string => !!a) });
      return { cniVersion: '1.1.0', interfaces: r.interfaces.map((i) => ({ ...i })), ips: r.ips.map((ip) => ({ ...ip })) };
    } catch (err) {
      // Coil frees on a failed setup; PodNetwork has already removed what it created, but not
      // after a failed egress setup, which left a wired pod behind.
      if (this.o.egress) await this.o.podNetwork.destroy(args.containerId, args.ifname).catch(() => undefined);
      this.o.ipam.free(args.containerId, args.ifname);
      throw new CniError(CniErrorCode.INTERNAL, `failed to setup pod network: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
    }
  }

  /** The pod from the cache, else from the API server (the cache may lag a fresh pod). */
  private async getPod(namespace: string, name: string): Promise<V1Pod | undefined> {
    return this.o.cache.get<V1Pod>(Kinds.Pod, { namespace, name }) ?? (await this.o.client.get(Kinds.Pod, { namespace, name }));
  }

  /**
   * Namespace annotation `coil.cybozu.com/pool`, else `default`. The namespace comes from the
   * cache, else from the API server: a pod of a namespace created a moment ago must not fall to
   * the default pool because the cache has not seen its namespace yet.
   * @throws CniError 7 for a pool that does not exist
   */
  private async poolOf(namespace: string): Promise<string> {
    const ns = this.o.cache.get(Kinds.Namespace, { name: namespace }) ?? (await this.o.client.get(Kinds.Namespace, { name: namespace }));
    const pool = ns?.metadata?.annotations?.[ANN_POOL] || DEFAULT_POOL;
    if (!this.o.cache.get(Kinds.AddressPool, { name: pool })) {
      const from = pool === DEFAULT_POOL ? 'the default pool' : `chosen by the ${ANN_POOL} annotation of namespace ${namespace}`;
      throw new CniError(CniErrorCode.INVALID_NETWORK_CONFIG, `AddressPool "${pool}" does not exist (${from})`);
    }
    return pool;
  }

  private allocationError(err: unknown, pod: V1Pod, pool: string): CniError {
    if (err instanceof NodeIpamError && err.kind === 'out-of-blocks') {
      this.o.recorder.event(pod, 'Warning', 'AddressPoolExhausted', `failed to allocate an address: ${err.message}`);
      return new CniError(CniErrorCode.INTERNAL, `failed to allocate address: ${err.message}`, { cause: err });
    }
    if (err instanceof NodeIpamError) return new CniError(CniErrorCode.TRY_AGAIN_LATER, `failed to allocate address: ${err.message}`, { cause: err });
    return new CniError(CniErrorCode.TRY_AGAIN_LATER, `failed to allocate address from pool ${pool}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
  }

  private timed<T>(command: 'ADD' | 'DEL', fn: () => Promise<T>): Promise<T> {
    return observed(this.o.observe, command, fn);
  }
}

/** Runs `fn` and tells `observe` its duration (ms) and whether it succeeded (the ADD/DEL metrics). */
export async function observed<T>(observe: CniServiceOptions['observe'], command: 'ADD' | 'DEL', fn: () => Promise<T>): Promise<T> {
  const start = performance.now();
  let ok = false;
  try {
    const r = await fn();
    ok = true;
    return r;
  } finally {
    observe?.(command, performance.now() - start, ok);
  }
}

/** The node's last InternalIP of a family (Coil takes the last one), or undefined. */
export function internalIp(node: Readonly<V1Node> | undefined, family: 4 | 6): string | undefined {
  const ips = (node?.status?.addresses ?? []).filter((a) => a.type === 'InternalIP' && a.address.includes(':') === (family === 6));
  return ips.at(-1)?.address;
}
