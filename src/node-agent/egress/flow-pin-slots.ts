/**
 * Slots of pinned peer links in a client pod's netns (docs/egress-failover.md#draining): each
 * peer link whose TCP flows are pinned to it holds a slot `s` (1–0xffff), which gives its
 * conntrack mark `0x636f0000 | s`, its rule `prio 1700 fwmark <mark> lookup <table>` and its
 * table `117000 + s` routing everything through the link. The slot of a link is read back from
 * the netns (the rule and the table's route), so a coild restart keeps every link's mark. Pure.
 */
import { FLOW_PIN_MARK_BASE } from '../../netlink/netfilter/flow-pin-marks.js';

/** Priority of the pin rules: below Coil's egress rules (1800–2100), above originating-only's 1000. */
export const FLOW_PIN_RULE_PRIORITY = 1700;
/** Tables `117000 + slot`: far from Coil's 116–119 and originating-only's `1000 + ifindex`. */
export const FLOW_PIN_TABLE_BASE = 117_000;
/** Highest slot: the low 16 bits of the mark. */
export const FLOW_PIN_MAX_SLOT = 0xffff;

/** The conntrack mark and fwmark of slot `s`. */
export function pinMark(slot: number): number {
  return (FLOW_PIN_MARK_BASE | slot) >>> 0;
}

/** The table of slot `s`. */
export function pinTable(slot: number): number {
  return FLOW_PIN_TABLE_BASE + slot;
}

/** The slot of a pin table id, or undefined for another table. */
export function slotOfTable(table: number): number | undefined {
  const s = table - FLOW_PIN_TABLE_BASE;
  return Number.isInteger(s) && s >= 1 && s <= FLOW_PIN_MAX_SLOT ? s : undefined;
}

/**
 * The slot of each of `links`: the one it holds in `existing` when it has one, else a free one —
 * the first free after the highest slot held, wrapping, so that a slot freed by a deleted link is
 * reused as late as possible (a late packet of one of its flows, still carrying its mark, would
 * be routed through the link that took the slot over; with tables gone it falls through to the
 * egress rules instead).
 * @param links peer link names, each once
 * @param existing link name → slot, as read from the netns (links not in `links` are dropped)
 * @returns link name → slot, for `links` only
 * @throws RangeError when more than {@link FLOW_PIN_MAX_SLOT} links are asked for
 */
export function assignPinSlots(links: readonly string[], existing: ReadonlyMap<string, number>): Map<string, number> {
  if (links.length > FLOW_PIN_MAX_SLOT) throw new RangeError(`${links.length} pinned links: at most ${FLOW_PIN_MAX_SLOT}`);
  const out = new Map<string, number>();
  const used = new Set<number>();
  for (const l of links) {
    const s = existing.get(l);
    if (s !== undefined && s >= 1 && s <= FLOW_PIN_MAX_SLOT && !used.has(s)) {
      out.set(l, s);
      used.add(s);
    }
  }
  let next = Math.max(0, ...existing.values(), ...used) % FLOW_PIN_MAX_SLOT;
  for (const l of links) {
    if (out.has(l)) continue;
    do next = (next % FLOW_PIN_MAX_SLOT) + 1; while (used.has(next));
    out.set(l, next);
    used.add(next);
  }
  return out;
}
