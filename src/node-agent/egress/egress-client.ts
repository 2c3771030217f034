/**
 * The client side of egress NAT, inside a client pod's netns: FoU peer links to each Egress
 * Service ClusterIP, the policy rules 1800 / 1900 / 2000–2002 (IPv6: 2000 fc00::/7) / 2100, and
 * tables 117 (narrow: private-range destinations) and 118 (wide: everything else). The plan is a
 * pure function of the pod's addresses and the gateways; {@link EgressClient} applies or removes it.
 *
 * Concurrency: EgressClient holds no state; callers serialise calls per pod (coild's per-container
 * lock for ADD, the egress watcher's per-pod queue for updates).
 * @see docs/compatibility.md#client-pod-egress-setup, docs/compatibility.md#set-but-never-unset,
 *   docs/compatibility.md#netns-lookup-through-bind-mounts,
 *   docs/compatibility.md#fou-overhead-not-subtracted-from-the-mtu
 */
import {
  EGRESS_NARROW_TABLE_ID, EGRESS_WIDE_TABLE_ID, PROTOCOL_ID,
} from '../../api/v2/keys.js';
import { cidrContains, parseCidr, type Cidr } from '../../ipam/cidr.js';
import { addressFamily, parseRoutePrefix } from '../../netlink/cidr.js';
import { ensureFouPeer, fouPeerRequest, initFou, isFouPeerLinkName, planFouPeer, readFouPeers, type PlannedFouPeer } from '../../netlink/fou.js';
import { readLinks } from '../../netlink/link.js';
import type { IpRunner } from '../../netlink/iproute2/ip-runner.js';
import { rt, type RtApplier, type RtReader, type RtRequest } from '../../netlink/rt-request.js';
import { syncPolicyRules, syncTableRoutes, type PolicyRule, type TableRoute } from '../../netlink/fib-rules.js';
import type { FlowPins } from './flow-pins.js';
import type { OriginatingOnly } from './originating-only.js';

/** Lowest priority of the client rules; every rule from here to the max is ours. */
export const EGRESS_RULE_PRIORITY_MIN = 1800;
/** Highest priority of the client rules. */
export const EGRESS_RULE_PRIORITY_MAX = 2100;

/** In-cluster private ranges that keep using the main table (rules 2000+i), Coil's order. */
export const PRIVATE_RANGES: Readonly<Record<4 | 6, readonly string[]>> = {
  4: ['10.0.0.0/8', '172.16.0.0/12', '192.168.0.0/16'],
  6: ['fc00::/7'],
};

/**
 * Bytes FoU adds in front of the inner packet: outer IP header + UDP header. IPv4: 20 + 8 = 28;
 * IPv6: 40 + 8 = 48 (the ip6tnl links are made with `encaplimit none`, so no 8-byte
 * destination-options header). The inner IP header is not overhead: it is part of the packet the
 * tunnel MTU limits. Only the tunnel links get the smaller MTU; the pod's eth0 keeps the node MTU
 * because in-cluster traffic is not encapsulated (Coil subtracts nothing:
 * docs/compatibility.md#fou-overhead-not-subtracted-from-the-mtu).
 */
export const FOU_OVERHEAD_BYTES: Readonly<Record<4 | 6, number>> = { 4: 28, 6: 48 };

/** One Egress as the client sees it, for one family: where to tunnel and what goes there. */
export interface EgressGateway {
  /** `<namespace>/<name>` of the Egress (logs, Events). */
  egress: string;
  /** A ClusterIP of the Egress Service (plain address). */
  clusterIp: string;
  /** `spec.destinations` of the ClusterIP's family, CIDR strings. */
  destinations: string[];
  /** `spec.fouSourcePortAuto`. */
  isSourcePortAuto: boolean;
  /**
   * The NAT pod (plain address, the ClusterIP's family) coild chose for this client; the tunnel
   * points at it instead of the ClusterIP. Absent: the ClusterIP, as Coil's coild does
   * (docs/egress-failover.md#choosing-a-nat-pod).
   */
  natPod?: string;
  /**
   * NAT pods (plain addresses, the ClusterIP's family) the client drains from: their peer links
   * stay, with the TCP flows pinned to them, while new flows go to `natPod`
   * (docs/egress-failover.md#draining). Absent or empty: none.
   */
  draining?: string[];
  /**
   * The Egress's shared SNAT address of the ClusterIP's family (`spec.snatAddresses`), when it
   * has one: then every client of the Egress goes to its one active NAT pod and none drains
   * (docs/egress-failover.md#sessions-kept-the-shared-snat-address). Absent: per-client choice.
   */
  snatAddress?: string;
}

