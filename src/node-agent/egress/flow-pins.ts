/**
 * Pins each TCP flow of a client pod to the peer link it started on, so a tunnel can move to
 * another NAT pod for new flows while the established ones finish through the old one — the
 * per-flow drain (docs/egress-failover.md#draining). Per pinned peer link, in the pod's netns:
 * - a slot (flow-pin-slots.ts): conntrack mark `0x636f0000 | slot`, table `117000 + slot` holding
 *   `default dev <link>` (proto 30), rule `prio 1700 fwmark <mark> lookup <table>`;
 * - the netfilter marking on coild's `--backend` (flow-pin-marks.ts), the same backend
 *   originating-only uses: set at the flow's first packet out of the link, restored as the fwmark
 *   of its later packets.
 * A link that goes (deleted: its table empties with it) leaves its flows to the egress rules
 * 1800–2100, i.e. to the tunnel's current link. Synced declaratively, the rules at prio 1700 being
 * the anchor (the state read back after a coild restart).
 *
 * Cost per flow: its conntrack mark (a field every conntrack entry has: no memory); per packet of
 * the pod, one map lookup (nft) or one rule per pinned link (iptables) in postrouting while the
 * mark is 0, one masked compare in output, and for pinned packets a second route lookup.
 *
 * Concurrency: callers serialise calls per pod (as for EgressClient).
 */
import type { NetfilterBackend } from '../../api/v2/keys.js';
import { PROTOCOL_ID } from '../../api/v2/keys.js';
import { syncFlowPinsIptables, syncFlowPinsNft, type FlowPinLink } from '../../netlink/netfilter/flow-pin-marks.js';
import type { IpRunner } from '../../netlink/iproute2/ip-runner.js';
import type { IptablesCommands } from '../../netlink/netfilter/iptables.js';
import { rawRuleFwmark, syncPolicyRules } from '../../netlink/fib-rules.js';
import { readRoutes } from '../../netlink/route.js';
import { rt, type RtApplier, type RtReader, type RtRequest } from '../../netlink/rt-request.js';
import { readRules, type Rule } from '../../netlink/rule.js';
import { FLOW_PIN_RULE_PRIORITY, assignPinSlots, pinMark, pinTable, slotOfTable } from './flow-pin-slots.js';

/** Constructor options of {@link FlowPins}. */
export interface FlowPinsOptions {
  /** Runs nft/iptables; also the kernel reads and writes when `kernel` is absent (an `ip` per call). */
  ip: IpRunner;
  /**
   * Where the pins' tables and rules are read and written, as typed requests: coild's
   * NetlinkExecutor (rtnetlink, no process). Default `ip`.
   */
  kernel?: RtReader & RtApplier;
  backend: NetfilterBackend;
  /** iptables commands (tests pick a variant); default the image's. */
  iptables?: IptablesCommands;
}

/** Applies and removes flow pinning in pod netns. */
export class FlowPins {
  constructor(private readonly o: FlowPinsOptions) {}

  private get kernel(): RtReader & RtApplier {
    return this.o.kernel ?? this.o.ip;
  }

  /**
   * Pins exactly `links` of each family (peer link names); links of a family not given lose theirs.
   * @returns link name → slot, per family
   * @throws NetlinkError when iproute2, nft or iptables fails
   */
  async apply(netns: string, links: Readonly<Record<4 | 6, readonly string[]>>): Promise<Record<4 | 6, Map<string, number>>> {
    const out: Record<4 | 6, Map<string, number>> = { 4: new Map(), 6: new Map() };
    const marks: Partial<Record<4 | 6, FlowPinLink[]>> = {};
    for (const family of [4, 6] as const) {
      const r = await this.applyFamily(netns, family, links[family]);
      out[family] = r.slots;
      if (r.marks !== undefined) marks[family] = r.marks;
    }
    await this.syncMarks(netns, marks);
    return out;
  }

  /** Removes pinning from both families (anchor: the rules at prio 1700). @throws NetlinkError */
  async remove(netns: string): Promise<void> {
    await this.apply(netns, { 4: [], 6: [] });
  }

