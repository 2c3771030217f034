/**
 * rtnetlink reads: the dump requests of rt-request.ts's {@link RtDump} and the decoding of their
 * answers into the shapes `ip -json` prints (Link, LinkAddresses, Route, Rule), so a read
 * through coil's own socket and a read through `ip` give the same objects. Pure but for the
 * {@link DumpIo} it is given: rtnetlink-socket.ts sends and receives, this file builds and decodes.
 *
 * What is decoded is what coil reads (the fields the shapes declare), printed as iproute2 6.x
 * prints them (ip/ipaddress.c print_linkinfo/print_addrinfo, ip/iproute.c print_route,
 * ip/iprule.c print_rule): a field iproute2 leaves out (a route's `table` main, `protocol` boot,
 * `scope` global, `type` unicast; the `table` and `dev` a read filtered on) is left out here too. The
 * equivalence test (rtnetlink-dump.test.ts) compares both on real links.
 * @see https://man7.org/linux/man-pages/man7/rtnetlink.7.html
 */
import { addressBytes, formatAddress, tryParseAddress } from '../../ipam/ip-address.js';
import type { Address, LinkAddresses } from '../addr.js';
import type { Link, TunnelInfo } from '../link.js';
import { ROUTE_PROTOCOLS, type Route } from '../route.js';
import type { Rule } from '../rule.js';
import type { RtDump } from '../rt-request.js';
import {
  NLM_F_REQUEST, RTM_NEWLINK, RTM_NEWADDR, RTM_NEWROUTE, AF_UNSPEC, AF_INET, AF_INET6,
  IFLA_ADDRESS, IFLA_IFNAME, IFLA_MTU, IFLA_LINKINFO, IFLA_IFALIAS, IFLA_GROUP, IFLA_INFO_KIND,
  IFF_UP, IFA_ADDRESS, IFA_LOCAL, RTA_DST, RTA_OIF, RTA_GATEWAY, RTA_TABLE, RT_TABLE_MAIN,
  RTPROT_BOOT, RTN_UNICAST, NLMSG_HDRLEN, NLM_F_DUMP, RTM_GETLINK, RTM_GETADDR, RTM_GETROUTE,
  RTM_NEWRULE, RTM_GETRULE, IFLA_LINK, IFLA_OPERSTATE, IFLA_EXT_MASK, IFLA_LINK_NETNSID,
  RTEXT_FILTER_VF, RTEXT_FILTER_SKIP_STATS, IFA_FLAGS, IFA_F_TENTATIVE, RTA_PREFSRC, RTM_F_CLONED,
  RTM_F_LOOKUP_TABLE, FRA_SRC, FRA_PRIORITY, FRA_TABLE, FRA_DST, FRA_IIFNAME, FRA_FWMARK, FRA_FWMASK,
  IFLA_INFO_DATA, IFLA_IPTUN_LOCAL, IFLA_IPTUN_REMOTE, IFLA_IPTUN_ENCAP_TYPE, IFLA_IPTUN_ENCAP_SPORT,
  IFLA_IPTUN_ENCAP_DPORT, IFLA_IPTUN_COLLECT_METADATA, TUNNEL_ENCAP_FOU, RTA_PRIORITY, RT_FLAG_NAMES,
} from './rtnetlink-uapi.js';

/** One answer message: its type and its payload (after struct nlmsghdr). */
export interface RawMessage {
  type: number;
  payload: Uint8Array;
}

/** A refused read: the kernel's errno and the message `ip` prints for it. */
export class DumpError extends Error {
  constructor(message: string, readonly errno: number) {
    super(message);
    this.name = 'DumpError';
  }
}

/** What a read needs from the netns it runs in. */
export interface DumpIo {
  /**
   * Sends one request (`header flags` REQUEST, plus DUMP when `isDump`) and returns the messages
   * answering it: up to NLMSG_DONE for a dump, the one reply otherwise.
   * @throws DumpError when the kernel answers NLMSG_ERROR (or a dump was interrupted: EINTR)
   */
  query(type: number, isDump: boolean, body: Uint8Array): RawMessage[];
  /** Name of a link by ifindex (if_indextoname), undefined when there is none. */
  ifname(index: number): string | undefined;
}

