/**
 * The egress pod's NAT rules in nftables tables of coil's own (`table ip coil-egress`,
 * `table ip6 coil-egress`), loaded with `nft -f -` in one transaction. Coil adds chains to the
 * shared `nat`/`filter` tables; a table of our own is never touched by anyone else and can be
 * replaced or deleted whole, which makes re-applying idempotent and teardown exact.
 *
 * @see docs/compatibility.md#the-nat-pod, docs/compatibility.md#metric-names-and-types,
 *   docs/compatibility.md#metrics-gaps
 */
import type { IpRunner, RunTarget } from '../iproute2/ip-runner.js';
import { NetlinkError } from '../netlink-error.js';
import { canonicalAddress, formatAddress } from '../../ipam/ip-address.js';
import { addressFamily, parseRoutePrefix } from '../cidr.js';

/** Comment of the rule dropping untracked packets to the shared SNAT address ({@link NatRuleOptions.snatAddress}). */
export const NFT_SHARED_STRAY_COMMENT = 'coil-egress-shared-stray';
/** Name of coil's table in both the `ip` and `ip6` families. */
export const NFT_EGRESS_TABLE = 'coil-egress';
/** Comment of the masquerade rule: how its counter is found when reading counters back. */
export const NFT_MASQUERADE_COMMENT = 'coil-egress-masquerade';
/** Comment of the invalid-state drop rule: how its counter is found when reading counters back. */
export const NFT_INVALID_COMMENT = 'coil-egress-invalid';

/** What one family's NAT table does. */
export interface NatRuleOptions {
  family: 4 | 6;
  /** Interface facing the outside; Coil hard-codes `eth0`. */
  outInterface: string;
  /** The egress pod's own address of this family: its own traffic is not masqueraded. */
  ownAddress: string;
  /**
   * An address of this family to SNAT to instead of masquerading to the pod's own address: an
   * address that outlives the pod, so that another NAT pod SNATing to it picks the pod's flows up
   * (docs/egress-failover.md#sessions-across-the-loss-of-a-nat-pod). No port range: the kernel
   * keeps the client's source port whenever that tuple is free (nf_nat_core.c get_unique_tuple,
   * "try the original tuple first"), so two NAT pods map one flow to the same address and port.
   */
  snatAddress?: string;
}

/** Packet and byte counts of one rule. */
export interface NftCounter {
  packets: number;
  bytes: number;
}

/** The counters of one family's table. */
export interface NatCounters {
  /** Packets masqueraded out of `outInterface` (first packet of each connection only: nat chains see no others). */
  masqueraded: NftCounter;
  /** Forwarded packets in conntrack state invalid, dropped. */
  invalid: NftCounter;
}

const NAME = /^[A-Za-z0-9_.-]{1,15}$/;

/**
 * The `nft -f` script that (re)creates one family's table atomically: declare, delete, define —
 * so the script succeeds whether or not the table exists, and nothing else is touched.
 *   postrouting (nat, srcnat): `oifname <if> <ip|ip6> saddr != <own> counter masquerade`
 *     (`snat to <address>` with {@link NatRuleOptions.snatAddress}, and in forward
 *     `iifname <if> <ip|ip6> daddr <address> ct state new counter drop`)
 *   forward (filter): `oifname <if> ct state invalid counter drop`
 * @throws TypeError on a bad interface name or an address not of `family`
 */
export function natRuleset(o: NatRuleOptions): string {
  if (!NAME.test(o.outInterface)) throw new TypeError(`bad interface name ${JSON.stringify(o.outInterface)}`);
  const own = parseRoutePrefix(o.ownAddress);
  if (own.family !== o.family) throw new TypeError(`${o.ownAddress} is not an IPv${o.family} address`);
  const fam = o.family === 4 ? 'ip' : 'ip6';
  let translate = 'masquerade';
  const strayDrop: string[] = [];
  if (o.snatAddress !== undefined) {
    if (addressFamily(o.snatAddress) !== o.family) throw new TypeError(`SNAT address ${o.snatAddress} is not an IPv${o.family} address`);
    const shared = canonicalAddress(o.snatAddress);
    translate = `snat to ${shared}`;
    // A packet from outside to the shared address that no flow of this pod expects (the server
    // retransmitting into a flow whose client has not reached this pod yet) would otherwise be
    // tracked as a flow of its own, taking the very tuple the client's flow must be SNATed to.
    strayDrop.push(`    iifname "${o.outInterface}" ${fam} daddr ${shared} ct state new counter drop comment "${NFT_SHARED_STRAY_COMMENT}"`);
  }
  return [
    `table ${fam} ${NFT_EGRESS_TABLE} {}`,
    `delete table ${fam} ${NFT_EGRESS_TABLE}`,
    `table ${fam} ${NFT_EGRESS_TABLE} {`,
    '  chain postrouting {',
    '    type nat hook postrouting priority srcnat; policy accept;',
    `    oifname "${o.outInterface}" ${fam} saddr != ${formatAddress(own.family, own.base)} counter ${translate} comment "${NFT_MASQUERADE_COMMENT}"`,
    '  }',
    '  chain forward {',
    '    type filter hook forward priority filter; policy accept;',
    `    oifname "${o.outInterface}" ct state invalid counter drop comment "${NFT_INVALID_COMMENT}"`,
    ...strayDrop,
    '  }',
    '}',
    '',
  ].join('\n');
}

