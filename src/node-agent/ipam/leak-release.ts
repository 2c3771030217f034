/**
 * LeakReleaser: frees one allocation of this node that no Pod is behind — what
 * `kubectl coil ipam release` asks for a `leaked-address` finding, by annotating the AddressBlock
 * that holds it (src/api/v2/leak-release-request.ts; leak-release-requests.ts acts on it;
 * docs/ipam-recovery.md#releasing-a-leak).
 *
 * coild owns its node's allocations: each is a veth on the host holding the address, so the
 * release is coild's CNI DEL of that one attachment (the veth torn down, the address freed, into
 * cooling). The API server decided who may ask; what is asked is still only a hint, checked
 * again here. The release happens only when, under the allocation's lock (the one ADD, DEL and GC
 * take) and on a live read of this node's Pods:
 * - the allocation exists with exactly the addresses named (a re-used key is not the leak seen),
 *   in the block the request was made on;
 * - the Pod the allocation names, if any, does not exist on this node;
 * - no Pod on this node (host-network ones excepted) has one of its addresses in status.podIPs.
 * So the most a caller can make coild do is what a CNI DEL for a pod that is gone would do.
 */
import type Logger from 'bunyan';
import { Kinds } from '../../api/v2/kinds.js';
import type { LeakReleaseRequest } from '../../api/v2/leak-release-request.js';
import { canonicalAddressOrText as canonical } from '../../ipam/ip-address.js';
import type { Client } from '../../runtime/client.js';
import type { KeyedMutex } from '../podnet/keyed-mutex.js';
import type { PodNetwork } from '../podnet/pod-network.js';
import { allocationKey, type NodeIpam } from './node-ipam.js';

/** The answer: released, or why not. */
export interface LeakReleaseAnswer {
  readonly released: boolean;
  readonly reason: string;
}

/** Constructor options of {@link LeakReleaser}. */
export interface LeakReleaserOptions {
  readonly ipam: NodeIpam;
  readonly podNetwork: PodNetwork;
  /** The per-key lock shared with the CNI service and GC. */
  readonly locks: KeyedMutex;
  /** Reads this node's Pods live (the cache may lag a Pod that was just created). */
  readonly client: Pick<Client, 'list'>;
  readonly nodeName: string;
  readonly logger: Logger;
}

export class LeakReleaser {
  constructor(private readonly o: LeakReleaserOptions) {}

  /**
   * Releases the attachment of `req` if it is still a leak (see the file's comment).
   * @param block the AddressBlock the request was made on; absent: any of this node's
   * @throws ApiError when this node's Pods cannot be read; PodNetworkError when the veth cannot be removed
   */
  release(req: Pick<LeakReleaseRequest, 'containerId' | 'ifname' | 'ipv4' | 'ipv6'>, block?: string): Promise<LeakReleaseAnswer> {
    return this.o.locks.run(allocationKey(req.containerId, req.ifname), async () => {
      const a = this.o.ipam.lookup(req.containerId, req.ifname);
      if (!a) return { released: false, reason: 'no such allocation on this node' };
      if (block !== undefined && a.blockName !== block) return { released: false, reason: `the allocation is in AddressBlock ${a.blockName}, not ${block}` };
      if (canonical(a.ipv4) !== canonical(req.ipv4) || canonical(a.ipv6) !== canonical(req.ipv6)) {
        return { released: false, reason: `the allocation holds ${[a.ipv4, a.ipv6].filter(Boolean).join(', ')} now, not the addresses named` };
      }
      const pods = await this.o.client.list(Kinds.Pod, { fieldSelector: `spec.nodeName=${this.o.nodeName}` });
      if (a.podName && pods.some((p) => p.metadata?.namespace === a.podNamespace && p.metadata?.name === a.podName)) {
        return { released: false, reason: `Pod ${a.podNamespace}/${a.podName}, which the allocation names, exists` };
      }
      const addresses = new Set([a.ipv4, a.ipv6].filter((x): x is string => x !== undefined).map((x) => canonical(x)!));
      const holder = pods.find((p) => !p.spec?.hostNetwork && (p.status?.podIPs ?? []).some((ip) => addresses.has(canonical(ip.ip) ?? '')));
      if (holder) return { released: false, reason: `Pod ${holder.metadata?.namespace}/${holder.metadata?.name} has the address` };
      await this.o.podNetwork.destroy(req.containerId, req.ifname);
      this.o.ipam.free(req.containerId, req.ifname);
      this.o.logger.info({ containerId: req.containerId, ifname: req.ifname, ipv4: a.ipv4, ipv6: a.ipv6, block: a.blockName }, 'released a leaked allocation on request (an AddressBlock annotation: kubectl coil ipam release)');
      return { released: true, reason: 'released' };
    });
  }
}
