/**
 * Foo-over-UDP tunnels, shared by client pods (coild) and egress pods (coil-egress): the FoU
 * receive ports, one ipip/ip6tnl "peer link" per remote address, and the flow-based (external)
 * receive devices. Builders are pure; {@link initFou}, {@link readFouPeers}, {@link ensureFouPeer}
 * and {@link deleteFouPeer} touch the kernel with typed requests (rt-request.ts) through the
 * executor they are given.
 *
 * Concurrency: nothing here locks. Two calls for the same netns and peer must not overlap (the
 * callers serialise per pod / per process).
 *
 * @see docs/compatibility.md#fou-tunnels (Coil `v2/pkg/fou/fou.go`)
 */
import { createHash } from 'node:crypto';
import type { IpRunner } from './iproute2/ip-runner.js';
import { addressBytes, canonicalAddress, formatAddress, tryParseAddress, type IpAddress } from '../ipam/ip-address.js';
import { addressOf } from './cidr.js';
import { readLinks } from './link.js';
import { isNetlinkErrno } from './netlink-error.js';
import { rt, type FouPortEntry, type RtApplier, type RtReader, type RtRequest } from './rt-request.js';
import { writeSysctl } from './sysctl.js';

/** A netns file path; undefined = the caller's own netns. */
interface NetnsTarget {
  netns?: string | undefined;
}

/**
 * Where FoU's kernel work goes: typed requests and reads through `kernel` (coild's and
 * coil-egress's NetlinkExecutor: rtnetlink and genetlink, `ip` only as its fallback), and the two
 * things no netlink family does through `ip`, the IpRunner's programs: `modprobe` and the sysctls.
 */
export interface FouKernel {
  kernel: RtApplier & RtReader;
  ip: IpRunner;
}

/** TTL of the outer header of every peer link (Coil's value). */
export const FOU_TUNNEL_TTL = 225;
/** Flow-based (collect-metadata) receive devices: replies whose outer source matches no peer link. */
export const FLOW_DEVICE = { 4: 'coil_ipip4', 6: 'coil_ipip6' } as const;
/** The kernel's fallback tunnel devices and the names coil gives them, so no one mistakes them for ours. */
export const FALLBACK_RENAMES: ReadonlyArray<readonly [string, string]> = [['tunl0', 'coil_tunl'], ['ip6tnl0', 'coil_ip6tnl']];

/** One peer link to create: the tunnel to `remote` from `local`, both plain addresses of one family. */
export interface FouPeer {
  /** Peer address (an egress Service ClusterIP, or a client pod IP). */
  remote: string;
  /** This side's address of the same family (the pod IP). */
  local: string;
  /** UDP destination port; also the FoU receive port. Default of callers: FOU_PORT 5555. */
  port: number;
  /** UDP source port, or `'auto'` for a per-flow hash (Coil #245/#252, `fouSourcePortAuto`). */
  sourcePort: number | 'auto';
  /** MTU of the link; default: the kernel's (route MTU towards `remote` minus the encapsulation). */
  mtuBytes?: number;
}

/**
 * A {@link FouPeer} whose addresses were read once ({@link planFouPeer}): its link name, its family,
 * and `remote`/`local` in canonical text (what the kernel reads back), so that nothing down the
 * line parses them again.
 */
export interface PlannedFouPeer extends FouPeer {
  /** The peer link's name, {@link fouPeerLinkName} of `remote`. */
  readonly name: string;
  readonly family: 4 | 6;
}

/**
 * Reads `peer`'s addresses once: canonical text, family and link name.
 * @throws TypeError when `remote` and `local` are not addresses of one family
 */
export function planFouPeer(peer: FouPeer): PlannedFouPeer {
  if ('name' in peer && 'family' in peer) return peer as PlannedFouPeer;
  const remote = tryParseAddress(peer.remote);
  const local = tryParseAddress(peer.local);
  if (remote === undefined || local === undefined || remote.family !== local.family) {
    throw new TypeError(`FoU peer ${peer.remote} and local ${peer.local} are not of one family`);
  }
  return { ...peer, remote: formatAddress(remote.family, remote.value), local: formatAddress(local.family, local.value), name: linkNameOf(remote), family: remote.family };
}

/** A peer link as read back from the kernel. */
export interface FouPeerLink {
  name: string;
  family: 4 | 6;
  remote: string;
  local: string;
  /** 0 when the kernel picks it per flow ("auto"). */
  sourcePort: number;
  isUp: boolean;
}

