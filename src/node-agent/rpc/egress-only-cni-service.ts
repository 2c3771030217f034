/**
 * EgressOnlyCniService: coild's CNI logic in Coil's egress-only mode (`--enable-ipam=false`).
 * Another CNI plugin gives each pod its addresses and its network; `coil` is chained after it
 * and only sets up the pod's egress NAT tunnels, for the addresses in prevResult. coild allocates
 * nothing, wires nothing, and watches no AddressPool, AddressBlock or BlockRequest.
 *
 * Differences from Coil, which identifies the pod by an alias `COIL::<podUID>:<ifname>` on the
 * first host-side interface of prevResult so that its EgressWatcher can find the netns later:
 * coild records each client's netns at ADD (egress-watcher.ts) in both modes, so no alias is set.
 * An unchained ADD, which Coil lets through with no addresses, is refused here with code 7: with
 * no prevResult nothing gives the pod an address.
 *
 * @see docs/compatibility.md#add-del-and-check (ADD with IPAM off),
 *   docs/compatibility.md#manifests-and-rbac (egress-only overlays)
 */
import type Logger from 'bunyan';
import { kindRule } from '../../runtime/rbac.js';
import type { V1Pod } from '@kubernetes/client-node';
import type { Cache } from '../../runtime/cache.js';
import type { Client } from '../../runtime/client.js';
import type { RbacRule } from '../../runtime/registry.js';
import { CniError, CniErrorCode } from './cni-error.js';
import type { CniArgs, CniHandler, CniResult } from './cni-handler.js';
import { observed, type EgressHook } from './cni-service.js';
import type { KeyedMutex } from '../podnet/keyed-mutex.js';
import { Kinds } from '../../api/v2/kinds.js';
import { allocationKey } from '../ipam/node-ipam.js';

/** Constructor options of {@link EgressOnlyCniService}. */
export interface EgressOnlyCniServiceOptions {
  /** Cache with this node's Pods. */
  readonly cache: Cache;
  /** For a Pod the cache does not hold yet. */
  readonly client: Client;
  readonly locks: KeyedMutex;
  readonly logger: Logger;
  readonly egress: EgressHook & {
    /** The attachments with a recorded egress client (for CNI GC). */
    clients(): Array<{ containerId: string; ifname: string }>;
  };
  /** STATUS: why ADD cannot succeed now, or undefined when ready. */
  readonly notReadyReason: () => string | undefined;
  /** Told of each ADD/DEL with its duration (ms) and whether it succeeded (metrics). */
  readonly observe?: (command: 'ADD' | 'DEL', durationMs: number, ok: boolean) => void;
}

/** The {@link CniHandler} of coild with `--enable-ipam=false`. */
export class EgressOnlyCniService implements CniHandler {
  /** What it calls beyond the cache: a live read of a Pod the cache has not seen yet. */
  static readonly rbac: readonly RbacRule[] = [kindRule(Kinds.Pod, ['get'])];

  constructor(private readonly o: EgressOnlyCniServiceOptions) {}

  /**
   * ADD: the pod named by CNI_ARGS gets egress tunnels for prevResult's addresses when it names
   * Egresses. The result is empty: `coil` prints prevResult, as Coil's does.
   * @throws CniError 7 when not chained after a plugin that gave addresses, 4 without pod
   *   name/namespace, 3 for an unknown pod, 999 when the egress setup fails
   */
  async add(args: CniArgs): Promise<CniResult> {
    return this.timed('ADD', () => this.o.locks.run(allocationKey(args.containerId, args.ifname), async () => {
      if (args.args.IS_CHAINED !== 'true' || args.ips.length === 0) {
        throw new CniError(CniErrorCode.INVALID_NETWORK_CONFIG,
          'coil is in egress-only mode (coild --enable-ipam=false): chain it after the plugin that gives pods their addresses; this ADD has no prevResult with addresses');
      }
      const name = args.args.K8S_POD_NAME ?? '';
      const namespace = args.args.K8S_POD_NAMESPACE ?? '';
      if (!name || !namespace) throw new CniError(CniErrorCode.INVALID_ENVIRONMENT_VARIABLES, 'missing pod name/namespace');
      const pod = this.o.cache.get<V1Pod>(Kinds.Pod, { namespace, name }) ?? (await this.o.client.get(Kinds.Pod, { namespace, name }));
      if (!pod) throw new CniError(CniErrorCode.UNKNOWN_CONTAINER, `pod not found: ${namespace}/${name}`);
      try {
        await this.o.egress.onAdd(pod, { namespace, name, containerId: args.containerId, ifname: args.ifname, netns: args.netns, ips: args.ips });
      } catch (err) {
        throw new CniError(CniErrorCode.INTERNAL, `failed to set up egress: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
      }
      return { cniVersion: '1.1.0' };
    }));
  }

  /** DEL: forgets the egress client; the tunnels go with the pod's netns. Never fails for missing state. */
  async del(args: CniArgs): Promise<void> {
    await this.timed('DEL', () => this.o.locks.run(allocationKey(args.containerId, args.ifname), () => this.o.egress.onDel(args.containerId, args.ifname)));
  }

  /** CHECK: the pod's network belongs to the plugin before coil, which checks it. */
  async check(): Promise<void> {}

  /** CNI 1.1 GC: forgets the egress clients of attachments the runtime no longer lists. */
  async gc(args: CniArgs): Promise<void> {
    const valid = new Set(args.validAttachments.map((v) => allocationKey(v.containerId, v.ifname)));
    const stale = this.o.egress.clients().filter((a) => !valid.has(allocationKey(a.containerId, a.ifname)));
    for (const a of stale) await this.o.locks.run(allocationKey(a.containerId, a.ifname), () => this.o.egress.onDel(a.containerId, a.ifname));
    if (stale.length > 0) this.o.logger.info({ forgotten: stale.map((a) => `${a.containerId}:${a.ifname}`) }, 'CNI GC forgot stale egress clients');
  }

  /** CNI 1.1 STATUS. @throws CniError 50 while coild cannot serve ADD */
  async status(): Promise<void> {
    const reason = this.o.notReadyReason();
    if (reason !== undefined) throw new CniError(CniErrorCode.PLUGIN_NOT_AVAILABLE, reason);
  }

  private timed<T>(command: 'ADD' | 'DEL', fn: () => Promise<T>): Promise<T> {
    return observed(this.o.observe, command, fn);
  }
}