/**
 * Reads `d` through `io` (an rtnetlink socket; the FoU ports are read over generic netlink, by
 * rtnetlink-socket.ts with genetlink.ts). @returns the entries, in `ip -json`'s shapes and order
 * @throws DumpError
 */
export function readDump(d: Exclude<RtDump, { kind: 'fou-ports' }>, io: DumpIo): Link[] | LinkAddresses[] | Route[] | Rule[] {
  switch (d.kind) {
    case 'links':
      return readLinks(io, d.dev);
    case 'addrs': {
      const links = readLinks(io, d.dev);
      const byIndex = new Map<number, Address[]>(links.map((l) => [l.ifindex, []]));
      // One link's: the kernel filters by ifa_index (strict checking); the map below for the rest.
      for (const m of io.query(RTM_GETADDR, true, ifaddrmsg(AF_UNSPEC, d.dev !== undefined && links.length === 1 ? links[0]!.ifindex : 0))) {
        if (m.type !== RTM_NEWADDR) continue;
        const a = decodeAddr(m.payload);
        byIndex.get(a.index)?.push(a.info);
      }
      return links.map((l) => ({ ifindex: l.ifindex, ifname: l.ifname, ...(l.address !== undefined ? { address: l.address } : {}), addr_info: byIndex.get(l.ifindex) ?? [] }));
    }
    case 'routes': {
      const oif = d.dev === undefined ? undefined : linkIndex(io, d.dev);
      const table = d.table ?? RT_TABLE_MAIN;
      const names = new Map<number, string | undefined>();
      const nameOf = (i: number): string | undefined => {
        if (!names.has(i)) names.set(i, io.ifname(i));
        return names.get(i);
      };
      // The kernel filters by table and device (the socket's strict checking, as ip asks), so a
      // node with a large main table (a router's full view) is not walked for table 116; the
      // filter below stays for kernels that ignore it.
      const request = concat(rtmsg(d.family === 4 ? AF_INET : AF_INET6, table < 256 ? table : 0), concat(u32Attr(RTA_TABLE, table), oif === undefined ? new Uint8Array(0) : u32Attr(RTA_OIF, oif)));
      let answer: RawMessage[];
      try {
        answer = io.query(RTM_GETROUTE, true, request);
      } catch (err) {
        if (err instanceof DumpError && err.errno === 2) return []; // ENOENT: a table never created has no routes
        throw err;
      }
      const out: Route[] = [];
      for (const m of answer) {
        if (m.type !== RTM_NEWROUTE) continue;
        const r = decodeRoute(m.payload, nameOf, { table: d.table !== undefined, dev: oif !== undefined, isGet: false });
        if (r !== undefined && r.table === table && (oif === undefined || r.oif === oif)) out.push(r.route);
      }
      return out;
    }
    case 'rules':
      return io.query(RTM_GETRULE, true, rtmsg(d.family === 4 ? AF_INET : AF_INET6))
        .filter((m) => m.type === RTM_NEWRULE).map((m) => decodeRule(m.payload));
    case 'route-get': {
      const a = tryParseAddress(d.address);
      if (a === undefined) throw new DumpError(`Error: inet prefix is expected rather than "${d.address}".`, 22);
      const bytes = addressBytes(a);
      const body = new Uint8Array(12 + 4 + bytes.length);
      body[0] = a.family === 4 ? AF_INET : AF_INET6;
      body[1] = bytes.length * 8; // rtm_dst_len: a host
      // As ip asks: the answer names the table the route was found in, not always main (IPv4;
      // IPv6 names it anyway and, checking strictly, refuses the flag).
      if (a.family === 4) new DataView(body.buffer).setUint32(8, RTM_F_LOOKUP_TABLE, true);
      body.set(new Uint8Array(new Uint16Array([4 + bytes.length, RTA_DST]).buffer), 12);
      body.set(bytes, 16);
      const out: Route[] = [];
      for (const m of io.query(RTM_GETROUTE, false, body)) {
        const r = m.type === RTM_NEWROUTE ? decodeRoute(m.payload, (i) => io.ifname(i), { table: false, dev: false, isGet: true }) : undefined;
        if (r !== undefined) out.push(r.route);
      }
      return out;
    }
  }
}

