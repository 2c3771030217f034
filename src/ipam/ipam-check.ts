/**
 * The IPAM consistency checks of `kubectl coil ipam check` and of coil-controller's
 * `coil_controller_ipam_findings` gauge, in one place: facts in (pools, blocks, nodes, pods,
 * BlockRequests and, when known, coild's view of each node), findings out. Pure: no I/O, no
 * clock (the caller passes `nowMs`), so the plugin, the controller and the tests build one
 * representation and get the same answer (README, "Operate", lists the findings).
 *
 * Each finding names the objects it is about with their UID and resourceVersion, so
 * `ipam release` can act only on objects that did not change since (Kubernetes API conventions,
 * "Concurrency Control and Consistency": delete preconditions).
 */
import { BlockIndex, parseV4 } from './block-index.js';
import { cidrContainsAddress, lastAddress, tryParseCidr, type Cidr } from './cidr.js';
import { canonicalAddressOrText, tryParseAddress, type IpAddress } from './ip-address.js';
import { PoolLayout } from './pool.js';

/** What a finding is about. */
export type FindingKind =
  /** An AddressBlock whose `coil.cybozu.com/node` names no Node. */
  | 'orphan-block'
  /** An AddressBlock deleted (deletionTimestamp) longer ago than the threshold: its finalizer holds it. */
  | 'block-stuck-deleting'
  /** A Pod IP in a pool that no AddressBlock of the Pod's node holds. */
  | 'pod-ip-without-block'
  /** One IP held by two or more running Pods. */
  | 'duplicate-pod-ip'
  /** An address coild has allocated on a node with no Pod behind it (coild's `/ipam`). */
  | 'leaked-address'
  /**
   * An address wired on a node that no AddressBlock of the node holds, which coild keeps wired
   * while it claims the block back (coild's `/ipam` `orphans`, when it reports them).
   */
  | 'orphan-address'
  /**
   * An address of a running Pod that no AddressBlock holds and none can be claimed for (no pool
   * holds it, or the block of the Pod's other address lacks its family: coild's `/ipam` `orphans`
   * in state `no-pool` or `outside-block`). coild keeps it wired and exported alone (/32, /128).
   */
  | 'unclaimable-address'
  /**
   * A Pod IP, on a node whose coild was read, that no AddressBlock of the node holds, no pool
   * holds, and coild neither allocates nor exports, while it holds the Pod's other address: no
   * route leads to it from other nodes (a coild that drops the half its block lacks).
   */
  | 'unrouted-pod-ip'
  /** A BlockRequest unanswered for longer than the threshold. */
  | 'stale-blockrequest'
  /** An AddressPool whose allocated blocks are at or above the usage threshold. */
  | 'pool-usage-high'
  /** An AddressBlock coild reports it could not read (coild's `/ipam`, when it says so). */
  | 'unreadable-block';

/** Every kind, in report order; the metric has one series per kind. */
export const FINDING_KINDS: readonly FindingKind[] = Object.freeze([
  'orphan-block', 'block-stuck-deleting', 'pod-ip-without-block', 'duplicate-pod-ip', 'leaked-address', 'orphan-address',
  'unclaimable-address', 'unrouted-pod-ip', 'stale-blockrequest', 'pool-usage-high', 'unreadable-block',
]);

/** Kinds computed from API objects alone (the controller's caches); the rest need coild's views. */
export const API_FINDING_KINDS: readonly FindingKind[] = Object.freeze(FINDING_KINDS.filter((k) =>
  !['leaked-address', 'orphan-address', 'unclaimable-address', 'unrouted-pod-ip', 'unreadable-block'].includes(k)));

/**
 * coild's orphan states (`/ipam` `orphans[].state`) of an address no block will hold while its Pod
 * runs (src/node-agent/ipam/orphans.ts, OrphanState): reported as `unclaimable-address`.
 */
const UNCLAIMABLE_ORPHAN_STATES: ReadonlySet<string> = new Set(['no-pool', 'outside-block']);

/** One object as a finding names it: enough to re-read it and to guard a write with preconditions. */
export interface ObjectRef {
  readonly kind: 'AddressPool' | 'AddressBlock' | 'BlockRequest' | 'Node' | 'Pod';
  readonly name: string;
  readonly namespace?: string;
  readonly uid: string;
  readonly resourceVersion: string;
}

/** An AddressPool, reduced to what the checks read. */
export interface PoolFacts {
  readonly ref: ObjectRef;
  readonly blockSizeBits: number;
  readonly subnets: readonly { readonly ipv4?: string; readonly ipv6?: string }[];
}