/** The kernel state one client pod should have. */
export interface EgressClientPlan {
  /** One peer link per gateway, to its ClusterIP or chosen NAT pod: the tunnel routes 117/118 use. */
  peers: PlannedFouPeer[];
  /**
   * Peer links kept for draining NAT pods (no route in 117/118: only the flows pinned to them use
   * them), each to one remote not among `peers`.
   */
  drains: PlannedFouPeer[];
  /** Rules 1800–2100 per family; empty for a family without gateways. */
  rules: Record<4 | 6, PolicyRule[]>;
  /** Routes per family and table (117 narrow, 118 wide). */
  routes: Record<4 | 6, Record<number, TableRoute[]>>;
  /** Families with at least one gateway; empty = the pod should have no egress state. */
  families: Array<4 | 6>;
}

/** Input of {@link planEgressClient}. */
export interface EgressClientInput {
  /** The pod's addresses (plain). A gateway of a family the pod lacks is skipped, as Coil does. */
  podIps: readonly string[];
  gateways: readonly EgressGateway[];
  /** FoU port (coild `--egress-port`, default 5555). */
  port: number;
  /** MTU of the pod's eth0, bytes; tunnels get it minus {@link FOU_OVERHEAD_BYTES}. */
  linkMtuBytes?: number;
}

/** The rules of one family: 1800 link-local→main, 1900→117, 2000+i private→main, 2100→118. */
export function clientRules(family: 4 | 6): PolicyRule[] {
  return [
    { priority: 1800, to: family === 4 ? '169.254.0.0/16' : 'fe80::/10', table: 'main' },
    { priority: 1900, table: EGRESS_NARROW_TABLE_ID },
    ...PRIVATE_RANGES[family].map((to, i) => ({ priority: 2000 + i, to, table: 'main' as const })),
    { priority: 2100, table: EGRESS_WIDE_TABLE_ID },
  ];
}

/** {@link PRIVATE_RANGES} as prefixes, read once. */
const PRIVATE_PREFIXES: Readonly<Record<4 | 6, readonly Cidr[]>> = { 4: PRIVATE_RANGES[4].map(parseCidr), 6: PRIVATE_RANGES[6].map(parseCidr) };

/** True when `prefix` lies inside one of its family's private ranges (then it goes to table 117). */
export function isNarrowDestination(prefix: Cidr): boolean {
  return PRIVATE_PREFIXES[prefix.family].some((r) => cidrContains(r, prefix));
}

/**
 * Computes the plan. Destinations of a family the pod lacks, and gateways whose ClusterIP is of
 * such a family, are dropped.
 * @throws TypeError on a malformed address or CIDR
 */
export function planEgressClient(input: EgressClientInput): EgressClientPlan {
  const local = new Map<4 | 6, string>();
  for (const a of input.podIps) {
    const f = addressFamily(a);
    if (f !== undefined && !local.has(f)) local.set(f, a);
  }
  const plan: EgressClientPlan = { peers: [], drains: [], rules: { 4: [], 6: [] }, routes: { 4: {}, 6: {} }, families: [] };
  const drains: Array<{ remote: string; local: string; g: EgressGateway; family: 4 | 6 }> = [];
  for (const g of input.gateways) {
    const family = addressFamily(g.clusterIp);
    const own = family === undefined ? undefined : local.get(family);
    if (family === undefined || own === undefined) continue;
    const remote = g.natPod !== undefined && addressFamily(g.natPod) === family ? g.natPod : g.clusterIp;
    const peer = peerOf(remote, own, family, g, input);
    plan.peers.push(peer);
    for (const d of g.draining ?? []) if (addressFamily(d) === family) drains.push({ remote: d, local: own, g, family });
    if (!plan.families.includes(family)) plan.families.push(family);
    for (const dst of g.destinations) {
      const prefix = parseRoutePrefix(dst);
      if (prefix.family !== family) continue;
      const table = isNarrowDestination(prefix) ? EGRESS_NARROW_TABLE_ID : EGRESS_WIDE_TABLE_ID;
      (plan.routes[family][table] ??= []).push({ dst, dev: peer.name });
    }
  }
  for (const f of plan.families) plan.rules[f] = clientRules(f);
  const taken = new Set(plan.peers.map((p) => p.name));
  for (const d of drains) {
    const drain = peerOf(d.remote, d.local, d.family, d.g, input);
    if (taken.has(drain.name)) continue;
    taken.add(drain.name);
    plan.drains.push(drain);
  }
  return plan;
}