// ------------------------------------------------------------------ requests

/** struct ifinfomsg (16 bytes), all zero but the family. */
function ifinfomsg(attrs: Uint8Array = new Uint8Array(0)): Uint8Array {
  const b = new Uint8Array(16 + attrs.length);
  b.set(attrs, 16);
  return b;
}

/** struct ifaddrmsg (8 bytes), with `index` in ifa_index (0: every link). */
function ifaddrmsg(family: number, index = 0): Uint8Array {
  const b = new Uint8Array(8);
  b[0] = family;
  new DataView(b.buffer).setUint32(4, index, true);
  return b;
}

/** struct rtmsg / struct fib_rule_hdr (12 bytes, the same layout), with `table` in rtm_table. */
function rtmsg(family: number, table = 0): Uint8Array {
  const b = new Uint8Array(12);
  b[0] = family;
  b[4] = table;
  return b;
}

/** One rtattr carrying a C string. */
function stringAttr(type: number, s: string): Uint8Array {
  const text = new TextEncoder().encode(`${s}\0`);
  const len = 4 + text.length;
  const b = new Uint8Array((len + 3) & ~3);
  new DataView(b.buffer).setUint16(0, len, true);
  new DataView(b.buffer).setUint16(2, type, true);
  b.set(text, 4);
  return b;
}

/** One rtattr carrying a u32. */
function u32Attr(type: number, value: number): Uint8Array {
  const b = new Uint8Array(8);
  const v = new DataView(b.buffer);
  v.setUint16(0, 8, true);
  v.setUint16(2, type, true);
  v.setUint32(4, value, true);
  return b;
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  const out = new Uint8Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}

/** Builds one request message (nlmsghdr + body) with sequence number `seq`. */
export function requestMessage(type: number, isDump: boolean, body: Uint8Array, seq: number): Uint8Array {
  const b = new Uint8Array(NLMSG_HDRLEN + body.length);
  const v = new DataView(b.buffer);
  v.setUint32(0, b.length, true);
  v.setUint16(4, type, true);
  v.setUint16(6, NLM_F_REQUEST | (isDump ? NLM_F_DUMP : 0), true);
  v.setUint32(8, seq, true);
  b.set(body, NLMSG_HDRLEN);
  return b;
}

/** The link messages of `dev` (one RTM_GETLINK by name) or of every link (a dump). */
function readLinkMessages(io: DumpIo, dev: string | undefined): Uint8Array[] {
  if (dev !== undefined && (dev === '' || new TextEncoder().encode(dev).length >= 16)) {
    throw new DumpError(`Device "${dev}" does not exist.`, 19); // as ip: no such name can exist
  }
  let answer: RawMessage[];
  try {
    // Without statistics (≈ 40 % of a link message), as ip asks for them unless `-s`.
    const skipStats = u32Attr(IFLA_EXT_MASK, RTEXT_FILTER_VF | RTEXT_FILTER_SKIP_STATS);
    answer = dev === undefined
      ? io.query(RTM_GETLINK, true, ifinfomsg(skipStats))
      : io.query(RTM_GETLINK, false, ifinfomsg(concat(stringAttr(IFLA_IFNAME, dev), skipStats)));
  } catch (err) {
    if (err instanceof DumpError && err.errno === 19 && dev !== undefined) throw new DumpError(`Device "${dev}" does not exist.`, 19);
    throw err;
  }
  return answer.filter((m) => m.type === RTM_NEWLINK).map((m) => m.payload);
}

/**
 * Links, with ip's `M-DOWN` flag on a link whose parent in the same netns (a veth's peer, IFLA_LINK
 * without IFLA_LINK_NETNSID) is down.
 */
