/**
 * Declarative sync of policy rules (within a priority range) and of the routes of one table: read
 * what the kernel has, delete what is not wanted, add what is missing — Coil's RouteExporter
 * pattern, used for the egress rules 1800–2100 and tables 117/118 (client pods) and for the
 * `iif eth0 lookup 118` rule and table 118 (egress pods).
 *
 * Concurrency: not locked; one sync per netns and table at a time (callers serialise).
 * @see docs/compatibility.md#client-pod-egress-setup, docs/compatibility.md#the-nat-pod;
 *   docs/design.md#kernel-state-is-synced-declaratively
 */
import type { RunTarget } from './iproute2/ip-runner.js';
import { canonicalAddress } from '../ipam/ip-address.js';
import { parseRoutePrefix, routeKey, routeKeyOfDst } from './cidr.js';
import { readRoutes } from './route.js';
import { readRules, type Rule } from './rule.js';
import { rt, type RtApplier, type RtReader, type RtRequest } from './rt-request.js';

/** A policy rule with the selectors coil uses. */
export interface PolicyRule {
  priority: number;
  /** Table id, or `'main'` (254). */
  table: number | 'main';
  /** Destination CIDR selector (`to`); absent = all. */
  to?: string;
  /** Input interface selector (`iif`); absent = any. */
  iif?: string;
  /** Firewall mark selector (`fwmark`, full mask); absent = any. */
  fwmark?: number;
}

/** A unicast route via a device in a given table. */
export interface TableRoute {
  /** Destination CIDR (`0.0.0.0/0`, `10.1.2.3/32`, `::/0`). */
  dst: string;
  dev: string;
}

/** Identity of a rule for comparison: priority, selectors and table, normalised. */
export function policyRuleKey(r: PolicyRule): string {
  const to = r.to === undefined ? 'all' : normaliseCidr(r.to);
  const table = r.table === 254 ? 'main' : String(r.table);
  return `${r.priority}|${r.iif ?? '-'}|${to}|${r.fwmark ?? '-'}|${table}`;
}

/** The fwmark of a rule read back, as a number; a partial mask makes it another selector (NaN: never equal). */
export function rawRuleFwmark(r: Rule): number | undefined {
  if (r.fwmark === undefined) return undefined;
  return r.fwmask === undefined || Number(r.fwmask) === 0xffffffff ? Number(r.fwmark) : NaN;
}

function rawRuleKey(r: Rule): string {
  const to = r.dst === undefined || r.dst === 'all' ? 'all' : normaliseCidr(`${r.dst}/${r.dstlen ?? (r.dst.includes(':') ? 128 : 32)}`);
  return `${r.priority}|${r.iif ?? '-'}|${to}|${rawRuleFwmark(r) ?? '-'}|${r.table ?? '?'}`;
}

/** The table ids iproute2 prints by name (rt_tables). */
const TABLE_IDS: Readonly<Record<string, number>> = { main: 254, local: 255, default: 253 };

/** The rule request of `r` in `family`. */
function ruleRequest(verb: 'add' | 'del', family: 4 | 6, r: PolicyRule): RtRequest {
  const o = { family, priority: r.priority, table: r.table === 'main' ? 254 : r.table, ...(r.to !== undefined ? { dst: r.to } : {}),
    ...(r.iif !== undefined ? { iif: r.iif } : {}), ...(r.fwmark !== undefined ? { fwmark: r.fwmark } : {}) };
  return verb === 'add' ? rt.ruleAdd(o) : rt.ruleDel(o);
}

/**
 * Makes the rules of `family` whose priority lies in `[minPriority, maxPriority]` equal `desired`:
 * one rule dump and one batch of typed requests through `kernel` (coild's NetlinkExecutor: no
 * process on the rtnetlink path; an IpRunner: `ip`).
 * @returns the number of rules added and deleted
 * @throws NetlinkError when the kernel refuses
 */