/** The planned peer link (its addresses read once here, for every step after). */
function peerOf(remote: string, local: string, family: 4 | 6, g: EgressGateway, input: EgressClientInput): PlannedFouPeer {
  return planFouPeer({ remote, local, port: input.port, sourcePort: g.isSourcePortAuto ? 'auto' : input.port,
    ...(input.linkMtuBytes ? { mtuBytes: input.linkMtuBytes - FOU_OVERHEAD_BYTES[family] } : {}) });
}

/** The peer links whose flows are pinned, per family: the tunnels' and the draining ones. */
export function pinnedLinks(plan: EgressClientPlan): Record<4 | 6, string[]> {
  const out: Record<4 | 6, string[]> = { 4: [], 6: [] };
  for (const p of [...plan.peers, ...plan.drains]) out[p.family].push(p.name);
  return out;
}

/**
 * The requests that move the tunnels of `from` to the remotes of `to`: per moved peer, its new
 * link and `link set up`; `route replace` (proto 30) of the destinations routed through a new
 * link, in tables 117/118; the links `to` no longer holds (neither as a peer nor as a drain)
 * deleted last — make before break, so the destinations are never without a route (a packet
 * would otherwise leave the pod unencapsulated, around the NAT). A link that turns from a peer
 * into a drain stays as it is; its pinned flows keep using it.
 * @returns undefined when the plans differ in more than their peers' remotes and their drains;
 *   [] when in nothing the kernel's links and routes show
 */
export function retargetRequests(from: EgressClientPlan, to: EgressClientPlan): RtRequest[] | undefined {
  const shape = (p: EgressClientPlan) => JSON.stringify({ f: p.families, n: p.peers.length, r: p.rules,
    routes: ([4, 6] as const).map((f) => Object.entries(p.routes[f]).map(([t, rs]) => [t, rs.map((r) => r.dst)])),
    peers: p.peers.map((x) => [x.local, x.port, x.sourcePort, x.mtuBytes, x.family]) });
  if (shape(from) !== shape(to)) return undefined;
  const moved = to.peers.filter((p, i) => p.remote !== from.peers[i]!.remote);
  const keep = new Set([...to.peers, ...to.drains].map((p) => p.name));
  const had = new Set([...from.peers, ...from.drains].map((p) => p.name));
  const requests: RtRequest[] = [];
  // A drain that becomes the tunnel again already exists, up.
  for (const p of moved) if (!had.has(p.name)) requests.push(fouPeerRequest(p), rt.linkSet(p.name, { up: true }));
  const newDevs = new Set(moved.map((p) => p.name));
  for (const family of [4, 6] as const) {
    for (const [table, routes] of Object.entries(to.routes[family])) {
      for (const r of routes) if (newDevs.has(r.dev)) requests.push(rt.routeReplace({ dst: r.dst, dev: r.dev, protocol: PROTOCOL_ID, table: Number(table) }));
    }
  }
  for (const name of had) if (!keep.has(name)) requests.push(rt.linkDel(name));
  return requests;
}

/** Constructor options of {@link EgressClient}. */
export interface EgressClientOptions {
  /** Runs the programs no netlink family replaces: `modprobe` and the sysctls of initFou. */
  ip: IpRunner;
  /**
   * Applies every typed request and reads every dump of the client (FoU ports, peer links, routes
   * of 117/118, rules): coild's NetlinkExecutor (rtnetlink and genetlink through its agent or its
   * own socket, `ip` when neither is usable). Default: `ip`, a process per batch.
   */
  kernel?: RtApplier & RtReader;
  /** FoU port. */
  port: number;
  /** Passed to initFou; `null` skips modprobe. Default `'modprobe'`. */
  modprobePath?: string | null;
  /**
   * Originating-only mode (coild `--enable-originating-only`): with `enabled`, every apply brings
   * the pod's links to the mode for the families that have gateways; without, every apply and
   * remove takes what the mode left (the mode was turned off, or Coil's coild had it on) away.
   * Absent: the mode is not touched at all.
   */
  originatingOnly?: { enabled: boolean; applier: OriginatingOnly };
  /**
   * Per-flow draining (docs/egress-failover.md#draining): with `enabled` (coild steers tunnels to
   * NAT pods), the TCP flows of every peer link are pinned to it, so a drain keeps them on the
   * old link; without, what pinning left is taken away. Absent: not touched at all.
   */
  flowPins?: { enabled: boolean; applier: FlowPins };
}