function readLinks(io: DumpIo, dev: string | undefined): Link[] {
  const decoded = readLinkMessages(io, dev).map(decodeLinkMessage);
  const flagsOf = new Map(decoded.map((l) => [l.link.ifindex, l.ifiFlags]));
  for (const l of decoded) {
    if (l.parent === undefined) continue;
    let parentFlags = flagsOf.get(l.parent);
    if (parentFlags === undefined) {
      const [m] = io.query(RTM_GETLINK, false, ifinfomsgOfIndex(l.parent)).filter((x) => x.type === RTM_NEWLINK);
      parentFlags = m === undefined ? undefined : new DataView(m.payload.buffer, m.payload.byteOffset, m.payload.length).getUint32(8, true);
    }
    if (parentFlags !== undefined && !(parentFlags & IFF_UP)) l.link.flags.push('M-DOWN');
  }
  return decoded.map((l) => l.link);
}

/** struct ifinfomsg naming a link by index. */
function ifinfomsgOfIndex(index: number): Uint8Array {
  const b = ifinfomsg();
  new DataView(b.buffer).setInt32(4, index, true);
  return b;
}

function linkIndex(io: DumpIo, dev: string): number {
  const [l] = readLinkMessages(io, dev);
  if (l === undefined) throw new DumpError(`Cannot find device "${dev}"`, 19);
  return new DataView(l.buffer, l.byteOffset, l.length).getInt32(4, true);
}

// ------------------------------------------------------------------ decoding

/**
 * The rtattrs of `b` from `offset` whose type (NLA_F_NESTED cleared) is below `limit`: an array
 * indexed by type holding each one's payload (the first of each type). Only the types a decoder
 * reads are kept: a link message carries ≈ 50 attributes, of which coil reads 9.
 */
function attrsOf(b: Uint8Array, offset: number, limit: number): (Uint8Array | undefined)[] {
  const v = new DataView(b.buffer, b.byteOffset, b.length);
  const out: (Uint8Array | undefined)[] = new Array<Uint8Array | undefined>(limit);
  for (let off = offset; off + 4 <= b.length;) {
    const len = v.getUint16(off, true);
    if (len < 4 || off + len > b.length) break;
    const type = v.getUint16(off + 2, true) & 0x3fff;
    if (type < limit && out[type] === undefined) out[type] = b.subarray(off + 4, off + len);
    off += (len + 3) & ~3;
  }
  return out;
}

const utf8 = new TextDecoder();
const u32 = (p: Uint8Array): number => new DataView(p.buffer, p.byteOffset, p.length).getUint32(0, true);
const i32 = (p: Uint8Array): number => new DataView(p.buffer, p.byteOffset, p.length).getInt32(0, true);
const cstring = (p: Uint8Array): string => {
  const nul = p.indexOf(0);
  return utf8.decode(nul < 0 ? p : p.subarray(0, nul));
};
const hexBytes = (p: Uint8Array): string => Array.from(p, (x) => x.toString(16).padStart(2, '0')).join(':');

/** An address in network byte order (4 or 16 bytes) as inet_ntop prints it. */
function ipText(p: Uint8Array): string {
  let v = 0n;
  for (const x of p) v = (v << 8n) | BigInt(x);
  return formatAddress(p.length === 4 ? 4 : 6, v);
}

/** net/if.h flag names in the order ip prints them (print_link_flags). */
const IFF_NAMES: ReadonlyArray<readonly [number, string]> = [
  [0x8, 'LOOPBACK'], [0x2, 'BROADCAST'], [0x10, 'POINTOPOINT'], [0x1000, 'MULTICAST'], [0x80, 'NOARP'],
  [0x200, 'ALLMULTI'], [0x100, 'PROMISC'], [0x400, 'MASTER'], [0x800, 'SLAVE'], [0x4, 'DEBUG'], [0x8000, 'DYNAMIC'],
  [0x4000, 'AUTOMEDIA'], [0x2000, 'PORTSEL'], [0x20, 'NOTRAILERS'], [0x1, 'UP'], [0x10000, 'LOWER_UP'],
  [0x20000, 'DORMANT'], [0x40000, 'ECHO'],
];
const IFF_RUNNING = 0x40;

/** RFC 2863 operational states (IF_OPER_*), as ip names them. */
const OPERSTATES = ['UNKNOWN', 'NOTPRESENT', 'DOWN', 'LOWERLAYERDOWN', 'TESTING', 'DORMANT', 'UP'];

