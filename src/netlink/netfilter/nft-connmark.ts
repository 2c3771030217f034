/**
 * The originating-only connmark rules on nftables, in Coil's shape (docs/compatibility.md "Originating-only"): table
 * `ip|ip6 mangle`, chain `input` (filter hook input, mangle priority) holding per pod link a set
 * named after the link and the rule `iifname @<link> ct state new,established,related counter
 * ct mark set <ifindex>`, and chain `output` (route hook output, mangle priority) with
 * `ct mark <ifindex> counter meta mark set ct mark`.
 *
 * Coil owns that whole table in a pod's netns and deletes it when the mode is off. Here only what
 * this shape consists of — the chains `input` and `output` and the `ifname` sets — is replaced or
 * deleted, in one `nft -f` transaction for both families after one read of the ruleset; the table goes only when nothing else is left in it (so
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
 * Reads the tables `ip mangle` and `ip6 mangle` in one process, `nft -j list ruleset` (a pod's
 * ruleset is a few tables).
 * @returns each family's table, undefined where it does not exist
 * @throws NetlinkError when nft fails or prints unparsable JSON
 */
export async function readMangleTables(ip: IpRunner, netns: string | undefined): Promise<Record<4 | 6, MangleTable | undefined>> {
  const { stdout } = await ip.exec(['nft', '-j', 'list', 'ruleset'], netns ? { netns } : {});
  type Item = { table?: { family: string; name: string }; chain?: { family: string; table: string; name: string }; set?: { family: string; table: string; name: string; type: string | string[] } };
  let doc: { nftables?: Item[] };
  try {
    doc = JSON.parse(stdout) as typeof doc;
  } catch (err) {
    throw new NetlinkError('unparsable nft -j output', { argv: ['nft', '-j'], command: 'nft -j list ruleset', stderr: '', exitCode: 0, cause: err });
  }
  const items = doc.nftables ?? [];
  const tableOf = (family: 4 | 6): MangleTable | undefined => {
    const f = fam(family);
    if (!items.some((i) => i.table?.family === f && i.table.name === 'mangle')) return undefined;
    const chains = items.flatMap((i) => (i.chain?.family === f && i.chain.table === 'mangle' ? [i.chain.name] : []));
    const sets = items.flatMap((i) => (i.set?.family === f && i.set.table === 'mangle' ? [i.set] : []));
    return {
      chains,
      ifnameSets: sets.filter((x) => x.type === 'ifname').map((x) => x.name),
      otherSets: sets.filter((x) => x.type !== 'ifname').map((x) => x.name),
    };
  };
  return { 4: tableOf(4), 6: tableOf(6) };
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
 * Makes the shape of each family given hold exactly its links; with none, removes it: one read of
 * both families' tables and one `nft -f -` transaction for all (none when nothing is to change).
 * @throws NetlinkError when nft refuses
 */
export async function syncConnmarkNft(ip: IpRunner, shapes: ReadonlyArray<readonly [4 | 6, readonly ConnmarkLink[]]>, netns: string | undefined): Promise<void> {
  if (shapes.length === 0) return;
  const current = await readMangleTables(ip, netns);
  const script = shapes.map(([family, links]) => {
    if (links.length > 0) return connmarkScript(family, links, current[family]);
    const table = current[family];
    return table ? connmarkRemovalScript(family, table) : '';
  }).join('');
  if (script) await applyNftScript(ip, script, netns ? { netns } : {});
}
