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
 * costs one rule read per family.
 *
 * Concurrency: callers serialise calls per pod (as for EgressClient).
 * @see docs/compatibility.md "Originating-only"
 */
import { ORIGINATING_ONLY_RULE_PRIO, ORIGINATING_ONLY_TABLE_BASE, type NetfilterBackend } from '../../api/v2/keys.js';
import { readAddrs } from '../../netlink/addr.js';
import type { IpRunner } from '../../netlink/iproute2/ip-runner.js';
import { syncConnmarkIptables } from '../../netlink/netfilter/iptables-connmark.js';
import type { IptablesCommands } from '../../netlink/netfilter/iptables.js';
import { syncConnmarkNft, type ConnmarkLink } from '../../netlink/netfilter/nft-connmark.js';
import { rawRuleFwmark, syncPolicyRules } from '../../netlink/fib-rules.js';
import { readRoutes, routeProtocolNumber, type Route } from '../../netlink/route.js';
import { rt, type RtApplier, type RtReader, type RtRequest } from '../../netlink/rt-request.js';
import { readRules } from '../../netlink/rule.js';

/** Constructor options of {@link OriginatingOnly}. */
export interface OriginatingOnlyOptions {
  /** Runs nft/iptables; also the kernel reads and writes when `kernel` is absent (an `ip` per call). */
  ip: IpRunner;
  /**
   * Reads the pod's addresses, routes and rules and writes the tables and rules: coild's
   * NetlinkExecutor (rtnetlink, no process). Default: `ip`.
   */
  kernel?: RtReader & RtApplier;
  backend: NetfilterBackend;
  /** iptables commands (tests pick a variant); default the image's. */
  iptables?: IptablesCommands;
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

  /** Where typed requests and dumps go: `kernel`, else the IpRunner (iproute2). */
  private get kernel(): RtReader & RtApplier {
    return this.o.kernel ?? this.o.ip;
  }

  private async applyFamily(netns: string, family: 4 | 6): Promise<ConnmarkLink[]> {
    const kernel = this.kernel;
    const inet = family === 4 ? 'inet' : 'inet6';
    const links: ConnmarkLink[] = [];
    const requests: RtRequest[] = [];
    for (const l of await readAddrs(kernel, { netns })) {
      if (!l.addr_info.some((a) => a.family === inet && a.scope === 'global')) continue;
      const routes = (await readRoutes(kernel, { netns, family, dev: l.ifname })).filter((r) => r.type === undefined || r.type === 'unicast');
      if (routes.length === 0) continue; // as Coil: a link without routes is left alone
      const table = originatingOnlyTable(l.ifindex);
      links.push({ name: l.ifname, index: l.ifindex });
      const want = new Map(routes.map((r) => [routeKey(r, family), routeRequest('replace', { ...r, dev: l.ifname }, family, table)]));
      for (const r of await readRoutes(kernel, { netns, family, table })) {
        if (!want.has(routeKey(r, family))) requests.push(routeRequest('del', r, family, table));
      }
      requests.push(...want.values());
    }
    const stale = (await this.currentTables(netns, family)).filter((t) => !links.some((l) => originatingOnlyTable(l.index) === t));
    for (const t of stale) requests.push(...await this.flushRequests(netns, family, t));
    // Tables first, rules after: nothing is steered into a half-built table.
    if (requests.length > 0) await kernel.apply(requests, { netns });
    await syncPolicyRules(kernel, { netns, family, minPriority: ORIGINATING_ONLY_RULE_PRIO, maxPriority: ORIGINATING_ONLY_RULE_PRIO,
      desired: links.map((l) => ({ priority: ORIGINATING_ONLY_RULE_PRIO, fwmark: l.index, table: originatingOnlyTable(l.index) })) });
    await this.syncConnmark(netns, family, links);
    return links;
  }

  private async removeFamily(netns: string, family: 4 | 6): Promise<void> {
    const tables = await this.currentTables(netns, family);
    if (tables.length === 0) return;
    const kernel = this.kernel;
    // Rules first: from then on marked packets are routed as without the mode.
    await syncPolicyRules(kernel, { netns, family, minPriority: ORIGINATING_ONLY_RULE_PRIO, maxPriority: ORIGINATING_ONLY_RULE_PRIO, desired: [] });
    const requests = (await Promise.all(tables.map((t) => this.flushRequests(netns, family, t)))).flat();
    if (requests.length > 0) await kernel.apply(requests, { netns, onError: 'continue' }).catch(() => undefined);
    await this.syncConnmark(netns, family, []);
  }

  /** Tables named by our rules (prio 1000, `fwmark N lookup 1000+N`). */
  private async currentTables(netns: string, family: 4 | 6): Promise<number[]> {
    const rules = await readRules(this.kernel, { netns, family });
    return rules.flatMap((r) => {
      const mark = rawRuleFwmark(r);
      const table = Number(r.table);
      return r.priority === ORIGINATING_ONLY_RULE_PRIO && mark !== undefined && table === originatingOnlyTable(mark) ? [table] : [];
    });
  }

  /** `ip route flush table T` as typed requests: the deletion of every route of `table`. */
  private async flushRequests(netns: string, family: 4 | 6, table: number): Promise<RtRequest[]> {
    return (await readRoutes(this.kernel, { netns, family, table })).map((r) => routeRequest('del', r, family, table));
  }

  private syncConnmark(netns: string, family: 4 | 6, links: readonly ConnmarkLink[]): Promise<void> {
    return this.o.backend === 'iptables'
      ? syncConnmarkIptables(this.o.ip, family, links, { netns, ...(this.o.iptables ? { commands: this.o.iptables } : {}) })
      : syncConnmarkNft(this.o.ip, family, links, netns);
  }
}

function dstOf(r: Route, family: 4 | 6): string {
  return r.dst === 'default' ? (family === 4 ? '0.0.0.0/0' : '::/0') : r.dst;
}

function routeKey(r: Route, family: 4 | 6): string {
  return `${dstOf(r, family)}|${r.gateway ?? ''}`;
}

/** A copy of `r` into `table` (replace: its gateway, device, scope, protocol, source, metric, onlink), or its deletion there. */
function routeRequest(verb: 'replace' | 'del', r: Route, family: 4 | 6, table: number): RtRequest {
  const dst = dstOf(r, family);
  if (verb === 'del') return rt.routeDel({ dst, ...(r.gateway ? { via: r.gateway } : {}), table });
  const protocol = r.protocol === undefined ? undefined : routeProtocolNumber(r.protocol);
  return rt.routeReplace({
    dst, ...(r.gateway ? { via: r.gateway } : {}), ...(r.dev ? { dev: r.dev } : {}),
    ...(r.scope === 'link' || r.scope === 'host' ? { scope: r.scope } : {}),
    ...(protocol !== undefined ? { protocol } : {}), ...(r.prefsrc ? { prefsrc: r.prefsrc } : {}),
    ...(r.metric !== undefined ? { metric: r.metric } : {}), ...(r.flags?.includes('onlink') ? { isOnlink: true } : {}), table,
  });
}