/** An AddressBlock. `deletingSinceMs`: its deletionTimestamp, when set. */
export interface BlockFacts {
  readonly ref: ObjectRef;
  readonly pool: string;
  readonly node: string;
  readonly index: number;
  readonly ipv4?: string;
  readonly ipv6?: string;
  readonly deletingSinceMs?: number;
}

/** A Pod that may hold addresses: scheduled, not host-network, not Succeeded/Failed; `ips` empty until written. */
export interface PodFacts {
  readonly ref: ObjectRef;
  readonly node: string;
  /** Canonical text (RFC 5952 for IPv6). */
  readonly ips: readonly string[];
}

/** A BlockRequest. */
export interface RequestFacts {
  readonly ref: ObjectRef;
  readonly pool: string;
  readonly node: string;
  readonly createdMs: number;
  readonly answered: boolean;
}

/** One allocation in coild's view of its node (`GET /ipam`, `allocations[]`). */
export interface AllocationFacts {
  readonly containerId: string;
  readonly ifname: string;
  readonly block: string;
  readonly ipv4?: string;
  readonly ipv6?: string;
  /** Absent for allocations coild recovered from the host after a restart. */
  readonly podNamespace?: string;
  readonly podName?: string;
}

/** One block in coild's view: addresses used, free and cooling (coild's `/ipam` `blocks[]`). */
export interface NodeBlockFacts {
  readonly name: string;
  readonly used: number;
  readonly free: number;
  readonly cooling: number;
}

/** An address coild keeps wired without a block of its node (`/ipam` `orphans[]`). */
export interface OrphanAddressFacts {
  readonly containerId: string;
  readonly ifname: string;
  readonly ipv4?: string;
  readonly ipv6?: string;
  readonly podNamespace?: string;
  readonly podName?: string;
  /** The block being claimed back, when known. */
  readonly block?: string;
  /** coild's word for where the claim stands (e.g. `claiming`, `refused`, `no-pod`). */
  readonly state: string;
  readonly message?: string;
}

/** coild's view of one node. `unreadableBlocks` and `orphans` only when coild reports them. */
export interface NodeViewFacts {
  readonly node: string;
  readonly allocations: readonly AllocationFacts[];
  readonly blocks?: readonly NodeBlockFacts[];
  readonly unreadableBlocks?: readonly { readonly name: string; readonly reason: string }[];
  readonly orphans?: readonly OrphanAddressFacts[];
}

/** Everything the checks read. `pods`/`nodeViews` undefined: the checks needing them are skipped. */
export interface IpamFacts {
  readonly nowMs: number;
  readonly pools: readonly PoolFacts[];
  readonly blocks: readonly BlockFacts[];
  readonly nodes: readonly ObjectRef[];
  readonly requests: readonly RequestFacts[];
  readonly pods?: readonly PodFacts[];
  readonly nodeViews?: readonly NodeViewFacts[];
}

/** Thresholds; see {@link DEFAULT_THRESHOLDS}. */
export interface CheckThresholds {
  /** A block deleted longer ago than this is stuck (ms). */
  readonly stuckDeletingMs: number;
  /** A BlockRequest unanswered longer than this is stale (ms); coild itself gives up after 10 s. */
  readonly blockRequestWaitMs: number;
  /** A pool with at least this share of its blocks allocated is reported (percent, 0–100). */
  readonly poolUsagePercent: number;
}

/** 5 min stuck deleting, 1 min for a BlockRequest, 90 % of a pool's blocks. */
export const DEFAULT_THRESHOLDS: CheckThresholds = Object.freeze({ stuckDeletingMs: 300_000, blockRequestWaitMs: 60_000, poolUsagePercent: 90 });

/** One finding. `key` is stable across runs (reports are intersected on it). */
export interface Finding {
  readonly kind: FindingKind;
  readonly key: string;
  /** One line for a human. */
  readonly message: string;
  /** The objects it is about, UID and resourceVersion as read. */
  readonly objects: readonly ObjectRef[];
  readonly node?: string;
  readonly pool?: string;
  /** The address(es) concerned (pod IPs, leaked allocation). */
  readonly addresses?: readonly string[];
  /** A leaked allocation, as coild names it. */
  readonly allocation?: { readonly containerId: string; readonly ifname: string; readonly ipv4?: string; readonly ipv6?: string; readonly podNamespace?: string; readonly podName?: string };
}

/** Usage of one pool. `maxBlocks` as a bigint: an IPv6 pool may hold 2^56 blocks. */
export interface PoolUsage {
  readonly pool: string;
  readonly maxBlocks: bigint;
  readonly blocks: number;
  /** Addresses in the pool (one family: IPv4 if the pool has it). */
  readonly size: bigint;
  /** Addresses held by its blocks. */
  readonly blockAddresses: bigint;
  /** Allocated blocks as a percentage of `maxBlocks`. */
  readonly percent: number;
}

