/**
 * Originating-only egress (coild `--enable-originating-only`, Coil 2.12 #337), inside a client
 * pod's netns: connections that came IN through a pod link are answered through that link, not
 * through the egress tunnel, so a pod with an Egress can still serve clients that reach it
 * directly. Per pod link with a global address of a family (docs/compatibility.md "Originating-only"):
 * - its main-table routes are copied into table `1000 + ifindex`;
 * - rule prio 1000 `fwmark <ifindex> lookup 1000+<ifindex>`;
 * - connmark rules on the chosen backend (iptables-connmark.ts, nft-connmark.ts): a connection
 *   entering through the link (NEW, ESTABLISHED, RELATED) gets connmark <ifindex>, and the pod's
 *   own packets of such a connection get it restored as their fwmark — which selects the rule.
 * Everything is synced declaratively: applying again is a no-op, a link that went or changed its
 * index loses its table, rule and netfilter rules, and {@link OriginatingOnly.remove} (the mode
 * off, or no Egress left) takes all of it away. The rules at prio 1000 are the anchor: without
 * one, nothing of the mode is left that matters, so removal from a pod that never had the mode
 * costs one `ip rule` read per family.
 *
 * Concurrency: callers serialise calls per pod (as for EgressClient).
 * @see docs/compatibility.md "Originating-only"
 */
import { ORIGINATING_ONLY_RULE_PRIO, ORIGINATING_ONLY_TABLE_BASE, type NetfilterBackend } from '../../api/v2/keys.js';
import type { BatchLine, IpRunner } from '../../netlink/iproute2/ip-runner.js';
import { syncConnmarkIptables } from '../../netlink/netfilter/iptables-connmark.js';
import type { IptablesCommands } from '../../netlink/netfilter/iptables.js';
import { syncConnmarkNft, type ConnmarkLink } from '../../netlink/netfilter/nft-connmark.js';
import { rawRuleFwmark, syncPolicyRules } from '../../netlink/fib-rules.js';
import type { Rule } from '../../netlink/rule.js';

/** Constructor options of {@link OriginatingOnly}. */
export interface OriginatingOnlyOptions {
  ip: IpRunner;
  backend: NetfilterBackend;
  /** iptables commands (tests pick a variant); default the image's. */
  iptables?: IptablesCommands;
}

/** A route of `ip -json route show` with the fields copied. */
interface RawRoute {
  dst: string;
  gateway?: string;
  dev?: string;
  protocol?: string;
  scope?: string;
  prefsrc?: string;
  metric?: number;
  flags?: string[];
  type?: string;
}

interface RawLink {
  ifindex: number;
  ifname: string;
  addr_info?: Array<{ scope?: string }>;
}

/** The table of a pod link. */
export function originatingOnlyTable(ifindex: number): number {
  return ORIGINATING_ONLY_TABLE_BASE + ifindex;
}

/** Applies and removes the mode in pod netns. */
export class OriginatingOnly {
  constructor(private readonly o: OriginatingOnlyOptions) {}

  /**
   * Brings `families` to the mode and removes it from the other family.
   * @returns the links configured per family
   * @throws NetlinkError when iproute2, iptables or nft fails
   */
  async apply(netns: string, families: ReadonlyArray<4 | 6>): Promise<Record<4 | 6, ConnmarkLink[]>> {
    const out: Record<4 | 6, ConnmarkLink[]> = { 4: [], 6: [] };
    for (const family of [4, 6] as const) {
      if (families.includes(family)) out[family] = await this.applyFamily(netns, family);
      else await this.removeFamily(netns, family);
    }
    return out;
  }

  /** Removes the mode from both families. @throws NetlinkError */
  async remove(netns: string): Promise<void> {
    for (const family of [4, 6] as const) await this.removeFamily(netns, family);
  }

