/**
 * The originating-only connmark rules on iptables, exactly Coil's (docs/compatibility.md "Originating-only"), per pod
 * link in the `mangle` table:
 *   `-A INPUT -i <link> -m conntrack --ctstate NEW,ESTABLISHED,RELATED -j CONNMARK --set-mark <ifindex>`
 *   `-A OUTPUT -j CONNMARK -m connmark --mark <ifindex> --restore-mark`
 * Synced declaratively: wanted rules are appended unless present; rules of this shape for other
 * links or marks (a link gone, an index changed, the mode turned off) are deleted, found by the
 * form `iptables-save` prints them in (the same for iptables-nft and iptables-legacy).
 */
import type { IpRunner } from '../iproute2/ip-runner.js';
import { deleteIptablesRule, ensureIptablesRule, readIptablesRules, type IptablesCommands, type IptablesRule } from './iptables.js';
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
 * Makes the mangle rules of this shape for `family` exactly those of `links`.
 * @throws NetlinkError when iptables fails
 */
export async function syncConnmarkIptables(ip: IpRunner, family: 4 | 6, links: readonly ConnmarkLink[], o: { netns?: string; commands?: IptablesCommands } = {}): Promise<void> {
  const t = { family, ...o };
  const wantIn = new Set(links.map((l) => `${l.name}|${l.index}`));
  const wantOut = new Set(links.map((l) => l.index));
  for (const saved of await readIptablesRules(ip, 'mangle', t)) {
    const stale = (saved.chain === 'INPUT' && matchStale(SAVED_INPUT.exec(saved.text), (m) => !wantIn.has(`${m[1]}|${parseInt(m[2]!, 16)}`)))
      || (saved.chain === 'OUTPUT' && matchStale(SAVED_OUTPUT.exec(saved.text), (m) => !wantOut.has(parseInt(m[1]!, 16))));
    if (stale) await deleteIptablesRule(ip, { table: 'mangle', chain: saved.chain, spec: saved.text.split(' ') }, t);
  }
  for (const l of links) {
    const r = connmarkRules(l);
    await ensureIptablesRule(ip, r.input, t);
    await ensureIptablesRule(ip, r.output, t);
  }
}

function matchStale(m: RegExpExecArray | null, isStale: (m: RegExpExecArray) => boolean): boolean {
  return m !== null && isStale(m);
}