/** Blocks of `pools`, their usage. A pool whose spec cannot be laid out gets maxBlocks 0. */
export function poolUsage(pools: readonly PoolFacts[], blocks: readonly BlockFacts[]): PoolUsage[] {
  const count = new Map<string, number>();
  for (const b of blocks) count.set(b.pool, (count.get(b.pool) ?? 0) + 1);
  return pools.map((p) => {
    let layout: PoolLayout | undefined;
    try {
      layout = PoolLayout.fromSpec({ blockSizeBits: p.blockSizeBits, subnets: p.subnets });
    } catch {
      layout = undefined;
    }
    const maxBlocks = layout?.totalBlocks ?? 0n;
    const n = count.get(p.ref.name) ?? 0;
    const perBlock = 1n << BigInt(p.blockSizeBits);
    const percent = maxBlocks === 0n ? 0 : Number((BigInt(n) * 10_000n) / maxBlocks) / 100;
    return { pool: p.ref.name, maxBlocks, blocks: n, size: maxBlocks * perBlock, blockAddresses: BigInt(n) * perBlock, percent };
  });
}

/** The pools' subnets, parsed, to tell a Pod IP of coil's from another plugin's. */
function poolCidrs(pools: readonly PoolFacts[]): { pool: string; cidr: Cidr }[] {
  const out: { pool: string; cidr: Cidr }[] = [];
  for (const p of pools) {
    for (const s of p.subnets) {
      for (const text of [s.ipv4, s.ipv6]) {
        const c = text === undefined ? undefined : tryParseCidr(text);
        if (c) out.push({ pool: p.ref.name, cidr: c });
      }
    }
  }
  return out;
}

function poolOfAddress(cidrs: readonly { pool: string; cidr: Cidr }[], a: IpAddress): string | undefined {
  return cidrs.find((c) => cidrContainsAddress(c.cidr, a))?.pool;
}

const refText = (r: ObjectRef): string => (r.namespace ? `${r.namespace}/${r.name}` : r.name);

/**
 * Runs every check `facts` allow, in {@link FINDING_KINDS} order, each kind sorted by key.
 * A block whose CIDR does not parse is only skipped here; coild reports it (`unreadable-block`).
 */