export async function syncPolicyRules(
  kernel: RtReader & RtApplier,
  o: Pick<RunTarget, 'netns'> & { family: 4 | 6; minPriority: number; maxPriority: number; desired: readonly PolicyRule[] },
): Promise<{ added: number; deleted: number }> {
  const target = o.netns ? { netns: o.netns } : {};
  const current = (await readRules(kernel, { ...target, family: o.family })).filter((r) => r.priority >= o.minPriority && r.priority <= o.maxPriority);
  const want = new Map(o.desired.map((r) => [policyRuleKey(r), r]));
  const requests: RtRequest[] = [];
  const seen = new Set<string>();
  for (const r of current) {
    const key = rawRuleKey(r);
    if (want.has(key) && !seen.has(key)) seen.add(key);
    // A duplicate or unwanted rule: delete by the exact selectors it has.
    else requests.push(rt.ruleDel({ family: o.family, priority: r.priority, table: TABLE_IDS[r.table ?? ''] ?? Number(r.table),
      ...(r.iif ? { iif: r.iif } : {}), ...(r.dst && r.dst !== 'all' ? { dst: `${r.dst}/${r.dstlen ?? (r.dst.includes(':') ? 128 : 32)}` } : {}),
      ...(r.fwmark !== undefined ? { fwmark: Number(r.fwmark), ...(r.fwmask !== undefined ? { fwmask: Number(r.fwmask) } : {}) } : {}) }));
  }
  const deleted = requests.length;
  for (const [key, r] of want) if (!seen.has(key)) requests.push(ruleRequest('add', o.family, r));
  if (requests.length > 0) await kernel.apply(requests, target);
  return { added: requests.length - deleted, deleted };
}

/**
 * Makes the routes of `table` for `family` equal `desired` (all with protocol `protocol`); routes
 * of other protocols in the table are left alone. One route dump and one batch of typed requests
 * through `kernel` (coild's NetlinkExecutor: no process on the rtnetlink path; an IpRunner: `ip`).
 * `beforeAdd` requests run in the same batch first (e.g. a link set up, so links come up only
 * right before routes use them, Coil #287).
 * @throws NetlinkError when the kernel refuses
 */
export async function syncTableRoutes(
  kernel: RtReader & RtApplier,
  o: Pick<RunTarget, 'netns'> & { family: 4 | 6; table: number; protocol: number; desired: readonly TableRoute[]; beforeAdd?: readonly RtRequest[] },
): Promise<{ added: number; deleted: number }> {
  const target = o.netns ? { netns: o.netns } : {};
  const current = (await readRoutes(kernel, { ...target, family: o.family, table: o.table })).filter((r) => r.protocol === String(o.protocol));
  const want = new Map(o.desired.map((r) => [`${routeKey(parseRoutePrefix(r.dst))}|${r.dev}`, r]));
  const requests: RtRequest[] = [];
  const seen = new Set<string>();
  for (const r of current) {
    const key = `${routeKeyOfDst(r.dst)}|${r.dev ?? ''}`;
    if (want.has(key)) seen.add(key);
    else requests.push(rt.routeDel({ dst: r.dst === 'default' ? (o.family === 4 ? '0.0.0.0/0' : '::/0') : r.dst, ...(r.dev ? { dev: r.dev } : {}), table: o.table }));
  }
  const deleted = requests.length;
  const adds: RtRequest[] = [];
  for (const [key, r] of want) if (!seen.has(key)) adds.push(rt.routeReplace({ dst: r.dst, dev: r.dev, protocol: o.protocol, table: o.table }));
  if (adds.length > 0) requests.push(...(o.beforeAdd ?? []), ...adds);
  if (requests.length > 0) await kernel.apply(requests, target);
  return { added: adds.length, deleted };
}

function normaliseCidr(cidr: string): string {
  const slash = cidr.indexOf('/');
  const addr = slash < 0 ? cidr : cidr.slice(0, slash);
  const bits = slash < 0 ? (addr.includes(':') ? 128 : 32) : Number(cidr.slice(slash + 1));
  return `${canonicalAddress(addr)}/${bits}`;
}
