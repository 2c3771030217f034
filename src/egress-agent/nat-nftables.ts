/**
 * The nftables NAT backend: one `coil-egress` table per family (src/netlink/netfilter/nftables.ts), so
 * nothing else in the pod's ruleset is read or changed.
 * @see docs/compatibility.md#the-nat-pod (the nftables variant)
 */
import { addressFamily } from '../netlink/cidr.js';
import type { IpRunner } from '../netlink/iproute2/ip-runner.js';
import { applyNatRules, deleteNatRules, readNatCounters } from '../netlink/netfilter/nftables.js';
import type { NatBackend, NatCountersByFamily } from './nat.js';

/** Constructor options of {@link NftablesNat}. */
export interface NftablesNatOptions {
  ip: IpRunner;
  /** This pod's addresses (plain); one table per family present. */
  podAddresses: readonly string[];
  /** Outside interface, Coil's `eth0`. */
  outInterface: string;
  /** netns path (tests); undefined = own netns. */
  netns?: string;
  /**
   * Addresses to SNAT to instead of masquerading (at most one per family; a family without one
   * masquerades): see `NatRuleOptions.snatAddress` in src/netlink/netfilter/nftables.ts.
   */
  snatAddresses?: readonly string[];
  /** nft binary. Default `'nft'`. */
  nftPath?: string;
}

/** {@link NatBackend} on nftables. */
export class NftablesNat implements NatBackend {
  constructor(private readonly o: NftablesNatOptions) {}

  private own(): Array<[4 | 6, string]> {
    const out: Array<[4 | 6, string]> = [];
    for (const a of this.o.podAddresses) {
      const f = addressFamily(a);
      if (f !== undefined && !out.some(([g]) => g === f)) out.push([f, a]);
    }
    return out;
  }

  private target(): { netns?: string; nftPath?: string } {
    return { ...(this.o.netns ? { netns: this.o.netns } : {}), ...(this.o.nftPath ? { nftPath: this.o.nftPath } : {}) };
  }

  async init(): Promise<void> {
    for (const [family, ownAddress] of this.own()) {
      const snatAddress = this.o.snatAddresses?.find((a) => addressFamily(a) === family);
      await applyNatRules(this.o.ip, { family, outInterface: this.o.outInterface, ownAddress, ...(snatAddress !== undefined ? { snatAddress } : {}) }, this.target());
    }
  }

  async counters(): Promise<NatCountersByFamily> {
    const out: NatCountersByFamily = { 4: undefined, 6: undefined };
    for (const [family] of this.own()) out[family] = await readNatCounters(this.o.ip, family, this.target());
    return out;
  }

  async remove(): Promise<void> {
    for (const [family] of this.own()) await deleteNatRules(this.o.ip, family, this.target());
  }
}
