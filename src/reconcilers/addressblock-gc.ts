/**
 * AddressBlock garbage collection in the controller, without coild:
 * - blocks of Nodes that no longer exist are released (Node deletions are watched; every block is
 *   also re-checked each `gcIntervalMs` and at start), fixing Coil's hourly-poll-only GC whose
 *   first error stopped the controller (docs/compatibility.md#orphaned-block-gc-in-the-controller);
 * - blocks of a Node NotReady for longer than `nodeNotReadyReclaimMs` that no pod of that node
 *   uses any more are released too (Coil #204: a dead node's blocks stayed pinned by their finalizer).
 *
 * @see docs/compatibility.md#orphaned-block-gc-in-the-controller,
 *   docs/compatibility.md#orphaned-blocks-reclaimed-only-after-node-deletion
 */
import type { V1Node, V1Pod } from '@kubernetes/client-node';
import { kindRule } from '../runtime/rbac.js';
import { inject } from 'inversify';
import type { AddressBlock } from '../api/v2/addressblock.js';
import { nodeOf } from '../api/v2/addressblock.js';
import { FIN_COIL, INDEX_BLOCK_BY_NODE, INDEX_POD_BY_IP } from '../api/v2/keys.js';
import { cidrContainsAddress, parseBlockField } from '../ipam/cidr.js';
import { tryParseAddress } from '../ipam/ip-address.js';
import { Cache } from '../runtime/cache.js';
import { Client } from '../runtime/client.js';
import { Reconciler } from '../runtime/decorators.js';
import type { Result } from '../runtime/errors.js';
import { EventRecorder } from '../runtime/event-recorder.js';
import { fromBinding, type Reconcile, type ReconcileContext, type Request } from '../runtime/registry.js';
import { blockNodeIndex } from './block-indexes.js';
import { Kinds, timeMs } from '../api/v2/kinds.js';
import { IPAM_OPTIONS, type IpamOptions } from './options.js';
import { describeHolders, podIpIndex, podsHoldingBlock } from './pod-addresses.js';

/** How often the Event of a deletion waiting on live Pods is refreshed. */
const DELETION_WAIT_REPORT_MS = 60_000;

/**
 * Since when `node` has not been Ready (its Ready condition is False or Unknown), in ms since the
 * epoch; undefined when it is Ready or reports no Ready condition yet.
 */
export function notReadySinceMs(node: Readonly<V1Node>): number | undefined {
  const ready = node.status?.conditions?.find((c) => c.type === 'Ready');
  if (ready === undefined || ready.status === 'True') return undefined;
  return timeMs(ready.lastTransitionTime as unknown as string) ?? 0;
}

/**
 * Pods that may still use an address of `block`: not hostNetwork, not finished (Succeeded/Failed
 * pods run nothing), with an IP inside the block. Terminating pods count: on a partitioned node
 * their containers may still run.
 */
export function podsUsingBlock(block: Readonly<AddressBlock>, pods: readonly Readonly<V1Pod>[]): V1Pod[] {
  // Each field as coild reads it: an ipv6 in IPv4 form is the IPv4-mapped prefix (parseBlockField).
  const cidrs = ([[4, block.ipv4], [6, block.ipv6]] as const).flatMap(([family, text]) => {
    if (!text) return [];
    try {
      return [parseBlockField(family, text)];
    } catch {
      return [];
    }
  });
  return pods.filter((p) => {
    if (p.spec?.hostNetwork || p.status?.phase === 'Succeeded' || p.status?.phase === 'Failed') return false;
    const ips = [...(p.status?.podIPs ?? []).map((i) => i.ip), p.status?.podIP].filter((ip): ip is string => !!ip);
    return ips.some((ip) => {
      const a = tryParseAddress(ip);
      return a !== undefined && cidrs.some((c) => cidrContainsAddress(c, a));
    });
  });
}

/**
 * Reconciles one AddressBlock against its Node. Keyed by block so every block is visited at start
 * and at each resync (the periodic sweep, every `gcIntervalMs` of the bound options: `--gc-interval`);
 * a Node event enqueues that node's blocks. Failures are thrown and retried with backoff — never
 * fatal to the process (Coil's runner returned the error and stopped the manager).
 *
 * Leader-only.
 */
