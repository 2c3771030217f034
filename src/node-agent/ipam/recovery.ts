/**
 * Start-up recovery: coild keeps no state file; the host is the record. Every pod interface coil
 * wired carries the alias `COIL:<pool>:<containerID>:<ifname>` on its host veth and a /32 or
 * /128 route in the pod table (116), which PodNetwork.list() reads back; each is registered into
 * the block allocator holding its address, as Coil does. Empty blocks are released right after
 * (Coil frees unused blocks at start too, and users rely on it after a restart).
 *
 * Registering straight from a listing is sound here and nowhere else: recovery runs before the
 * gRPC server and the GC start, so no ADD or DEL can change the host between the read and the
 * registration (a veth a DEL retired before the restart is not listed: PodNetwork.list). GC adopts
 * only under the key's lock, on a fresh read (gc.ts).
 *
 * An address no block of this node holds (its AddressBlock was lost while the pod runs) keeps its
 * wiring and goes to {@link OrphanAddresses}, which reports it and claims its block back
 * (docs/ipam-recovery.md); Coil leaves it unregistered and its address free for another node.
 * An address of a family its block lacks (the pool re-created without it) stays in the allocation
 * beside the registered one and goes to {@link OrphanAddresses} too, exported alone while its Pod
 * runs (docs/ipam-recovery.md#a-family-the-pool-no-longer-has); Coil drops it.
 *
 * Where this differs from Coil: a veth with coil's alias and no pod route (an ADD that a kill
 * stopped half-way, {@link isHalfWired}) is deleted, not left for ever beside the allocations
 * (docs/node-state.md). Coil skips it and keeps the link.
 */
import type Logger from 'bunyan';
import type { BlockReleaser } from './block-release.js';
import type { NodeIpam } from './node-ipam.js';
import type { OrphanAddresses } from './orphans.js';
import { isHalfWired, type PodNetwork } from '../podnet/pod-network.js';

/** What {@link recoverAllocations} did. */
export interface RecoveryReport {
  /** Pod interfaces registered again (`<containerID>:<ifname>`). */
  readonly registered: string[];
  /**
   * Interfaces found but not registered, with the reason (e.g. no block of this node holds the
   * address: those are kept wired and claimed back, docs/ipam-recovery.md).
   */
  readonly skipped: { key: string; reason: string }[];
  /** Half-wired interfaces deleted (`<containerID>:<ifname>`): ADDs a kill stopped before their route. */
  readonly removed: string[];
  /** Blocks released because no pod uses them. */
  readonly released: string[];
}

/**
 * Rebuilds `ipam` from the host, then releases empty blocks. Call once, after the AddressBlock
 * cache synced and `ipam.start()`, before serving CNI calls.
 * @throws PodNetworkError when the host cannot be listed or a half-wired veth cannot be deleted
 *   (coild must not serve without its state)
 */
export async function recoverAllocations(o: { podNetwork: PodNetwork; ipam: NodeIpam; releaser: BlockReleaser; logger: Logger; orphans?: OrphanAddresses }): Promise<RecoveryReport> {
  const entries = await o.podNetwork.list();
  const registered: string[] = [];
  const skipped: { key: string; reason: string }[] = [];
  const removed: string[] = [];
  for (const e of entries) {
    const key = `${e.containerId}:${e.ifname}`;
    if (isHalfWired(e)) {
      await o.podNetwork.destroy(e.containerId, e.ifname);
      removed.push(key);
      continue;
    }
    const r = o.ipam.register(e);
    if (r.ok) {
      registered.push(key);
      // The allocation keeps both halves; the one its block lacks is exported alone and reported.
      if (r.withoutBlock) o.orphans?.note({ ...r.withoutBlock, registeredIn: r.blockName });
    } else {
      skipped.push({ key, reason: r.reason });
      if (r.noBlock) o.orphans?.note(e);
    }
  }
  if (removed.length > 0) {
    await o.podNetwork.reap();
    o.logger.warn({ removed }, 'deleted half-wired pod interfaces left by ADDs that a kill interrupted');
  }
  if (skipped.length > 0) o.logger.warn({ skipped }, 'pod interfaces on the host that could not be registered');
  const released = await o.releaser.release({ ignoreGrace: true });
  o.logger.info({ registered: registered.length, skipped: skipped.length, removed: removed.length, released }, 'recovered allocations from the host');
  return { registered, skipped, removed, released };
}
