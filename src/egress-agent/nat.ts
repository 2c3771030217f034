/**
 * The NAT half of an egress pod, as one interface with one implementation per backend (Coil's
 * `pkg/nat/netfilter`): masquerade what leaves the outside interface unless it is the pod's own
 * traffic, drop forwarded packets in conntrack state invalid, and report the counters.
 * @see docs/compatibility.md#the-nat-pod, docs/compatibility.md#metric-names-and-types
 */
import type { NatCounters } from '../netlink/netfilter/nftables.js';

/** One family's counters, or undefined when that family has no rules. */
export type NatCountersByFamily = Record<4 | 6, NatCounters | undefined>;

/**
 * A NAT backend. `init` is idempotent (a restarted agent re-applies it); `counters` is cheap
 * enough to call every 30 s. Implementations are not required to be safe for concurrent `init`.
 */
export interface NatBackend {
  /** Installs the rules for every family the pod has an address of. @throws NetlinkError */
  init(): Promise<void>;
  /** Reads the rule counters (cumulative since the rules were installed). @throws NetlinkError */
  counters(): Promise<NatCountersByFamily>;
  /** Removes the rules (tests, and an agent told to clean up). @throws NetlinkError */
  remove(): Promise<void>;
}