/** ARPHRD_* → iproute2's name (lib/ll_types.c), for the link types a node has. */
const LINK_TYPES: ReadonlyMap<number, string> = new Map([
  [1, 'ether'], [772, 'loopback'], [768, 'ipip'], [769, 'tunnel6'], [776, 'sit'], [778, 'gre'], [823, 'gre6'],
  [32, 'infiniband'], [801, 'ieee802.11'], [0xfffe, 'none'], [0xffff, 'void'], [65534, 'none'],
]);
const ARPHRD_TUNNEL = 768;
const ARPHRD_TUNNEL6 = 769;
const ARPHRD_SIT = 776;
const ARPHRD_IPGRE = 778;
const ARPHRD_IP6GRE = 823;

/** A link-layer address as ip prints it (ll_addr_n2a): tunnels' endpoints as IP addresses. */
function linkAddress(p: Uint8Array, type: number): string {
  if (p.length === 4 && (type === ARPHRD_TUNNEL || type === ARPHRD_SIT || type === ARPHRD_IPGRE)) return ipText(p);
  if (p.length === 16 && (type === ARPHRD_TUNNEL6 || type === ARPHRD_IP6GRE)) return ipText(p);
  return hexBytes(p);
}

/** Decodes one RTM_NEWLINK payload (struct ifinfomsg + attributes). */
export function decodeLink(p: Uint8Array): Link {
  return decodeLinkMessage(p).link;
}

/**
 * {@link decodeLink}, with the link's raw flags and its parent in this netns (IFLA_LINK when there
 * is no IFLA_LINK_NETNSID: a veth's peer here), for the `M-DOWN` flag.
 */
function decodeLinkMessage(p: Uint8Array): { link: Link; ifiFlags: number; parent: number | undefined } {
  const v = new DataView(p.buffer, p.byteOffset, p.length);
  const type = v.getUint16(2, true);
  const ifindex = v.getInt32(4, true);
  const ifiFlags = v.getUint32(8, true);
  let flags = ifiFlags;
  const a = attrsOf(p, 16, IFLA_LINK_NETNSID + 1);
  const names: string[] = [];
  if (flags & IFF_UP && !(flags & IFF_RUNNING)) names.push('NO-CARRIER');
  flags &= ~IFF_RUNNING;
  for (const [bit, name] of IFF_NAMES) if (flags & bit) names.push(name);
  const mtu = a[IFLA_MTU];
  const link: Link = { ifindex, ifname: cstring(a[IFLA_IFNAME] ?? new Uint8Array(0)), flags: names, mtu: mtu ? u32(mtu) : 0 };
  const oper = a[IFLA_OPERSTATE];
  if (oper !== undefined) link.operstate = OPERSTATES[oper[0]!] ?? String(oper[0]);
  link.link_type = LINK_TYPES.get(type) ?? `[${type}]`;
  const address = a[IFLA_ADDRESS];
  if (address !== undefined) link.address = linkAddress(address, type);
  const group = a[IFLA_GROUP];
  if (group !== undefined) link.group = u32(group) === 0 ? 'default' : String(u32(group));
  const alias = a[IFLA_IFALIAS];
  if (alias !== undefined && cstring(alias) !== '') link.ifalias = cstring(alias);
  const netnsid = a[IFLA_LINK_NETNSID];
  if (netnsid !== undefined) link.link_netnsid = i32(netnsid);
  const info = a[IFLA_LINKINFO];
  const infoAttrs = info === undefined ? undefined : attrsOf(info, 0, IFLA_INFO_DATA + 1);
  const kind = infoAttrs?.[IFLA_INFO_KIND];
  if (kind !== undefined) {
    link.linkinfo = { info_kind: cstring(kind) };
    const data = infoAttrs?.[IFLA_INFO_DATA];
    if (data !== undefined && (link.linkinfo.info_kind === 'ipip' || link.linkinfo.info_kind === 'ip6tnl')) {
      link.linkinfo.info_data = tunnelData(data, link.linkinfo.info_kind === 'ipip' ? 4 : 6);
    }
  }
  const parentAttr = a[IFLA_LINK];
  const parent = parentAttr !== undefined && netnsid === undefined ? u32(parentAttr) : undefined;
  return { link, ifiFlags, parent: parent === 0 ? undefined : parent };
}