  /**
   * The slots held now: link name → slot, from the tables named by the rules at prio 1700 and the
   * link their route goes through.
   * @throws NetlinkError
   */
  async current(netns: string, family: 4 | 6): Promise<Map<string, number>> {
    return this.slotsOf(netns, family, await this.rules(netns, family));
  }

  private async slotsOf(netns: string, family: 4 | 6, rules: readonly Rule[]): Promise<Map<string, number>> {
    const slots = new Set(rules.flatMap((r) => {
      const s = slotOfTable(Number(r.table));
      return s !== undefined && rawRuleFwmark(r) === pinMark(s) ? [s] : [];
    }));
    const out = new Map<string, number>();
    // One route dump per pinned table (a handful at most).
    for (const s of slots) {
      for (const r of await readRoutes(this.kernel, { netns, family, table: pinTable(s) })) if (r.dev && r.dst === 'default') out.set(r.dev, s);
    }
    return out;
  }

  /**
   * The kernel half of one family: the pin tables and rules. @returns the slots, and the marks
   * the netfilter shape must hold (undefined: the family had nothing pinned and gets nothing)
   */
  private async applyFamily(netns: string, family: 4 | 6, links: readonly string[]): Promise<{ slots: Map<string, number>; marks?: FlowPinLink[] }> {
    const rules = await this.rules(netns, family);
    // The rules are the anchor: a family with none and no link to pin has nothing to do (one read).
    if (rules.length === 0 && links.length === 0) return { slots: new Map() };
    const existing = await this.slotsOf(netns, family, rules);
    const slots = assignPinSlots(links, existing);
    const held = new Set(rules.flatMap((r) => slotOfTable(Number(r.table)) ?? []));
    const requests: RtRequest[] = [];
    const def = family === 4 ? '0.0.0.0/0' : '::/0';
    // Tables first, rules after: nothing is steered into an empty table that will not stay empty.
    for (const [link, s] of slots) requests.push(rt.routeReplace({ dst: def, dev: link, protocol: PROTOCOL_ID, table: pinTable(s) }));
    const wanted = new Set(slots.values());
    // A slot let go: its table's one route, where it is still there (its link's deletion took it otherwise).
    const routed = new Set(existing.values());
    for (const s of held) if (!wanted.has(s) && routed.has(s)) requests.push(rt.routeDel({ dst: def, table: pinTable(s) }));
    if (requests.length > 0) await this.kernel.apply(requests, { netns });
    await syncPolicyRules(this.kernel, { netns, family, minPriority: FLOW_PIN_RULE_PRIORITY, maxPriority: FLOW_PIN_RULE_PRIORITY,
      desired: [...slots.values()].map((s) => ({ priority: FLOW_PIN_RULE_PRIORITY, fwmark: pinMark(s), table: pinTable(s) })) });
    return { slots, marks: [...slots].map(([name, s]) => ({ name, mark: pinMark(s) })) };
  }

  /**
   * The netfilter half: nftables gets both families' shapes in one `nft -f -` (one process, one
   * transaction per sync); iptables one sync per family's program.
   */
  private async syncMarks(netns: string, marks: Partial<Record<4 | 6, FlowPinLink[]>>): Promise<void> {
    const families = ([4, 6] as const).filter((f) => marks[f] !== undefined);
    if (families.length === 0) return;
    if (this.o.backend === 'iptables') {
      for (const f of families) await syncFlowPinsIptables(this.o.ip, f, marks[f]!, { netns, ...(this.o.iptables ? { commands: this.o.iptables } : {}) });
      return;
    }
    await syncFlowPinsNft(this.o.ip, families.map((f) => [f, marks[f]!] as const), netns);
  }

  private async rules(netns: string, family: 4 | 6): Promise<Rule[]> {
    return (await readRules(this.kernel, { netns, family })).filter((r) => r.priority === FLOW_PIN_RULE_PRIORITY);
  }
}