/**
 * Applies and removes {@link EgressClientPlan}s in a pod netns. Everything is declarative: apply
 * twice is a no-op, and apply with fewer gateways removes the others' links, routes and rules.
 */
export class EgressClient {
  constructor(private readonly o: EgressClientOptions) {}

  /** Where typed requests and dumps go: `kernel`, else the IpRunner (iproute2). */
  private get kernel(): RtReader & RtApplier {
    return this.o.kernel ?? this.o.ip;
  }

  /**
   * Brings the pod netns to `plan`: FoU init, peer links (re-created when the source port
   * changed; a drain's kept, never made), links up, routes in 117/118, rules 1800–2100, removal of
   * what the plan no longer holds, then the flow pins ({@link syncFlowPins}). Links come up in the same batch as their routes, just before them (Coil #287).
   * @throws NetlinkError when the kernel refuses (e.g. no FoU: "Error talking to the kernel")
   */
  async apply(netns: string, plan: EgressClientPlan): Promise<void> {
    if (plan.families.length === 0) return this.remove(netns);
    // Make before break: the new links and routes first, the old links last, so a tunnel moving
    // to another NAT pod never leaves its destinations without a route (they would leave the pod
    // unencapsulated, around the NAT).
    const { stale, present } = await this.ensureTunnels(netns, plan);
    await this.applyRouting(netns, plan);
    if (stale.length > 0) await this.kernel.apply(stale.map((name) => rt.linkDel(name)), { netns });
    await this.pinFlows(netns, plan, present);
    const oo = this.o.originatingOnly;
    if (oo?.enabled) await oo.applier.apply(netns, plan.families);
    else await oo?.applier.remove(netns);
  }

  /**
   * The FoU half of {@link apply}: init, stale peer links deleted, wanted ones created (down).
   * @throws NetlinkError when the kernel refuses (no FoU/ipip/ip6tnl)
   */
  async applyTunnels(netns: string, plan: EgressClientPlan): Promise<void> {
    const { stale } = await this.ensureTunnels(netns, plan);
    if (stale.length > 0) await this.kernel.apply(stale.map((name) => rt.linkDel(name)), { netns });
  }

  /**
   * FoU init and the wanted peer links (a drain's link is kept, never made: one that is gone has
   * no flows left to drain).
   * @returns `stale`: the names of the peer links the plan no longer holds; `present`: the names of
   *   the peer links there before, which the plan keeps or re-creates, for {@link pinFlows}
   */
  private async ensureTunnels(netns: string, plan: EgressClientPlan): Promise<{ stale: string[]; present: Set<string> }> {
    const kernel = this.kernel;
    await initFou({ kernel, ip: this.o.ip }, { netns, port: this.o.port, families: plan.families, ...(this.o.modprobePath !== undefined ? { modprobePath: this.o.modprobePath } : {}) });
    const existing = await readFouPeers(kernel, { netns });
    const wanted = new Set([...plan.peers, ...plan.drains].map((p) => p.name));
    for (const p of plan.peers) await ensureFouPeer(kernel, p, existing, { netns });
    return { stale: existing.filter((l) => !wanted.has(l.name)).map((l) => l.name), present: new Set(existing.map((l) => l.name)) };
  }

  /**
   * Pins the TCP flows of the plan's peer links and of its drains' links that still exist, and
   * unpins every other link (`flowPins`; without it a no-op, with it disabled the pinning is
   * removed). Not on a move's critical path: until it runs, a new link's flows are routed by
   * 117/118, which point at it anyway.
   * @throws NetlinkError when the kernel refuses, or nft or iptables fails
   */
  async syncFlowPins(netns: string, plan: EgressClientPlan): Promise<void> {
    // The links in the netns matter only when something is to be pinned.
    const pins = this.o.flowPins?.enabled === true && plan.families.length > 0;
    // Names only: one link dump through the kernel (no process on rtnetlink).
    await this.pinFlows(netns, plan, pins ? new Set((await readLinks(this.kernel, { netns })).map((l) => l.ifname).filter(isFouPeerLinkName)) : new Set());
  }

