/**
 * The originating-only connmark rules on iptables, exactly Coil's (docs/compatibility.md "Originating-only"), per pod
 * link in the `mangle` table:
 *   `-A INPUT -i <link> -m conntrack --ctstate NEW,ESTABLISHED,RELATED -j CONNMARK --set-mark <ifindex>`
 *   `-A OUTPUT -j CONNMARK -m connmark --mark <ifindex> --restore-mark`
 * Synced declaratively, in one `-restore --noflush` batch: wanted rules are appended unless present; rules of this shape for other
 * links or marks (a link gone, an index changed, the mode turned off) are deleted, found by the
 * form `iptables-save` prints them in (the same for iptables-nft and iptables-legacy).
 */
import type { IpRunner } from '../iproute2/ip-runner.js';
import { syncIptablesShape, type IptablesCommands, type IptablesRule, type WantedRule } from './iptables.js';
import type { ConnmarkLink } from './nft-connmark.js';

/** Coil's two rules for one link. Pure. */
export function connmarkRules(link: ConnmarkLink): { input: IptablesRule; output: IptablesRule } {
  const mark = String(link.index);
  return {
    input: { table: 'mangle', chain: 'INPUT', spec: ['-i', link.name, '-m', 'conntrack', '--ctstate', 'NEW,ESTABLISHED,RELATED', '-j', 'CONNMARK', '--set-mark', mark] },
    output: { table: 'mangle', chain: 'OUTPUT', spec: ['-j', 'CONNMARK', '-m', 'connmark', '--mark', mark, '--restore-mark'] },
  };
}

// The two rules as iptables-save prints them back.
const SAVED_INPUT = /^-i (\S+) -m conntrack --ctstate NEW,RELATED,ESTABLISHED -j CONNMARK --set-xmark 0x([0-9a-f]+)\/0xffffffff$/;
const SAVED_OUTPUT = /^-m connmark --mark 0x([0-9a-f]+) -j CONNMARK --restore-mark --nfmask 0xffffffff --ctmask 0xffffffff$/;

/**
 * Makes the mangle rules of this shape for `family` exactly those of `links`: one `-save` read,
 * one `-restore --noflush` batch when something differs.
 * @throws NetlinkError when iptables fails
 */
export async function syncConnmarkIptables(ip: IpRunner, family: 4 | 6, links: readonly ConnmarkLink[], o: { netns?: string; commands?: IptablesCommands } = {}): Promise<void> {
  const want: WantedRule[] = links.flatMap((l) => {
    const r = connmarkRules(l);
    const mark = `0x${l.index.toString(16)}`;
    return [
      { rule: r.input, savedText: `-i ${l.name} -m conntrack --ctstate NEW,RELATED,ESTABLISHED -j CONNMARK --set-xmark ${mark}/0xffffffff` },
      { rule: r.output, savedText: `-m connmark --mark ${mark} -j CONNMARK --restore-mark --nfmask 0xffffffff --ctmask 0xffffffff` },
    ];
  });
  await syncIptablesShape(ip, 'mangle', want, (saved) => (saved.chain === 'INPUT' && SAVED_INPUT.test(saved.text)) || (saved.chain === 'OUTPUT' && SAVED_OUTPUT.test(saved.text)), { family, ...o });
}
