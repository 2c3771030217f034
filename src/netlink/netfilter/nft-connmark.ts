/**
 * The originating-only connmark rules on nftables, in Coil's shape (docs/compatibility.md "Originating-only"): table
 * `ip|ip6 mangle`, chain `input` (filter hook input, mangle priority) holding per pod link a set
 * named after the link and the rule `iifname @<link> ct state new,established,related counter
 * ct mark set <ifindex>`, and chain `output` (route hook output, mangle priority) with
 * `ct mark <ifindex> counter meta mark set ct mark`.
 *
 * Coil owns that whole table in a pod's netns and deletes it when the mode is off. Here only what
 * this shape consists of — the chains `input` and `output` and the `ifname` sets — is replaced or
 * deleted, in one `nft -f` transaction; the table goes only when nothing else is left in it (so
 * rules another program put there, e.g. iptables-nft's `INPUT`/`OUTPUT` chains, survive).
 * Rules are tagged with comments `coil-input-<link>` / `coil-output-<link>` (Coil tags the same
 * names as raw rule user data).
 */
import type { IpRunner } from '../iproute2/ip-runner.js';
import { applyNftScript } from './nftables.js';
import { NetlinkError } from '../netlink-error.js';

/** One pod link whose incoming connections keep answering through it. */
export interface ConnmarkLink {
  /** Interface name (also the set's name, as Coil names it). */
  readonly name: string;
  /** Its ifindex: the connmark, the fwmark and the table offset. */
  readonly index: number;
}

/** What {@link readMangleTable} found. */
export interface MangleTable {
  readonly chains: readonly string[];
  /** Sets of type `ifname` (the shape's sets). */
  readonly ifnameSets: readonly string[];
  /** Sets of other types (someone else's). */
  readonly otherSets: readonly string[];
}

const NAME = /^[A-Za-z_][A-Za-z0-9_.-]{0,14}$/;
const OUR_CHAINS = ['input', 'output'] as const;

function fam(family: 4 | 6): 'ip' | 'ip6' {
  return family === 4 ? 'ip' : 'ip6';
}

/**
 * Reads `table <ip|ip6> mangle` with `nft -j list table`.
 * @returns undefined when the table does not exist
 * @throws NetlinkError when nft fails otherwise or prints unparsable JSON
 */
export async function readMangleTable(ip: IpRunner, family: 4 | 6, netns: string | undefined): Promise<MangleTable | undefined> {
  let stdout: string;
  try {
    ({ stdout } = await ip.exec(['nft', '-j', 'list', 'table', fam(family), 'mangle'], netns ? { netns } : {}));
  } catch (err) {
    if (err instanceof NetlinkError && /No such file or directory/.test(err.stderr)) return undefined;
    throw err;
  }
  let doc: { nftables?: Array<{ chain?: { name: string }; set?: { name: string; type: string | string[] } }> };
  try {
    doc = JSON.parse(stdout) as typeof doc;
  } catch (err) {
    throw new NetlinkError('unparsable nft -j output', { argv: ['nft', '-j'], command: 'nft -j list table', stderr: '', exitCode: 0, cause: err });
  }
  const items = doc.nftables ?? [];
  const sets = items.flatMap((i) => (i.set ? [i.set] : []));
  return {
    chains: items.flatMap((i) => (i.chain ? [i.chain.name] : [])),
    ifnameSets: sets.filter((s) => s.type === 'ifname').map((s) => s.name),
    otherSets: sets.filter((s) => s.type !== 'ifname').map((s) => s.name),
  };
}

/**
 * The `nft -f` script that makes the shape hold exactly `links` (one transaction). `current` is the
 * table as read before, so stale sets can be deleted.
 * @throws TypeError on a link name nft cannot take as a set name
 */
export function connmarkScript(family: 4 | 6, links: readonly ConnmarkLink[], current: MangleTable | undefined): string {
  const f = fam(family);
  for (const l of links) if (!NAME.test(l.name) || !Number.isInteger(l.index) || l.index <= 0) throw new TypeError(`bad pod link ${JSON.stringify(l)}`);
  const wanted = new Set(links.map((l) => l.name));
  return [
    `add table ${f} mangle`,
    `add chain ${f} mangle input { type filter hook input priority mangle; policy accept; }`,
    `add chain ${f} mangle output { type route hook output priority mangle; policy accept; }`,
    `flush chain ${f} mangle input`,
    `flush chain ${f} mangle output`,
    ...(current?.ifnameSets ?? []).filter((s) => !wanted.has(s)).map((s) => `delete set ${f} mangle ${s}`),
    ...links.flatMap((l) => [
      `add set ${f} mangle ${l.name} { type ifname; }`,
      `flush set ${f} mangle ${l.name}`,
      `add element ${f} mangle ${l.name} { "${l.name}" }`,
      `add rule ${f} mangle input iifname @${l.name} ct state new,established,related counter ct mark set ${l.index} comment "coil-input-${l.name}"`,
      `add rule ${f} mangle output ct mark ${l.index} counter meta mark set ct mark comment "coil-output-${l.name}"`,
    ]),
    '',
  ].join('\n');
}

/** The script that removes the shape from `current`, and the table when nothing else is left. */
export function connmarkRemovalScript(family: 4 | 6, current: MangleTable): string {
  const f = fam(family);
  const chains = OUR_CHAINS.filter((c) => current.chains.includes(c));
  const others = current.chains.filter((c) => !(OUR_CHAINS as readonly string[]).includes(c));
  if (others.length === 0 && current.otherSets.length === 0) return `delete table ${f} mangle\n`;
  if (chains.length === 0 && current.ifnameSets.length === 0) return '';
  return [
    ...chains.flatMap((c) => [`flush chain ${f} mangle ${c}`, `delete chain ${f} mangle ${c}`]),
    ...current.ifnameSets.map((s) => `delete set ${f} mangle ${s}`),
    '',
  ].join('\n');
}

/**
 * Makes the shape of `family` hold exactly `links`; with none, removes it.
 * @throws NetlinkError when nft refuses
 */
export async function syncConnmarkNft(ip: IpRunner, family: 4 | 6, links: readonly ConnmarkLink[], netns: string | undefined): Promise<void> {
  const current = await readMangleTable(ip, family, netns);
  const target = netns ? { netns } : {};
  if (links.length > 0) return applyNftScript(ip, connmarkScript(family, links, current), target);
  const script = current && connmarkRemovalScript(family, current);
  if (script) await applyNftScript(ip, script, target);
}
