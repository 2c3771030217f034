/**
 * Foo-over-UDP tunnels, shared by client pods (coild) and egress pods (coil-egress): the FoU
 * receive ports, one ipip/ip6tnl "peer link" per remote address, and the flow-based (external)
 * receive devices. Builders are pure; {@link initFou}, {@link ensureFouPeer} and
 * {@link deleteFouPeer} touch the kernel through an {@link IpRunner}.
 *
 * Concurrency: nothing here locks. Two calls for the same netns and peer must not overlap (the
 * callers serialise per pod / per process).
 *
 * @see docs/compatibility.md#fou-tunnels (Coil `v2/pkg/fou/fou.go`)
 */
import { createHash } from 'node:crypto';
import type { BatchLine, IpRunner, RunTarget } from './iproute2/ip-runner.js';
import { addressBytes, canonicalAddress, formatAddress, tryParseAddress, type IpAddress } from '../ipam/ip-address.js';
import { addressOf } from './cidr.js';
import { isNetlinkErrno } from './netlink-error.js';
import { formatRequest } from './iproute2/rt-format.js';
import { rt, type RtRequest } from './rt-request.js';
import { writeSysctl } from './sysctl.js';

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
export interface FouInitOptions extends Pick<RunTarget, 'netns'> {
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
 * `fou add port P ipproto 4` (v4) or `fou add port P ipproto 41 -6` (v6). Run such lines in a
 * batch of their own: iproute2 exits the whole process when the fou netlink family is missing.
 */
export function fouPortLine(port: number, family: 4 | 6): BatchLine {
  return family === 4 ? ['fou', 'add', 'port', String(port), 'ipproto', '4'] : ['fou', 'add', 'port', String(port), 'ipproto', '41', '-6'];
}

/**
 * The typed request creating the peer link for `peer` (rt-request.ts `link-add-fou`): ipip (v4)
 * or ip6tnl mode ip6ip6 without the encapsulation-limit option (v6), ttl 225, encap fou. Applied
 * through rtnetlink where coild has it (a tunnel's move, EgressClient.retarget), else as
 * {@link fouPeerAddLine}. The link is created down: bring it up just before routing through it
 * (Coil #287).
 * @throws TypeError when `remote` and `local` are not addresses of one family
 */
export function fouPeerRequest(peer: FouPeer | PlannedFouPeer): RtRequest {
  const p = planFouPeer(peer);
  return rt.fouPeer({ name: p.name, ...(p.mtuBytes ? { mtu: p.mtuBytes } : {}), remote: p.remote, local: p.local,
    ttl: FOU_TUNNEL_TTL, encapSport: p.sourcePort === 'auto' ? 0 : p.sourcePort, encapDport: p.port });
}

/**
 * `link add name fou… type ipip|ip6tnl … encap fou …`: {@link fouPeerRequest} as an `ip -batch` line.
 * @throws TypeError when `remote` and `local` are not addresses of one family
 */
export function fouPeerAddLine(peer: FouPeer | PlannedFouPeer): BatchLine {
  return formatRequest(fouPeerRequest(peer));
}

/** `link add name coil_ipip4 type ipip external` / `coil_ipip6 type ip6tnl external`, then up. */
export function flowDeviceLines(family: 4 | 6): BatchLine[] {
  const name = FLOW_DEVICE[family];
  return [['link', 'add', 'name', name, 'type', family === 4 ? 'ipip' : 'ip6tnl', 'external'], ['link', 'set', 'dev', name, 'up']];
}

/**
 * Parses `ip fou show` text (`port 5555 ipproto 4`, `port 5555 ipproto 41 -6`).
 * @returns the listening ports with their family (by ipproto: 4 → 4, 41 → 6)
 */
export function parseFouShow(text: string): { port: number; family: 4 | 6 }[] {
  const out: { port: number; family: 4 | 6 }[] = [];
  for (const m of text.matchAll(/port (\d+) ipproto (\d+)/g)) out.push({ port: Number(m[1]), family: m[2] === '41' ? 6 : 4 });
  return out;
}

/**
 * Prepares a netns for FoU, idempotently: loads fou/fou6, sets rp_filter 0 (decapsulated packets
 * arrive on a device their source is not routed through) and forwarding 1, adds the missing
 * receive ports, renames the fallback devices and creates the flow-based receive devices.
 * @throws NetlinkError when a step fails — notably `ip fou add` on a kernel without FoU
 *   ("Error talking to the kernel" / ENOENT): check {@link probeFeatures} first for a clear report
 */
export async function initFou(ip: IpRunner, o: FouInitOptions): Promise<void> {
  const t = { netns: o.netns };
  if (o.modprobePath !== null) {
    const modules = o.families.map((f) => (f === 4 ? 'fou' : 'fou6'));
    // Best effort: built-in FoU has no module, and a real absence shows in `fou add` below.
    await ip.exec([o.modprobePath ?? 'modprobe', '-a', ...modules]).catch(() => undefined);
  }
  const sysctls: [string, string][] = [];
  if (o.families.includes(4)) sysctls.push(['net.ipv4.conf.default.rp_filter', '0'], ['net.ipv4.conf.all.rp_filter', '0'], ['net.ipv4.ip_forward', '1']);
  if (o.families.includes(6)) sysctls.push(['net.ipv6.conf.all.forwarding', '1']);
  if (o.netns !== undefined) {
    // /proc/sys/net shows the netns of the writing process, so one shell inside the netns writes
    // them all: no procps `sysctl` needed in the image, and one process instead of one per key.
    // The keys are the constants above, never input, so the shell text is fixed.
    const script = sysctls.map(([k, v]) => `echo ${v} > /proc/sys/${k.replaceAll('.', '/')}`).join(' && ');
    await ip.exec(['sh', '-c', script], { netns: o.netns });
  } else {
    for (const [k, v] of sysctls) await writeSysctl(ip, k, v);
  }

  const { stdout } = await ip.exec([ip.ipPath, 'fou', 'show'], t);
  const have = parseFouShow(stdout);
  for (const family of o.families) {
    if (!have.some((h) => h.port === o.port && h.family === family)) await ip.batch([fouPortLine(o.port, family)], t);
  }

  const links = await ip.json<{ ifname: string; flags: string[] }[]>(['link', 'show'], t);
  const names = new Set(links.map((l) => l.ifname));
  const lines: BatchLine[] = [];
  for (const [from, to] of FALLBACK_RENAMES) if (names.has(from) && !names.has(to)) lines.push(['link', 'set', 'dev', from, 'name', to]);
  for (const family of o.families) {
    const dev = links.find((l) => l.ifname === FLOW_DEVICE[family]);
    if (dev === undefined) lines.push(...flowDeviceLines(family));
    else if (!dev.flags.includes('UP')) lines.push(['link', 'set', 'dev', dev.ifname, 'up']);
  }
  if (lines.length > 0) await ip.batch(lines, t);
}

interface DetailedLink {
  ifname: string;
  flags: string[];
  linkinfo?: { info_kind?: string; info_data?: { remote?: string; local?: string; encap?: { type?: string; sport?: number | string } } };
}

/**
 * Reads the FoU peer links of a netns (names matching {@link isFouPeerLinkName}).
 * @throws NetlinkError when iproute2 fails
 */
export async function readFouPeers(ip: IpRunner, target: Pick<RunTarget, 'netns'> = {}): Promise<FouPeerLink[]> {
  const links = await ip.json<DetailedLink[]>(['-d', 'link', 'show'], target);
  return links.filter((l) => isFouPeerLinkName(l.ifname)).map((l) => {
    const d = l.linkinfo?.info_data;
    const sport = d?.encap?.sport;
    return {
      name: l.ifname,
      family: l.ifname.startsWith('fou4_') ? 4 : 6,
      remote: d?.remote ? canonicalAddress(d.remote) : '',
      local: d?.local ? canonicalAddress(d.local) : '',
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
export async function ensureFouPeer(ip: IpRunner, peer: FouPeer | PlannedFouPeer, existing: readonly FouPeerLink[], target: Pick<RunTarget, 'netns'> = {}): Promise<{ name: string; created: boolean }> {
  const p = planFouPeer(peer);
  const name = p.name;
  const have = existing.find((l) => l.name === name);
  const sport = p.sourcePort === 'auto' ? 0 : p.sourcePort;
  if (have && have.remote === p.remote && have.local === p.local && have.sourcePort === sport) {
    return { name, created: false };
  }
  await ip.batch([...(have ? [['link', 'del', 'dev', name]] : []), fouPeerAddLine(p)], target);
  return { name, created: true };
}

/**
 * Deletes the peer link to `remote` (its routes go with it); a missing link is not an error.
 * @throws NetlinkError on other failures
 */
export async function deleteFouPeer(ip: IpRunner, remote: string, target: Pick<RunTarget, 'netns'> = {}): Promise<void> {
  try {
    await ip.batch([['link', 'del', 'dev', fouPeerLinkName(remote)]], target);
  } catch (err) {
    if (!isNetlinkErrno(err, 'ENODEV')) throw err;
  }
}