/** Options of {@link initFou}. */
export interface FouInitOptions {
  /** netns file path; undefined = the caller's own netns. */
  netns?: string;
  /** FoU receive port (UDP). */
  port: number;
  /** Families to listen for: 4 = ipip (ipproto 4), 6 = ip6ip6 (ipproto 41). */
  families: ReadonlyArray<4 | 6>;
  /** kmod `modprobe`; `null` skips loading (kernels with FoU built in, or tests). Default `'modprobe'`. */
  modprobePath?: string | null;
}

/**
 * Name of the peer link to `remote`: `fou4_<8 hex of the IPv4 bytes>` or
 * `fou6_<first 4 bytes of SHA-1 over the 16 address bytes, hex>` (15 bytes max, Coil's scheme so
 * that links made by Coil are recognised).
 * @throws TypeError when `remote` is not an address
 */
export function fouPeerLinkName(remote: string): string {
  return linkNameOf(addressOf(remote));
}

function linkNameOf(remote: IpAddress): string {
  const bytes = Buffer.from(addressBytes(remote));
  if (bytes.length === 4) return `fou4_${bytes.toString('hex')}`;
  return `fou6_${createHash('sha1').update(bytes).digest('hex').slice(0, 8)}`;
}

/** True for names {@link fouPeerLinkName} produces. */
export function isFouPeerLinkName(name: string): boolean {
  return /^fou[46]_[0-9a-f]{8}$/.test(name);
}

/**
 * The typed request creating the peer link for `peer` (rt-request.ts `link-add-fou`): ipip (v4)
 * or ip6tnl mode ip6ip6 without the encapsulation-limit option (v6), ttl 225, encap fou. The link is created down: bring it up just before routing through it
 * (Coil #287).
 * @throws TypeError when `remote` and `local` are not addresses of one family
 */
export function fouPeerRequest(peer: FouPeer | PlannedFouPeer): RtRequest {
  const p = planFouPeer(peer);
  return rt.fouPeer({ name: p.name, ...(p.mtuBytes ? { mtu: p.mtuBytes } : {}), remote: p.remote, local: p.local,
    ttl: FOU_TUNNEL_TTL, encapSport: p.sourcePort === 'auto' ? 0 : p.sourcePort, encapDport: p.port });
}

/** The IP protocol a receive port of `family` decapsulates to: IPIP (4) for IPv4, IPv6 (41) for IPv6 (Coil's). */
export function fouIpproto(family: 4 | 6): number {
  return family === 4 ? 4 : 41;
}

/**
 * Modules this process has loaded already: they are node-wide, so one `modprobe` per process
 * suffices (a pod ADD after the first starts none).
 */
const loadedModules = new Set<string>();

/**
 * Prepares a netns for FoU, idempotently: loads fou/fou6 (once per process), sets rp_filter 0
 * (decapsulated packets arrive on a device their source is not routed through) and forwarding 1,
 * adds the missing receive ports (generic netlink `fou`), renames the fallback devices and creates
 * the flow-based receive devices — reads and writes as typed requests through `o.kernel`
 * (rtnetlink and genetlink with coild's executor; `ip` on the iproute2 path).
 * @throws NetlinkError when a step fails — notably the receive ports on a kernel without FoU
 *   (ENOENT, "Error talking to the kernel"): check {@link probeFeatures} first for a clear report
 */