@Reconciler({
  name: 'addressblock-gc',
  for: Kinds.AddressBlock,
  watches: [{ kind: Kinds.Node, map: (node, cache) => cache.byIndex(Kinds.AddressBlock, INDEX_BLOCK_BY_NODE, node.metadata?.name ?? '').map((b) => ({ name: b.metadata!.name! })) }],
  reads: [Kinds.Pod],
  indexes: [
    { kind: Kinds.AddressBlock, name: INDEX_BLOCK_BY_NODE, fn: blockNodeIndex },
    { kind: Kinds.Pod, name: INDEX_POD_BY_IP, fn: podIpIndex },
  ],
  leaderOnly: true,
  resyncPeriodMs: fromBinding(IPAM_OPTIONS, (o: IpamOptions) => o.gcIntervalMs),
  rbac: [
    kindRule(Kinds.AddressBlock, ['get', 'list', 'watch', 'update', 'patch', 'delete']),
    kindRule(Kinds.Node, ['get', 'list', 'watch']),
    kindRule(Kinds.Pod, ['get', 'list', 'watch']),
    kindRule(Kinds.Event, ['create', 'patch']),
  ],
})
export class AddressBlockGcReconciler implements Reconcile {
  /**
   * When each node was last confirmed to exist by a live GET (ms). The cache can lag — an
   * informer still backing off after an apiserver or etcd outage keeps showing a deleted Node —
   * so once per GC interval per node the cache's word is checked against the API; a deleted
   * Node's blocks are then released within one interval instead of staying pinned.
   */
  private readonly nodeConfirmedAtMs = new Map<string, number>();

  constructor(
    @inject(Cache) private readonly cache: Cache,
    @inject(Client) private readonly client: Client,
    @inject(EventRecorder) private readonly events: EventRecorder,
    @inject(IPAM_OPTIONS) private readonly options: IpamOptions,
  ) {}

  /** @throws ApiError on a failed list or write (retried) */
  async reconcile(req: Request, ctx: ReconcileContext): Promise<Result> {
    const block = this.cache.get(Kinds.AddressBlock, req);
    const nodeName = block && nodeOf(block);
    if (!block || !nodeName || !block.metadata?.finalizers?.includes(FIN_COIL)) return {};
    const node = this.cache.get(Kinds.Node, { name: nodeName });
    if (!node) return this.release(block, ctx, `node ${nodeName} no longer exists`);
    if (await this.isNodeGone(nodeName)) return this.release(block, ctx, `node ${nodeName} no longer exists (the API says so; the cache lags)`);
    const waiting = this.reportDeletionWait(block, nodeName);
    const since = notReadySinceMs(node);
    const grace = this.options.nodeNotReadyReclaimMs;
    if (since === undefined || grace <= 0) return waiting;
    const left = since + grace - Date.now();
    if (left > 0) return { requeueAfterMs: left };
    // A live list, not a cache: releasing a block another pod still uses would duplicate addresses,
    // and caching every Pod of the cluster for this rare case would cost far more.
    const pods = await this.client.list(Kinds.Pod, { fieldSelector: `spec.nodeName=${nodeName}` });
    const users = podsUsingBlock(block, pods);
    if (users.length > 0) {
      ctx.log.debug({ node: nodeName, pods: users.length }, 'node NotReady but the block is still used');
      return { requeueAfterMs: this.options.reclaimRecheckMs };
    }
    return this.release(block, ctx, `node ${nodeName} NotReady for ${Math.round((Date.now() - since) / 1000)} s and no pod uses the block`);
  }

  /**
   * A block someone deleted while live Pods use its addresses waits on its finalizer until coild
   * has seen them go (docs/ipam-recovery.md#a-block-in-use-is-not-deleted-from-under-its-pods);
   * a Warning Event `DeletionWaitsForPods` on the block says so and names them, refreshed every
   * minute while it waits.
   */
  private reportDeletionWait(block: Readonly<AddressBlock>, nodeName: string): Result {
    if (!block.metadata?.deletionTimestamp) return {};
    const holders = podsHoldingBlock(this.cache, block);
    if (holders.length === 0) return {};
    this.events.event(block as AddressBlock, 'Warning', 'DeletionWaitsForPods',
      `deletion waits on the finalizer ${FIN_COIL}: ${holders.length} live Pod(s) use addresses of this block: ${describeHolders(holders)}; coild on ${nodeName} removes the finalizer once they are gone`);
    return { requeueAfterMs: DELETION_WAIT_REPORT_MS };
  }

  /** True when a live GET finds no Node `name`; asked at most once per GC interval per node. */
  private async isNodeGone(name: string): Promise<boolean> {
    const now = Date.now();
    if (now - (this.nodeConfirmedAtMs.get(name) ?? 0) < this.options.gcIntervalMs) return false;
    const live = await this.client.get(Kinds.Node, { name });
    if (live) {
      this.nodeConfirmedAtMs.set(name, now);
      return false;
    }
    this.nodeConfirmedAtMs.delete(name);
    return true;
  }

  /** Removes the finalizer (coild would have) and deletes the block; both guarded against a replaced object. */
  private async release(block: Readonly<AddressBlock>, ctx: ReconcileContext, why: string): Promise<Result> {
    const name = block.metadata!.name!;
    ctx.log.info({ block: name, reason: why }, 'releasing AddressBlock');
    await this.client.removeFinalizer(Kinds.AddressBlock, structuredClone(block) as AddressBlock, FIN_COIL);
    if (!block.metadata?.deletionTimestamp) await this.client.delete(Kinds.AddressBlock, { name }, { uid: block.metadata!.uid! });
    this.events.event(block as AddressBlock, 'Normal', 'BlockReleased', `released ${name}: ${why}`);
    return {};
  }
}
