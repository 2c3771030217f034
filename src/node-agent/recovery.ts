/**
 * Start-up recovery: coild keeps no state file; the host is the record. Every pod interface coil
 * wired carries the alias `COIL:<pool>:<containerID>:<ifname>` on its host veth and a /32 or
 * /128 route in the pod table (116), which PodNetwork.list() reads back; each is registered into
 * the block allocator holding its address, as Coil does (coil-behaviour.md §5.2 step 4). Empty
 * blocks are released right after (Coil #176/#177, and the restart workaround of Coil #202).
 *
 * Registering straight from a listing is sound here and nowhere else: recovery runs before the
 * gRPC server and the GC start, so no ADD or DEL can change the host between the read and the
 * registration (a veth a DEL retired before the restart is not listed: PodNetwork.list). GC adopts
 * only under the key's lock, on a fresh read (gc.ts).
 *
 * Known limit (coil-behaviour.md §12 item 6): a veth whose route is missing cannot be registered;
 * it is reported, and its block is kept only if some other pod holds an address in it.
 */
import type Logger from 'bunyan';
import type { BlockReleaser } from './block-release.js';
import type { NodeIpam } from './node-ipam.js';
import type { PodNetwork } from './pod-network.js';

/** What {@link recoverAllocations} did. */
export interface RecoveryReport {
  /** Pod interfaces registered again (`<containerID>:<ifname>`). */
  readonly registered: string[];
  /** Interfaces found but not registered, with the reason. */
  readonly skipped: { key: string; reason: string }[];
  /** Blocks released because no pod uses them. */
  readonly released: string[];
}

/**
 * Rebuilds `ipam` from the host, then releases empty blocks. Call once, after the AddressBlock
 * cache synced and `ipam.start()`, before serving CNI calls.
 * @throws PodNetworkError when the host cannot be listed (coild must not serve without its state)
 */
export async function recoverAllocations(o: { podNetwork: PodNetwork; ipam: NodeIpam; releaser: BlockReleaser; logger: Logger }): Promise<RecoveryReport> {
  const entries = await o.podNetwork.list();
  const registered: string[] = [];
  const skipped: { key: string; reason: string }[] = [];
  for (const e of entries) {
    const key = `${e.containerId}:${e.ifname}`;
    const r = o.ipam.register(e);
    if (r.ok) registered.push(key);
    else skipped.push({ key, reason: r.reason });
  }
  if (skipped.length > 0) o.logger.warn({ skipped }, 'pod interfaces on the host that could not be registered');
  const released = await o.releaser.release({ ignoreGrace: true });
  o.logger.info({ registered: registered.length, skipped: skipped.length, released }, 'recovered allocations from the host');
  return { registered, skipped, released };
}
