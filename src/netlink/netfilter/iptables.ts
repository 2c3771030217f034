/**
 * iptables rules through the iptables/ip6tables commands, as Coil's iptables backend programs them
 * (go-iptables runs the same commands): append a rule unless an equal one exists (`-C`, then
 * `-A`), delete it while one exists, and read rule counters back from `iptables-save -c`. A
 * shape coil syncs whole (flow pins, originating-only's connmark) is one `-save` read and one
 * `-restore --noflush` batch ({@link syncIptablesShape}).
 *
 * Which variant runs — iptables-nft (nf_tables underneath) or iptables-legacy (x_tables) — is the
 * host image's choice: `iptables` is whatever Debian's alternatives select (iptables-nft by
 * default); {@link IptablesCommands} names other binaries (tests run both variants). The rules
 * coil writes print the same in both (`iptables-save` output is compared in the netns tests).
 *
 * @see docs/compatibility.md "Egress NAT", "Originating-only", "iptables-nft or iptables-legacy"
 */
import type { IpRunner } from '../iproute2/ip-runner.js';
import { NetlinkError } from '../netlink-error.js';

/** The commands per family; default {@link DEFAULT_IPTABLES_COMMANDS}. `<command>-save` must exist beside each. */
export interface IptablesCommands {
  readonly 4: string;
  readonly 6: string;
}

/** The image's own iptables (Debian alternatives: iptables-nft unless switched to legacy). */
export const DEFAULT_IPTABLES_COMMANDS: IptablesCommands = Object.freeze({ 4: 'iptables', 6: 'ip6tables' });

/** One rule: table, chain and the rule specification after `-A <chain>`. */
export interface IptablesRule {
  readonly table: 'nat' | 'filter' | 'mangle';
  readonly chain: string;
  readonly spec: readonly string[];
}

/** Where and with what to run. */
export interface IptablesTarget {
  readonly family: 4 | 6;
  readonly netns?: string;
  readonly commands?: IptablesCommands;
}

/** One `-A` line of `iptables-save -c`: the chain, the rule text after the chain, and its counters. */
export interface SavedRule {
  readonly chain: string;
  /** The rule as iptables-save prints it after `-A <chain> ` (its canonical form). */
  readonly text: string;
  readonly packets: number;
  readonly bytes: number;
}

/** Seconds to wait for the xtables lock (legacy variant; iptables-nft needs none). */
const LOCK_WAIT_S = '5';
/** Exit status of `iptables -C` for "no such rule" (2 is a usage error, 4 a resource problem). */
const EXIT_NO_SUCH_RULE = 1;

function command(t: IptablesTarget): string {
  return (t.commands ?? DEFAULT_IPTABLES_COMMANDS)[t.family];
}

function run(ip: IpRunner, t: IptablesTarget, argv: readonly string[]): Promise<{ stdout: string }> {
  return ip.exec(argv, t.netns !== undefined ? { netns: t.netns } : {});
}

/**
 * Whether an equal rule exists (`-C`).
 * @throws NetlinkError when iptables fails otherwise (unknown match or target, no such table)
 */
export async function iptablesRuleExists(ip: IpRunner, rule: IptablesRule, t: IptablesTarget): Promise<boolean> {
  try {
    await run(ip, t, [command(t), '-w', LOCK_WAIT_S, '-t', rule.table, '-C', rule.chain, ...rule.spec]);
    return true;
  } catch (err) {
    if (err instanceof NetlinkError && err.exitCode === EXIT_NO_SUCH_RULE) return false;
    throw err;
  }
}

/**
 * Appends `rule` unless an equal one exists (go-iptables' AppendUnique, as Coil does).
 * @returns true when it was appended
 * @throws NetlinkError as {@link iptablesRuleExists}, or when the append fails
 */
export async function ensureIptablesRule(ip: IpRunner, rule: IptablesRule, t: IptablesTarget): Promise<boolean> {
  if (await iptablesRuleExists(ip, rule, t)) return false;
  await run(ip, t, [command(t), '-w', LOCK_WAIT_S, '-t', rule.table, '-A', rule.chain, ...rule.spec]);
  return true;
}