export function checkIpam(facts: IpamFacts, t: CheckThresholds = DEFAULT_THRESHOLDS): Finding[] {
  const out: Finding[] = [];
  const nodeNames = new Set(facts.nodes.map((n) => n.name));
  const nodeRef = new Map(facts.nodes.map((n) => [n.name, n]));
  const index = new BlockIndex<BlockFacts>(facts.blocks);

  // One pass over the Pods' addresses (each parsed once): which blocks hold them, which pool they
  // are of, and who holds the blocks stuck deleting (150,000 Pods: hack/bench/ipam-check.ts).
  const stuck = new Set(facts.blocks.filter((b) => b.deletingSinceMs !== undefined && facts.nowMs - b.deletingSinceMs > t.stuckDeletingMs));
  const holdersByBlock = new Map<BlockFacts, PodFacts[]>();
  /** Pod IPs that no pool holds: another plugin's, or coil's whose pool lost them (unrouted-pod-ip). */
  const outsidePools = new Set<string>();
  if (facts.pods) {
    const cidrs = poolCidrs(facts.pools);
    const v4Pools = cidrs.filter((c) => c.cidr.family === 4).map((c) => ({ pool: c.pool, first: Number(c.cidr.base), last: Number(lastAddress(c.cidr)) }));
    const byIp = new Map<string, { pool: string; pods: PodFacts[] }>();
    for (const p of facts.pods) {
      for (const ip of p.ips) {
        const n = parseV4(ip);
        const a = n === undefined ? tryParseAddress(ip) : undefined;
        const pool = n !== undefined ? v4Pools.find((r) => n >= r.first && n <= r.last)?.pool : a && poolOfAddress(cidrs, a);
        if (pool === undefined) {
          if (n !== undefined || a) outsidePools.add(ip); // not coil's (another plugin), unless coild wired it (below)
          continue;
        }
        const seen = byIp.get(ip);
        if (seen) seen.pods.push(p);
        else byIp.set(ip, { pool, pods: [p] });
        const holders = n !== undefined ? index.lookupV4(n) : index.lookupParsed(a!);
        for (const b of holders) {
          if (!stuck.has(b)) continue;
          const list = holdersByBlock.get(b);
          if (list) list.push(p);
          else holdersByBlock.set(b, [p]);
        }
        if (!holders.some((b) => b.node === p.node)) {
          const node = nodeRef.get(p.node);
          out.push({ kind: 'pod-ip-without-block', key: `pod-ip-without-block/${refText(p.ref)}/${ip}`, node: p.node, pool, addresses: [ip],
            objects: [p.ref, ...holders.map((b) => b.ref), ...(node ? [node] : [])],
            message: `Pod ${refText(p.ref)} on ${p.node} has ${ip}, which no AddressBlock of ${p.node} holds` +
              (holders.length ? ` (${holders.map((b) => `${b.ref.name} of ${b.node}`).join(', ')} does)` : ' (no block holds it)') });
        }
      }
    }
    for (const [ip, { pool, pods }] of byIp) {
      if (pods.length < 2) continue;
      out.push({ kind: 'duplicate-pod-ip', key: `duplicate-pod-ip/${ip}`, addresses: [ip], objects: pods.map((p) => p.ref), pool,
        message: `${ip} is held by ${pods.length} pods: ${pods.map((p) => `${refText(p.ref)} on ${p.node}`).join(', ')}` });
    }
  }

  for (const b of facts.blocks) {
    if (!nodeNames.has(b.node)) {
      out.push({ kind: 'orphan-block', key: `orphan-block/${b.ref.name}`, node: b.node, pool: b.pool, objects: [b.ref],
        message: `AddressBlock ${b.ref.name} (${[b.ipv4, b.ipv6].filter(Boolean).join(', ')}) belongs to Node ${b.node}, which does not exist` });
    }
    if (stuck.has(b)) {
      const holders = [...new Set(holdersByBlock.get(b) ?? [])];
      out.push({ kind: 'block-stuck-deleting', key: `block-stuck-deleting/${b.ref.name}`, node: b.node, pool: b.pool, objects: [b.ref, ...holders.map((p) => p.ref)],
        message: `AddressBlock ${b.ref.name} has been deleting for ${Math.round((facts.nowMs - b.deletingSinceMs!) / 1000)} s` +
          (holders.length ? `: held by ${holders.length} running pod(s), ${holders.slice(0, 3).map((p) => refText(p.ref)).join(', ')}` : ': no running pod holds it; its finalizer is not being removed (is coil-controller running?)') });
    }
  }

  if (facts.nodeViews && facts.pods) {
    const podsByNode = new Map<string, PodFacts[]>();
    for (const p of facts.pods) {
      const list = podsByNode.get(p.node);
      if (list) list.push(p);
      else podsByNode.set(p.node, [p]);
    }
    for (const v of facts.nodeViews) {
      const pods = podsByNode.get(v.node) ?? [];
      const ips = new Set(pods.flatMap((p) => p.ips));
      const names = new Set(pods.map((p) => refText(p.ref)));
      const node = nodeRef.get(v.node);
      // Pod IPs no route leads to: coild wired the Pod (it holds another of its addresses) but this
      // one is in no block of the node, no pool (else pod-ip-without-block says so) and not exported.
      const held = new Set(v.allocations.flatMap((a) => [a.ipv4, a.ipv6]).filter((x): x is string => x !== undefined).map(canonical));
      const exported = new Set((v.orphans ?? []).flatMap((o) => [o.ipv4, o.ipv6]).filter((x): x is string => x !== undefined).map(canonical));
      for (const p of pods) {
        if (!p.ips.some((ip) => outsidePools.has(ip) && !exported.has(ip)) || !p.ips.some((ip) => held.has(ip) || exported.has(ip))) continue;
        for (const ip of p.ips) {
          if (!outsidePools.has(ip) || exported.has(ip) || index.lookup(ip).some((b) => b.node === v.node)) continue;
          out.push({ kind: 'unrouted-pod-ip', key: `unrouted-pod-ip/${refText(p.ref)}/${ip}`, node: v.node, addresses: [ip], objects: [p.ref, ...(node ? [node] : [])],
            message: `Pod ${refText(p.ref)} on ${v.node} has ${ip}, which no AddressBlock or AddressPool holds and coild on ${v.node} does not export: ` +
              `it cannot be reached from other nodes (coild ${held.has(ip) ? 'holds it but does not route it' : 'holds only the Pod\'s other address'})` });
        }
      }
      for (const a of v.allocations) {
        const addresses = [a.ipv4, a.ipv6].filter((x): x is string => x !== undefined).map(canonical);
        if (addresses.some((x) => ips.has(x))) continue;
        // A named pod that exists has an allocation whose podIPs the kubelet has not written yet.
        if (a.podNamespace && a.podName && names.has(`${a.podNamespace}/${a.podName}`)) continue;
        out.push({ kind: 'leaked-address', key: `leaked-address/${v.node}/${a.containerId}/${a.ifname}`, node: v.node, addresses,
          objects: node ? [node] : [], allocation: { containerId: a.containerId, ifname: a.ifname, ...(a.ipv4 && { ipv4: a.ipv4 }), ...(a.ipv6 && { ipv6: a.ipv6 }),
            ...(a.podNamespace && { podNamespace: a.podNamespace }), ...(a.podName && { podName: a.podName }) },
          message: `${addresses.join(', ')} is allocated on ${v.node} (container ${a.containerId.slice(0, 12)}, ${a.ifname}, block ${a.block}` +
            `${a.podName ? `, pod ${a.podNamespace}/${a.podName}` : ''}) but no Pod on ${v.node} has it` });
      }
    }
  }

  for (const v of facts.nodeViews ?? []) {
    const node = nodeRef.get(v.node);
    for (const o of v.orphans ?? []) {
      const addresses = [o.ipv4, o.ipv6].filter((x): x is string => x !== undefined).map(canonical);
      if (UNCLAIMABLE_ORPHAN_STATES.has(o.state)) {
        out.push({ kind: 'unclaimable-address', key: `unclaimable-address/${v.node}/${o.containerId}/${o.ifname}`, node: v.node, addresses, objects: node ? [node] : [],
          message: `${addresses.join(', ')} is wired on ${v.node}${o.podName ? ` for pod ${o.podNamespace}/${o.podName}` : ''} and no AddressBlock can hold it; ` +
            `coild exports it alone while the Pod runs (${o.state}${o.message ? `: ${o.message}` : ''})` });
        continue;
      }
      out.push({ kind: 'orphan-address', key: `orphan-address/${v.node}/${o.containerId}/${o.ifname}`, node: v.node, addresses, objects: node ? [node] : [],
        message: `${addresses.join(', ')} is wired on ${v.node}${o.podName ? ` for pod ${o.podNamespace}/${o.podName}` : ''} but no AddressBlock of ${v.node} holds it; coild keeps it wired` +
          `${o.block ? ` and claims ${o.block} back` : ''} (${o.state}${o.message ? `: ${o.message}` : ''})` });
    }
  }

  for (const r of facts.requests) {
    if (r.answered || facts.nowMs - r.createdMs <= t.blockRequestWaitMs) continue;
    out.push({ kind: 'stale-blockrequest', key: `stale-blockrequest/${r.ref.name}`, node: r.node, pool: r.pool, objects: [r.ref],
      message: `BlockRequest ${r.ref.name} (pool ${r.pool}, node ${r.node}) unanswered for ${Math.round((facts.nowMs - r.createdMs) / 1000)} s (is coil-controller running?)` });
  }

  const usage = poolUsage(facts.pools, facts.blocks);
  for (const u of usage) {
    if (u.maxBlocks === 0n || u.percent < t.poolUsagePercent) continue;
    const p = facts.pools.find((x) => x.ref.name === u.pool)!;
    out.push({ kind: 'pool-usage-high', key: `pool-usage-high/${u.pool}`, pool: u.pool, objects: [p.ref],
      message: `AddressPool ${u.pool}: ${u.blocks} of ${u.maxBlocks} blocks allocated (${u.percent.toFixed(1)} %, threshold ${t.poolUsagePercent} %)` });
  }

  for (const v of facts.nodeViews ?? []) {
    for (const u of v.unreadableBlocks ?? []) {
      const b = facts.blocks.find((x) => x.ref.name === u.name);
      out.push({ kind: 'unreadable-block', key: `unreadable-block/${v.node}/${u.name}`, node: v.node, ...(b && { pool: b.pool }), objects: b ? [b.ref] : [],
        message: `coild on ${v.node} cannot read AddressBlock ${u.name}: ${u.reason}` });
    }
  }

  const order = new Map(FINDING_KINDS.map((k, i) => [k, i]));
  return out.sort((x, y) => order.get(x.kind)! - order.get(y.kind)! || (x.key < y.key ? -1 : x.key > y.key ? 1 : 0));
}

/** Findings per kind, every kind present (0 when none). */
export function countFindings(findings: readonly Finding[]): Record<FindingKind, number> {
  const counts = Object.fromEntries(FINDING_KINDS.map((k) => [k, 0])) as Record<FindingKind, number>;
  for (const f of findings) counts[f.kind]++;
  return counts;
}

/** Canonical address text, or the text itself when it does not parse (ip-address.ts). */
const canonical = (text: string): string => canonicalAddressOrText(text);