/**
 * The IFLA_INFO_DATA of an ipip or ip6tnl link, the fields coil reads, as link_iptnl.c /
 * link_ip6tnl.c and tunnel.c print them: `external` when flow-based, the endpoints (`any` when
 * unset), and the encapsulation unless none (ports in host order; sport 0 = per flow).
 */
function tunnelData(p: Uint8Array, family: 4 | 6): TunnelInfo {
  const a = attrsOf(p, 0, IFLA_IPTUN_COLLECT_METADATA + 1);
  const out: TunnelInfo = {};
  if (a[IFLA_IPTUN_COLLECT_METADATA] !== undefined) out.external = true;
  const endpoint = (b: Uint8Array | undefined): string => (b === undefined || b.length !== (family === 4 ? 4 : 16) || b.every((x) => x === 0) ? 'any' : ipText(b));
  out.remote = endpoint(a[IFLA_IPTUN_REMOTE]);
  out.local = endpoint(a[IFLA_IPTUN_LOCAL]);
  const type = a[IFLA_IPTUN_ENCAP_TYPE];
  const typeNo = type !== undefined && type.length >= 2 ? new DataView(type.buffer, type.byteOffset, 2).getUint16(0, true) : 0;
  if (typeNo !== 0) {
    const port = (b: Uint8Array | undefined): number => (b !== undefined && b.length >= 2 ? new DataView(b.buffer, b.byteOffset, 2).getUint16(0, false) : 0);
    out.encap = { type: typeNo === TUNNEL_ENCAP_FOU ? 'fou' : typeNo === 2 ? 'gue' : null, sport: port(a[IFLA_IPTUN_ENCAP_SPORT]), dport: port(a[IFLA_IPTUN_ENCAP_DPORT]) };
  }
  return out;
}

/** Route/address scopes (rt_scope_t) as ip names them. */
function scopeName(s: number): string {
  return ({ 0: 'global', 200: 'site', 253: 'link', 254: 'host', 255: 'nowhere' } as Record<number, string>)[s] ?? String(s);
}

/** Decodes one RTM_NEWADDR payload (struct ifaddrmsg + attributes). */
function decodeAddr(p: Uint8Array): { index: number; info: Address } {
  const v = new DataView(p.buffer, p.byteOffset, p.length);
  const family = p[0];
  const a = attrsOf(p, 8, IFA_FLAGS + 1);
  const local = a[IFA_LOCAL] ?? a[IFA_ADDRESS];
  const flagsAttr = a[IFA_FLAGS];
  const flags = flagsAttr !== undefined ? u32(flagsAttr) : p[2]!;
  const info: Address = {
    family: family === AF_INET ? 'inet' : 'inet6', local: local === undefined ? '' : ipText(local), prefixlen: p[1]!, scope: scopeName(p[3]!),
    ...(flags & IFA_F_TENTATIVE ? { tentative: true } : {}),
  };
  return { index: v.getUint32(4, true), info };
}

/** Route types (RTN_*) as ip names them. */
const ROUTE_TYPES = ['none', 'unicast', 'local', 'broadcast', 'anycast', 'multicast', 'blackhole', 'unreachable', 'prohibit', 'throw', 'nat', 'xresolve'];

/** A table id as ip names it (/etc/iproute2/rt_tables' reserved ids). */
function tableName(t: number): string {
  return ({ 255: 'local', 254: 'main', 253: 'default', 0: 'unspec' } as Record<number, string>)[t] ?? String(t);
}

/**
 * Decodes one RTM_NEWROUTE payload (struct rtmsg + attributes); undefined for a cached clone,
 * which `ip route show` leaves out (but `route get` answers with one: `isGet`). `filtered`: ip
 * prints no `table` or `dev` it was asked for.
 */