/**
 * Deletes every rule equal to `rule` (Coil's DeleteIfExists, repeated so a duplicate goes too).
 * @returns how many were deleted
 * @throws NetlinkError as {@link iptablesRuleExists}
 */
export async function deleteIptablesRule(ip: IpRunner, rule: IptablesRule, t: IptablesTarget): Promise<number> {
  let n = 0;
  while (await iptablesRuleExists(ip, rule, t)) {
    await run(ip, t, [command(t), '-w', LOCK_WAIT_S, '-t', rule.table, '-D', rule.chain, ...rule.spec]);
    n++;
  }
  return n;
}

/**
 * The rules of `table` with their counters, from `<command>-save -c -t <table>`.
 * @throws NetlinkError when the save command fails
 */
export async function readIptablesRules(ip: IpRunner, table: IptablesRule['table'], t: IptablesTarget): Promise<SavedRule[]> {
  const { stdout } = await run(ip, t, [`${command(t)}-save`, '-c', '-t', table]);
  return parseIptablesSave(stdout);
}

/** A rule a shape wants: how to add it, and the text `iptables-save` prints it back as. */
export interface WantedRule {
  readonly rule: IptablesRule;
  /** Its canonical form, after `-A <chain> ` in `iptables-save` output. */
  readonly savedText: string;
}

/**
 * Makes the rules of one shape in `table` exactly `want`: one `<command>-save` read, then the
 * deletions of the shape's rules not wanted (and of duplicates) and the appends of the missing
 * ones in one `<command>-restore --noflush` (one process, one transaction); none when nothing
 * differs. `isOurs` picks the shape's rules among the saved ones (other rules are left alone).
 * @returns how many rules were deleted and appended
 * @throws NetlinkError when the save or restore command fails (nothing is half-applied)
 * @throws TypeError when a rule token holds whitespace or a quote (restore input splits on them)
 */
export async function syncIptablesShape(ip: IpRunner, table: IptablesRule['table'], want: readonly WantedRule[], isOurs: (saved: SavedRule) => boolean, t: IptablesTarget): Promise<{ deleted: number; added: number }> {
  const wanted = new Map(want.map((w) => [`${w.rule.chain} ${w.savedText}`, w]));
  const seen = new Set<string>();
  const lines: string[] = [];
  let deleted = 0;
  for (const saved of await readIptablesRules(ip, table, t)) {
    const key = `${saved.chain} ${saved.text}`;
    const isWanted = wanted.has(key) && !seen.has(key);
    if (isWanted) seen.add(key);
    else if (isOurs(saved) || wanted.has(key)) {
      lines.push(`-D ${saved.chain} ${saved.text}`);
      deleted++;
    }
  }
  let added = 0;
  for (const [key, w] of wanted) {
    if (seen.has(key)) continue;
    for (const token of w.rule.spec) if (token === '' || /[\s"']/.test(token)) throw new TypeError(`iptables token ${JSON.stringify(token)} cannot go into restore input`);
    lines.push(`-A ${w.rule.chain} ${w.rule.spec.join(' ')}`);
    added++;
  }
  if (lines.length > 0) {
    await ip.exec([`${command(t)}-restore`, '--noflush', '-w', LOCK_WAIT_S], { ...(t.netns !== undefined ? { netns: t.netns } : {}), input: `*${table}\n${lines.join('\n')}\nCOMMIT\n` });
  }
  return { deleted, added };
}

const SAVE_LINE = /^\[(\d+):(\d+)\] -A (\S+) (.*)$/;

/** The `-A` lines of `iptables-save -c` output. Pure. */
export function parseIptablesSave(text: string): SavedRule[] {
  const out: SavedRule[] = [];
  for (const line of text.split('\n')) {
    const m = SAVE_LINE.exec(line.trim());
    if (m) out.push({ packets: Number(m[1]), bytes: Number(m[2]), chain: m[3]!, text: m[4]! });
  }
  return out;
}
