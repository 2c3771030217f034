/**
 * The iptables NAT backend (Coil's default): exactly Coil's two rules per family, appended to the
 * built-in chains unless already there, so an egress pod's netfilter state reads the same under
 * Coil and coil:
 *   `-t nat    -A POSTROUTING ! -s <own>/32|/128 -o <out> -j MASQUERADE`
 *   `-t filter -A FORWARD -o <out> -m state --state INVALID -j DROP`
 * Counters are read from `iptables-save -c`, which works with iptables-nft and iptables-legacy
 * alike (Coil reads them through nftables netlink, so its metrics fail on legacy hosts).
 * @see docs/compatibility.md "Egress NAT", "Metrics"
 */
import { canonicalAddress } from '../ipam/ip-address.js';
import { addressFamily } from '../netlink/cidr.js';
import type { IpRunner } from '../netlink/iproute2/ip-runner.js';
import { deleteIptablesRule, ensureIptablesRule, readIptablesRules, type IptablesCommands, type IptablesRule } from '../netlink/netfilter/iptables.js';
import type { NatCounters } from '../netlink/netfilter/nftables.js';
import type { NatBackend, NatCountersByFamily } from './nat.js';

/** Constructor options of {@link IptablesNat}. */
export interface IptablesNatOptions {
  ip: IpRunner;
  /** This pod's addresses (plain); rules for each family present. */
  podAddresses: readonly string[];
  /** Outside interface, Coil's `eth0`. */
  outInterface: string;
  /** netns path (tests); undefined = own netns. */
  netns?: string;
  /** Addresses to SNAT to instead of masquerading, at most one per family (see {@link iptablesNatRules}). */
  snatAddresses?: readonly string[];
  /** iptables/ip6tables commands (tests pick the legacy or nft variant). Default the image's. */
  commands?: IptablesCommands;
}

/**
 * Coil's two rules of one family; with `snatAddress`, `-j SNAT --to-source <it>` instead of
 * MASQUERADE (no port range: the client's source port is kept when free, as in
 * src/netlink/netfilter/nftables.ts's NatRuleOptions.snatAddress). Pure.
 * @throws TypeError when `snatAddress` is not an address of `family`
 */
export function iptablesNatRules(family: 4 | 6, ownAddress: string, outInterface: string, snatAddress?: string): { masquerade: IptablesRule; invalid: IptablesRule; strayDrop?: IptablesRule } {
  const own = `${canonicalAddress(ownAddress)}/${family === 4 ? 32 : 128}`;
  if (snatAddress !== undefined && addressFamily(snatAddress) !== family) throw new TypeError(`SNAT address ${snatAddress} is not an IPv${family} address`);
  const target = snatAddress === undefined ? ['MASQUERADE'] : ['SNAT', '--to-source', canonicalAddress(snatAddress)];
  return {
    masquerade: { table: 'nat', chain: 'POSTROUTING', spec: ['!', '-s', own, '-o', outInterface, '-j', ...target] },
    invalid: { table: 'filter', chain: 'FORWARD', spec: ['-o', outInterface, '-m', 'state', '--state', 'INVALID', '-j', 'DROP'] },
    // Untracked packets from outside to the shared address: why, in src/netlink/netfilter/nftables.ts natRuleset.
    ...(snatAddress !== undefined ? { strayDrop: { table: 'filter', chain: 'FORWARD', spec: ['-i', outInterface, '-d', `${canonicalAddress(snatAddress)}/${family === 4 ? 32 : 128}`, '-m', 'conntrack', '--ctstate', 'NEW', '-j', 'DROP'] } as IptablesRule } : {}),
  };
}

/** {@link NatBackend} on iptables. */
export class IptablesNat implements NatBackend {
  constructor(private readonly o: IptablesNatOptions) {}

  private families(): Array<{ family: 4 | 6; rules: ReturnType<typeof iptablesNatRules> }> {
    const out: Array<{ family: 4 | 6; rules: ReturnType<typeof iptablesNatRules> }> = [];
    for (const a of this.o.podAddresses) {
      const f = addressFamily(a);
      if (f !== undefined && !out.some((x) => x.family === f)) out.push({ family: f, rules: iptablesNatRules(f, a, this.o.outInterface, this.o.snatAddresses?.find((s) => addressFamily(s) === f)) });
    }
    return out;
  }

  private target(family: 4 | 6): { family: 4 | 6; netns?: string; commands?: IptablesCommands } {
    return { family, ...(this.o.netns ? { netns: this.o.netns } : {}), ...(this.o.commands ? { commands: this.o.commands } : {}) };
  }

  async init(): Promise<void> {
    for (const { family, rules } of this.families()) {
      await ensureIptablesRule(this.o.ip, rules.masquerade, this.target(family));
      await ensureIptablesRule(this.o.ip, rules.invalid, this.target(family));
      if (rules.strayDrop) await ensureIptablesRule(this.o.ip, rules.strayDrop, this.target(family));
    }
  }

  async counters(): Promise<NatCountersByFamily> {
    const out: NatCountersByFamily = { 4: undefined, 6: undefined };
    for (const { family, rules } of this.families()) {
      const find = async (r: IptablesRule): Promise<NatCounters['masqueraded'] | undefined> => {
        const text = r.spec.join(' ');
        const hit = (await readIptablesRules(this.o.ip, r.table, this.target(family))).find((s) => s.chain === r.chain && s.text === text);
        return hit && { packets: hit.packets, bytes: hit.bytes };
      };
      const masqueraded = await find(rules.masquerade);
      if (masqueraded) out[family] = { masqueraded, invalid: (await find(rules.invalid)) ?? { packets: 0, bytes: 0 } };
    }
    return out;
  }

  async remove(): Promise<void> {
    for (const { family, rules } of this.families()) {
      await deleteIptablesRule(this.o.ip, rules.masquerade, this.target(family));
      await deleteIptablesRule(this.o.ip, rules.invalid, this.target(family));
      if (rules.strayDrop) await deleteIptablesRule(this.o.ip, rules.strayDrop, this.target(family));
    }
  }
}
