/**
 * The netfilter half of pinning a client pod's TCP flows to the peer link they started on
 * (docs/egress-failover.md#draining), on the backend the client netns already uses for
 * originating-only (nft-connmark.ts, iptables-connmark.ts), per family:
 * - at a TCP packet leaving through a pinned link while its conntrack mark is still 0 (the flow's
 *   first packet, or the first after the link was pinned), the conntrack mark is set to the
 *   link's mark;
 * - the pod's own packets of a flow whose conntrack mark lies in {@link FLOW_PIN_MARK_BASE}'s
 *   range get it restored as their fwmark in the route hook of output, so they are routed again
 *   by the fwmark rules (flow-pins.ts in src/node-agent/egress).
 * Marks outside the range — originating-only's, which are pod link ifindexes — are never set over
 * (`ct mark 0`) nor restored here.
 *
 * nftables: a table of its own, `ip|ip6 coil-flow-pin`, replaced whole in one `nft -f`
 * transaction (a map `oifname → mark`), deleted with the last link. iptables: in `mangle`,
 * `-A POSTROUTING -o <link> -p tcp -m connmark --mark 0 -j CONNMARK --set-mark <mark>` per link
 * and one `-A OUTPUT -m connmark --mark <base>/<mask> -j CONNMARK --restore-mark`, synced by the
 * form `iptables-save` prints them in (the same for iptables-nft and iptables-legacy).
 */
import type { IpRunner } from '../iproute2/ip-runner.js';
import { syncIptablesShape, type IptablesCommands, type IptablesRule, type WantedRule } from './iptables.js';
import { applyNftScript } from './nftables.js';

/** The range of conntrack marks that pin a flow: `0x636f0000 | slot` ("co"), slot 1–0xffff. */
export const FLOW_PIN_MARK_BASE = 0x636f_0000;
/** The mask of {@link FLOW_PIN_MARK_BASE}'s range. */
export const FLOW_PIN_MARK_MASK = 0xffff_0000;
/** The nftables table of the shape. */
export const NFT_FLOW_PIN_TABLE = 'coil-flow-pin';

/** One peer link whose flows are pinned, and its mark (in the range). */
export interface FlowPinLink {
  readonly name: string;
  readonly mark: number;
}

const NAME = /^[A-Za-z0-9_.-]{1,15}$/;
const hex = (n: number): string => `0x${n.toString(16).padStart(8, '0')}`;

function check(links: readonly FlowPinLink[]): void {
  for (const l of links) {
    if (!NAME.test(l.name) || !Number.isInteger(l.mark) || ((l.mark & FLOW_PIN_MARK_MASK) >>> 0) !== FLOW_PIN_MARK_BASE || (l.mark & 0xffff) === 0) {
      throw new TypeError(`bad pinned link ${JSON.stringify(l)}`);
    }
  }
}

/**
 * The `nft -f` script that makes the shape of `family` hold exactly `links` (none: no table).
 * Pure. @throws TypeError on a link name or mark outside the shape
 */
export function flowPinNftScript(family: 4 | 6, links: readonly FlowPinLink[]): string {
  check(links);
  const t = `${family === 4 ? 'ip' : 'ip6'} ${NFT_FLOW_PIN_TABLE}`;
  // `add` then `delete`: deletes the table whether it existed or not, in the same transaction.
  const lines = [`add table ${t}`, `delete table ${t}`];
  if (links.length > 0) {
    lines.push(`add table ${t}`,
      `add chain ${t} postrouting { type filter hook postrouting priority mangle; policy accept; }`,
      `add chain ${t} output { type route hook output priority mangle; policy accept; }`,
      `add rule ${t} postrouting meta l4proto tcp ct mark 0 ct mark set oifname map { ${links.map((l) => `"${l.name}" : ${hex(l.mark)}`).join(', ')} } comment "coil-flow-pin"`,
      `add rule ${t} output ct mark & ${hex(FLOW_PIN_MARK_MASK)} == ${hex(FLOW_PIN_MARK_BASE)} meta mark set ct mark comment "coil-flow-pin-restore"`);
  }
  return `${lines.join('\n')}\n`;
}

/**
 * Makes the nftables shape of each family given hold exactly its links, in one `nft -f -` (one
 * process, one transaction). @throws NetlinkError when nft refuses
 */
export function syncFlowPinsNft(ip: IpRunner, shapes: ReadonlyArray<readonly [4 | 6, readonly FlowPinLink[]]>, netns: string | undefined): Promise<void> {
  return applyNftScript(ip, shapes.map(([family, links]) => flowPinNftScript(family, links)).join(''), netns ? { netns } : {});
}

/** The iptables rules of the shape for `links`. Pure. @throws TypeError as {@link flowPinNftScript} */
export function flowPinIptablesRules(links: readonly FlowPinLink[]): IptablesRule[] {
  check(links);
  if (links.length === 0) return [];
  return [
    ...links.map((l): IptablesRule => ({ table: 'mangle', chain: 'POSTROUTING', spec: ['-o', l.name, '-p', 'tcp', '-m', 'connmark', '--mark', '0', '-j', 'CONNMARK', '--set-mark', hex(l.mark)] })),
    { table: 'mangle', chain: 'OUTPUT', spec: ['-m', 'connmark', '--mark', `${hex(FLOW_PIN_MARK_BASE)}/${hex(FLOW_PIN_MARK_MASK)}`, '-j', 'CONNMARK', '--restore-mark'] },
  ];
}

// The rules as iptables-save prints them back.
const SAVED_SET = /^-o (\S+) -p tcp -m connmark --mark 0x0 -j CONNMARK --set-xmark 0x([0-9a-f]+)\/0xffffffff$/;
const SAVED_RESTORE = `-m connmark --mark ${`0x${FLOW_PIN_MARK_BASE.toString(16)}`}/${`0x${FLOW_PIN_MARK_MASK.toString(16)}`} -j CONNMARK --restore-mark --nfmask 0xffffffff --ctmask 0xffffffff`;

/**
 * Makes the iptables shape of `family` hold exactly `links`: one `-save` read, one
 * `-restore --noflush` batch when something differs.
 * @throws NetlinkError when iptables fails
 */
export async function syncFlowPinsIptables(ip: IpRunner, family: 4 | 6, links: readonly FlowPinLink[], o: { netns?: string; commands?: IptablesCommands } = {}): Promise<void> {
  const rules = flowPinIptablesRules(links);
  const want: WantedRule[] = rules.map((rule, i) => ({
    rule, savedText: i < links.length ? `-o ${links[i]!.name} -p tcp -m connmark --mark 0x0 -j CONNMARK --set-xmark ${hex(links[i]!.mark)}/0xffffffff` : SAVED_RESTORE,
  }));
  await syncIptablesShape(ip, 'mangle', want, (saved) => (saved.chain === 'POSTROUTING' && SAVED_SET.test(saved.text)) || (saved.chain === 'OUTPUT' && saved.text === SAVED_RESTORE), { family, ...o });
}