export async function initFou(k: FouKernel, o: FouInitOptions): Promise<void> {
  const { kernel, ip } = k;
  const t = { netns: o.netns };
  const modules = o.modprobePath === null ? [] : o.families.map((f) => (f === 4 ? 'fou' : 'fou6')).filter((m) => !loadedModules.has(m));
  if (modules.length > 0) {
    // Best effort: built-in FoU has no module, and a real absence shows in the ports below.
    await ip.exec([o.modprobePath ?? 'modprobe', '-a', ...modules]).then(() => { for (const m of modules) loadedModules.add(m); }, () => undefined);
  }
  const sysctls: [string, string][] = [];
  if (o.families.includes(4)) sysctls.push(['net.ipv4.conf.default.rp_filter', '0'], ['net.ipv4.conf.all.rp_filter', '0'], ['net.ipv4.ip_forward', '1']);
  if (o.families.includes(6)) sysctls.push(['net.ipv6.conf.all.forwarding', '1']);
  if (o.netns !== undefined) {
    // /proc/sys/net shows the netns of the writing process, so one shell inside the netns writes
    // them all: no procps `sysctl` needed in the image, and one process instead of one per key.
    // The keys are the constants above, never input, so the shell text is fixed.
    const script = sysctls.map(([key, v]) => `echo ${v} > /proc/sys/${key.replaceAll('.', '/')}`).join(' && ');
    await ip.exec(['sh', '-c', script], { netns: o.netns });
  } else {
    for (const [key, v] of sysctls) await writeSysctl(ip, key, v);
  }

  const have = await kernel.dump<FouPortEntry>({ kind: 'fou-ports' }, t);
  const ports: RtRequest[] = [];
  for (const family of o.families) {
    const ipproto = fouIpproto(family);
    const af = family === 4 ? 'inet' : 'inet6';
    if (!have.some((h) => h.port === o.port && h.family === af)) ports.push(rt.fouPortAdd({ family, port: o.port, ipproto }));
  }
  if (ports.length > 0) await kernel.apply(ports, t);

  const links = await readLinks(kernel, t);
  const names = new Set(links.map((l) => l.ifname));
  const requests: RtRequest[] = [];
  for (const [from, to] of FALLBACK_RENAMES) if (names.has(from) && !names.has(to)) requests.push(rt.linkSet(from, { name: to }));
  for (const family of o.families) {
    const dev = links.find((l) => l.ifname === FLOW_DEVICE[family]);
    if (dev === undefined) requests.push(rt.linkAddExternal(FLOW_DEVICE[family], family), rt.linkSet(FLOW_DEVICE[family], { up: true }));
    else if (!dev.flags.includes('UP')) requests.push(rt.linkSet(dev.ifname, { up: true }));
  }
  if (requests.length > 0) await kernel.apply(requests, t);
}

/**
 * Reads the FoU peer links of a netns (names matching {@link isFouPeerLinkName}): one link dump.
 * @throws NetlinkError when the read fails
 */
export async function readFouPeers(kernel: RtReader, target: NetnsTarget = {}): Promise<FouPeerLink[]> {
  const links = await readLinks(kernel, target);
  return links.filter((l) => isFouPeerLinkName(l.ifname)).map((l) => {
    const d = l.linkinfo?.info_data;
    const sport: unknown = d?.encap?.sport;
    const endpoint = (a: string | undefined): string => (a && a !== 'any' ? canonicalAddress(a) : '');
    return {
      name: l.ifname,
      family: l.ifname.startsWith('fou4_') ? 4 : 6,
      remote: endpoint(d?.remote),
      local: endpoint(d?.local),
      sourcePort: typeof sport === 'number' ? sport : /^\d+$/.test(String(sport ?? '')) ? Number(sport) : 0,
      isUp: l.flags.includes('UP'),
    };
  });
}

/**
 * Makes sure the peer link for `peer` exists as asked. A link with another source port, local or
 * remote address is deleted and re-created (the kernel cannot change encap-sport in place). The
 * link is left as it was (a new one: down); bring it up right before adding routes (Coil #287).
 * @returns the link name and whether it was (re)created
 * @throws NetlinkError when the kernel refuses (e.g. no ipip/ip6tnl support)
 */
export async function ensureFouPeer(kernel: RtApplier, peer: FouPeer | PlannedFouPeer, existing: readonly FouPeerLink[], target: NetnsTarget = {}): Promise<{ name: string; created: boolean }> {
  const p = planFouPeer(peer);
  const name = p.name;
  const have = existing.find((l) => l.name === name);
  const sport = p.sourcePort === 'auto' ? 0 : p.sourcePort;
  if (have && have.remote === p.remote && have.local === p.local && have.sourcePort === sport) {
    return { name, created: false };
  }
  await kernel.apply([...(have ? [rt.linkDel(name)] : []), fouPeerRequest(p)], target);
  return { name, created: true };
}

/**
 * Deletes the peer link to `remote` (its routes go with it); a missing link is not an error.
 * @throws NetlinkError on other failures
 */
export async function deleteFouPeer(kernel: RtApplier, remote: string, target: NetnsTarget = {}): Promise<void> {
  try {
    await kernel.apply([rt.linkDel(fouPeerLinkName(remote))], target);
  } catch (err) {
    if (!isNetlinkErrno(err, 'ENODEV')) throw err;
  }
}