function decodeRoute(p: Uint8Array, nameOf: (index: number) => string | undefined, filtered: { table: boolean; dev: boolean; isGet: boolean }): { route: Route; table: number; oif: number | undefined } | undefined {
  const v = new DataView(p.buffer, p.byteOffset, p.length);
  const isCloned = (v.getUint32(8, true) & RTM_F_CLONED) !== 0;
  if (isCloned && !filtered.isGet) return undefined;
  const [family, dstLen, , , rtmTable, protocol, scope, type] = p as unknown as number[];
  const a = attrsOf(p, 12, RTA_TABLE + 1);
  const tableAttr = a[RTA_TABLE];
  const table = tableAttr !== undefined ? u32(tableAttr) : rtmTable!;
  const dstBytes = a[RTA_DST];
  const hostLen = family === AF_INET ? 32 : 128;
  const dst = dstBytes !== undefined ? (dstLen === hostLen ? ipText(dstBytes) : `${ipText(dstBytes)}/${dstLen!}`) : dstLen ? `0/${dstLen}` : 'default';
  const oifAttr = a[RTA_OIF];
  const oif = oifAttr !== undefined ? u32(oifAttr) : undefined;
  const dev = oif === undefined || filtered.dev ? undefined : nameOf(oif);
  const gateway = a[RTA_GATEWAY];
  const prefsrc = a[RTA_PREFSRC];
  const metric = a[RTA_PRIORITY];
  const rtmFlags = v.getUint32(8, true);
  const route: Route = {
    ...(type !== RTN_UNICAST ? { type: ROUTE_TYPES[type!] ?? String(type) } : {}),
    dst,
    ...(gateway !== undefined ? { gateway: ipText(gateway) } : {}),
    ...(dev !== undefined ? { dev } : {}),
    ...(table !== RT_TABLE_MAIN && !filtered.table ? { table: tableName(table) } : {}),
    // ip prints neither for a cached clone (what `route get` answers with).
    ...(protocol !== RTPROT_BOOT && !isCloned ? { protocol: ROUTE_PROTOCOLS[protocol!] ?? String(protocol) } : {}),
    ...(scope !== 0 && !isCloned ? { scope: scopeName(scope!) } : {}),
    ...(prefsrc !== undefined ? { prefsrc: ipText(prefsrc) } : {}),
    ...(metric !== undefined ? { metric: u32(metric) } : {}),
    flags: RT_FLAG_NAMES.filter(([bit]) => rtmFlags & bit).map(([, name]) => name),
  };
  return { route, table, oif };
}

/** Decodes one RTM_NEWRULE payload (struct fib_rule_hdr + attributes). */
function decodeRule(p: Uint8Array): Rule {
  const [family, dstLen, srcLen, , rtmTable] = p as unknown as number[];
  const a = attrsOf(p, 12, FRA_FWMASK + 1);
  const src = a[FRA_SRC];
  const dst = a[FRA_DST];
  const hostLen = family === AF_INET ? 32 : 128;
  const tableAttr = a[FRA_TABLE];
  const table = tableAttr !== undefined ? u32(tableAttr) : rtmTable!;
  const priority = a[FRA_PRIORITY];
  const iif = a[FRA_IIFNAME];
  const mark = a[FRA_FWMARK];
  const mask = a[FRA_FWMASK];
  // iprule.c prints a mark as `%#llx` (0 as "0"), and the mask only when it is not all ones.
  const hex = (v: number): string => (v === 0 ? '0' : `0x${v.toString(16)}`);
  const markOf = (): Partial<Rule> => {
    if (mark === undefined && mask === undefined) return {};
    const m = mark === undefined ? 0 : u32(mark);
    const k = mask === undefined ? 0xffffffff : u32(mask);
    return k !== 0xffffffff ? { fwmark: hex(m), fwmask: hex(k) } : { fwmark: hex(m) };
  };
  return {
    priority: priority !== undefined ? u32(priority) : 0,
    ...(src !== undefined ? { src: ipText(src), ...(srcLen !== hostLen ? { srclen: srcLen! } : {}) } : srcLen ? { src: '0', srclen: srcLen } : { src: 'all' }),
    ...(dst !== undefined ? { dst: ipText(dst), ...(dstLen !== hostLen ? { dstlen: dstLen! } : {}) } : dstLen ? { dst: '0', dstlen: dstLen } : {}),
    ...(iif !== undefined ? { iif: new TextDecoder().decode(iif).replace(/\0.*$/s, '') } : {}),
    ...markOf(),
    ...(table ? { table: tableName(table) } : {}),
  };
}