  private async applyFamily(netns: string, family: 4 | 6): Promise<ConnmarkLink[]> {
    const ip = this.o.ip;
    const target = { netns, family };
    const linksRaw = await ip.json<RawLink[]>(['addr', 'show'], target);
    const links: ConnmarkLink[] = [];
    const lines: BatchLine[] = [];
    for (const l of linksRaw) {
      if (!(l.addr_info ?? []).some((a) => a.scope === 'global')) continue;
      const routes = (await ip.json<RawRoute[]>(['route', 'show', 'table', 'main', 'dev', l.ifname], target)).filter((r) => r.type === undefined || r.type === 'unicast');
      if (routes.length === 0) continue; // as Coil: a link without routes is left alone
      const table = originatingOnlyTable(l.ifindex);
      links.push({ name: l.ifname, index: l.ifindex });
      const want = new Map(routes.map((r) => [routeKey(r, family), routeLine('replace', { ...r, dev: l.ifname }, family, table)]));
      for (const r of await this.tableRoutes(netns, family, table)) {
        if (!want.has(routeKey(r, family))) lines.push(routeLine('del', r, family, table));
      }
      lines.push(...want.values());
    }
    const stale = (await this.currentTables(netns, family)).filter((t) => !links.some((l) => originatingOnlyTable(l.index) === t));
    for (const t of stale) lines.push(['route', 'flush', 'table', String(t)]);
    // Tables first, rules after: nothing is steered into a half-built table.
    if (lines.length > 0) await ip.batch(lines, target);
    await syncPolicyRules(ip, { netns, family, minPriority: ORIGINATING_ONLY_RULE_PRIO, maxPriority: ORIGINATING_ONLY_RULE_PRIO,
      desired: links.map((l) => ({ priority: ORIGINATING_ONLY_RULE_PRIO, fwmark: l.index, table: originatingOnlyTable(l.index) })) });
    await this.syncConnmark(netns, family, links);
    return links;
  }

  private async removeFamily(netns: string, family: 4 | 6): Promise<void> {
    const tables = await this.currentTables(netns, family);
    if (tables.length === 0) return;
    const ip = this.o.ip;
    // Rules first: from then on marked packets are routed as without the mode.
    await syncPolicyRules(ip, { netns, family, minPriority: ORIGINATING_ONLY_RULE_PRIO, maxPriority: ORIGINATING_ONLY_RULE_PRIO, desired: [] });
    await ip.batch(tables.map((t) => ['route', 'flush', 'table', String(t)]), { netns, family, onError: 'continue' }).catch(() => undefined);
    await this.syncConnmark(netns, family, []);
  }

  /** Tables named by our rules (prio 1000, `fwmark N lookup 1000+N`). */
  private async currentTables(netns: string, family: 4 | 6): Promise<number[]> {
    const rules = await this.o.ip.json<Rule[]>(['rule', 'show'], { netns, family });
    return rules.flatMap((r) => {
      const mark = rawRuleFwmark(r);
      const table = Number(r.table);
      return r.priority === ORIGINATING_ONLY_RULE_PRIO && mark !== undefined && table === originatingOnlyTable(mark) ? [table] : [];
    });
  }

  private async tableRoutes(netns: string, family: 4 | 6, table: number): Promise<RawRoute[]> {
    try {
      return await this.o.ip.json<RawRoute[]>(['route', 'show', 'table', String(table)], { netns, family });
    } catch {
      return []; // a table never created
    }
  }

  private syncConnmark(netns: string, family: 4 | 6, links: readonly ConnmarkLink[]): Promise<void> {
    return this.o.backend === 'iptables'
      ? syncConnmarkIptables(this.o.ip, family, links, { netns, ...(this.o.iptables ? { commands: this.o.iptables } : {}) })
      : syncConnmarkNft(this.o.ip, family, links, netns);
  }
}

function dstOf(r: RawRoute, family: 4 | 6): string {
  return r.dst === 'default' ? (family === 4 ? '0.0.0.0/0' : '::/0') : r.dst;
}

function routeKey(r: RawRoute, family: 4 | 6): string {
  return `${dstOf(r, family)}|${r.gateway ?? ''}`;
}

/** A copy of `r` into `table` (replace), or its deletion there. */
function routeLine(verb: 'replace' | 'del', r: RawRoute, family: 4 | 6, table: number): BatchLine {
  if (verb === 'del') return ['route', 'del', dstOf(r, family), ...(r.gateway ? ['via', r.gateway] : []), 'table', String(table)];
  return ['route', 'replace', dstOf(r, family), ...(r.gateway ? ['via', r.gateway] : []), ...(r.dev ? ['dev', r.dev] : []),
    ...(r.scope && r.scope !== 'global' && r.scope !== 'universe' ? ['scope', r.scope] : []),
    ...(r.protocol ? ['proto', r.protocol] : []), ...(r.prefsrc ? ['src', r.prefsrc] : []),
    ...(r.metric !== undefined ? ['metric', String(r.metric)] : []), ...(r.flags?.includes('onlink') ? ['onlink'] : []),
    'table', String(table)];
}