  /**
   * {@link syncFlowPins} with the peer links known to be in the netns (`present`): {@link apply}
   * read them already, and makes no drain's link (a drain among them is there still).
   */
  private async pinFlows(netns: string, plan: EgressClientPlan, present: ReadonlySet<string>): Promise<void> {
    const fp = this.o.flowPins;
    if (!fp) return;
    if (!fp.enabled || plan.families.length === 0) return fp.applier.remove(netns);
    const links = pinnedLinks({ ...plan, drains: plan.drains.filter((d) => present.has(d.name)) });
    await fp.applier.apply(netns, links);
  }

  /**
   * The remotes of the pod's peer links as the kernel holds them (where its tunnels point now;
   * after a coild restart, the only record of the NAT pods chosen before).
   * @throws NetlinkError when the read fails
   */
  async peerRemotes(netns: string): Promise<string[]> {
    return (await readFouPeers(this.kernel, { netns })).map((l) => l.remote);
  }

  /**
   * Moves tunnels from the NAT pods of `from` to those of `to` in one batch of typed requests
   * ({@link retargetRequests}) when the two plans differ only in their peers' remotes (a failover
   * or a drain's start or end). One kernel round (rtnetlink through `kernel`, no process) instead of
   * {@link apply}'s dozen reads and writes: the move is what the client's outage is made of
   * (docs/egress-failover.md#moving-a-tunnel).
   * The flow pins of a new link follow with {@link syncFlowPins}, off the move's critical path.
   * @returns false when the plans differ in more than that (call {@link apply} instead)
   * @throws NetlinkError when the kernel refuses (the caller falls back to {@link apply})
   */
  async retarget(netns: string, from: EgressClientPlan, to: EgressClientPlan): Promise<boolean> {
    const requests = retargetRequests(from, to);
    if (requests === undefined) return false;
    if (requests.length > 0) await this.kernel.apply(requests, { netns });
    return true;
  }

  /**
   * The routing half of {@link apply}: peer links up, routes in 117/118 (proto 30), rules
   * 1800–2100, each synced (extras deleted) with typed requests through `kernel`. Needs the peer
   * links to exist.
   * @throws NetlinkError when the kernel refuses
   */
  async applyRouting(netns: string, plan: EgressClientPlan): Promise<void> {
    const up = plan.peers.map((p) => rt.linkSet(p.name, { up: true }));
    for (const family of [4, 6] as const) {
      for (const table of [EGRESS_NARROW_TABLE_ID, EGRESS_WIDE_TABLE_ID]) {
        await syncTableRoutes(this.kernel, { netns, family, table, protocol: PROTOCOL_ID, desired: plan.routes[family][table] ?? [], beforeAdd: up });
      }
    }
    // Rules last: until they exist, nothing is routed into a half-built tunnel.
    for (const family of [4, 6] as const) {
      await syncPolicyRules(this.kernel, { netns, family, minPriority: EGRESS_RULE_PRIORITY_MIN, maxPriority: EGRESS_RULE_PRIORITY_MAX, desired: plan.rules[family] });
    }
  }

  /**
   * Removes every egress rule and peer link (their routes go with them) from the pod netns — for
   * a deleted Egress or a removed annotation, which Coil leaves in place
   * (docs/compatibility.md#set-but-never-unset) — and the originating-only state. The FoU port and
   * flow devices stay: harmless, and shared by any later apply.
   * @throws NetlinkError when the kernel refuses, or nft or iptables fails
   */
  async remove(netns: string): Promise<void> {
    for (const family of [4, 6] as const) {
      await syncPolicyRules(this.kernel, { netns, family, minPriority: EGRESS_RULE_PRIORITY_MIN, maxPriority: EGRESS_RULE_PRIORITY_MAX, desired: [] });
    }
    const links = await readFouPeers(this.kernel, { netns });
    if (links.length > 0) await this.kernel.apply(links.map((l) => rt.linkDel(l.name)), { netns });
    await this.o.flowPins?.applier.remove(netns);
    await this.o.originatingOnly?.applier.remove(netns);
  }
}