/**
 * Loads `script` with `nft -f -` (one atomic transaction).
 * @throws NetlinkError when nft refuses it (message in `stderr`) or cannot run
 */
export async function applyNftScript(ip: IpRunner, script: string, target: Pick<RunTarget, 'netns'> & { nftPath?: string } = {}): Promise<void> {
  await ip.exec([target.nftPath ?? 'nft', '-f', '-'], { ...(target.netns ? { netns: target.netns } : {}), input: script });
}

/** (Re)creates one family's NAT table. @throws as {@link natRuleset} and {@link applyNftScript} */
export function applyNatRules(ip: IpRunner, o: NatRuleOptions, target: Pick<RunTarget, 'netns'> & { nftPath?: string } = {}): Promise<void> {
  return applyNftScript(ip, natRuleset(o), target);
}

/** Deletes one family's table; a missing table is fine. @throws NetlinkError on other failures */
export async function deleteNatRules(ip: IpRunner, family: 4 | 6, target: Pick<RunTarget, 'netns'> & { nftPath?: string } = {}): Promise<void> {
  const fam = family === 4 ? 'ip' : 'ip6';
  await applyNftScript(ip, `table ${fam} ${NFT_EGRESS_TABLE} {}\ndelete table ${fam} ${NFT_EGRESS_TABLE}\n`, target);
}

interface NftJson {
  nftables?: Array<{ rule?: { comment?: string; expr?: Array<{ counter?: { packets: number; bytes: number } }> } }>;
}

/**
 * Reads the counters of one family's table with `nft -j list table`.
 * @returns undefined when the table does not exist
 * @throws NetlinkError when nft fails otherwise or prints unparsable JSON
 */
export async function readNatCounters(ip: IpRunner, family: 4 | 6, target: Pick<RunTarget, 'netns'> & { nftPath?: string } = {}): Promise<NatCounters | undefined> {
  const fam = family === 4 ? 'ip' : 'ip6';
  let stdout: string;
  try {
    ({ stdout } = await ip.exec([target.nftPath ?? 'nft', '-j', 'list', 'table', fam, NFT_EGRESS_TABLE], target.netns ? { netns: target.netns } : {}));
  } catch (err) {
    if (err instanceof NetlinkError && /No such file or directory/.test(err.stderr)) return undefined;
    throw err;
  }
  return parseNatCounters(stdout);
}

/**
 * Extracts the counters of the commented rules from `nft -j list table` output.
 * @throws NetlinkError when the text is not JSON
 */
export function parseNatCounters(json: string): NatCounters {
  let doc: NftJson;
  try {
    doc = JSON.parse(json) as NftJson;
  } catch (err) {
    throw new NetlinkError('unparsable nft -j output', { argv: ['nft', '-j'], command: 'nft -j list table', stderr: '', exitCode: 0, cause: err });
  }
  const out: NatCounters = { masqueraded: { packets: 0, bytes: 0 }, invalid: { packets: 0, bytes: 0 } };
  for (const item of doc.nftables ?? []) {
    const counter = item.rule?.expr?.find((e) => e.counter)?.counter;
    if (!counter) continue;
    if (item.rule?.comment === NFT_MASQUERADE_COMMENT) out.masqueraded = { packets: counter.packets, bytes: counter.bytes };
    if (item.rule?.comment === NFT_INVALID_COMMENT) out.invalid = { packets: counter.packets, bytes: counter.bytes };
  }
  return out;
}
