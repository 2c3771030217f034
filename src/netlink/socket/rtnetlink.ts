/**
 * rtnetlink messages for the typed requests of rt-request.ts that coil makes on every pod ADD/DEL
 * (creating a veth pair, setting a link, adding addresses and routes) and on an egress tunnel's
 * move (a FoU peer link, `route replace`). Pure: it turns requests into message bytes and reply
 * bytes into errnos; rtnetlink-socket.ts does the I/O.
 *
 * Each request is encoded exactly as iproute2 builds the request of the same line
 * (rt-format.ts; ip/iplink.c, ip/ipaddress.c, ip/iproute.c, ip/link_iptnl.c, ip/link_ip6tnl.c of
 * iproute2 6.x), including its
 * defaults: `route add` without `proto` is RTPROT_BOOT, a route without a gateway gets scope link,
 * tables above 255 travel in RTA_TABLE. The equivalence tests apply both and compare the kernel.
 *
 * @see https://man7.org/linux/man-pages/man7/rtnetlink.7.html, include/uapi/linux/{netlink,
 *   rtnetlink,if_link,if_addr,veth,if_tunnel,ip6_tunnel}.h
 */
import { addressBytes, type IpAddress } from '../../ipam/ip-address.js';
import { addressOf, splitPrefix } from '../cidr.js';
import type { RtRequest } from '../rt-request.js';
import {
  NLM_F_REQUEST, NLM_F_ACK, NLM_F_EXCL, NLM_F_CREATE, NLMSG_ERROR, RTM_NEWLINK, RTM_DELLINK,
  RTM_NEWADDR, RTM_DELADDR, RTM_NEWROUTE, RTM_DELROUTE, AF_UNSPEC, AF_INET, AF_INET6, IFLA_ADDRESS,
  IFLA_IFNAME, IFLA_MTU, IFLA_LINKINFO, IFLA_IFALIAS, IFLA_GROUP, IFLA_NET_NS_FD, IFLA_INFO_KIND,
  IFLA_INFO_DATA, VETH_INFO_PEER, IFF_UP, IFA_ADDRESS, IFA_LOCAL, IFA_F_NODAD, RTA_DST, RTA_OIF,
  RTA_GATEWAY, RTA_TABLE, RT_TABLE_UNSPEC, RT_TABLE_MAIN, RTPROT_BOOT, RTN_UNICAST,
  RT_SCOPE_NOWHERE, NLMSG_HDRLEN, IFNAMSIZ, NLM_F_REPLACE, IFLA_IPTUN_LINK, IFLA_IPTUN_LOCAL,
  IFLA_IPTUN_REMOTE, IFLA_IPTUN_TTL, IFLA_IPTUN_TOS, IFLA_IPTUN_ENCAP_LIMIT, IFLA_IPTUN_FLOWINFO,
  IFLA_IPTUN_FLAGS, IFLA_IPTUN_PROTO, IFLA_IPTUN_PMTUDISC, IFLA_IPTUN_ENCAP_TYPE, IFLA_IPTUN_ENCAP_FLAGS,
  IFLA_IPTUN_ENCAP_SPORT, IFLA_IPTUN_ENCAP_DPORT, IFLA_IPTUN_FWMARK, TUNNEL_ENCAP_FOU, TUNNEL_ENCAP_FLAG_CSUM6,
  IP6_TNL_F_IGN_ENCAP_LIMIT, IPV6_DEFAULT_TNL_ENCAP_LIMIT, IPPROTO_IPV6, RTM_NEWRULE, RTM_DELRULE,
  FRA_PRIORITY, FRA_TABLE, FRA_DST, FRA_IIFNAME, FRA_FWMARK, FRA_FWMASK, FR_ACT_TO_TBL, IFLA_IPTUN_COLLECT_METADATA,
  RTA_PRIORITY, RTA_PREFSRC, RTNH_F_ONLINK,
} from './rtnetlink-uapi.js';

const RT_SCOPE = { global: 0, link: 253, host: 254 } as const;

/** A request with its values decoded (addresses as numbers, MACs as bytes), ready to encode. */
type RtOp =
  | { kind: 'link-add-veth'; name: string; mtu?: number; mac?: Uint8Array; peer: { name: string; mtu?: number; mac?: Uint8Array; netnsPath?: string } }
  | { kind: 'link-set'; dev: string; alias?: string; mtu?: number; up?: boolean; group?: number; name?: string }
  | { kind: 'link-del'; dev?: string; group?: number }
  | { kind: 'link-add-external'; name: string; family: 4 | 6 }
  | { kind: 'link-add-fou'; name: string; mtu?: number; remote: IpAddress; local: IpAddress; ttl: number; encapSport: number; encapDport: number }
  | { kind: 'addr'; verb: 'add' | 'del'; address: IpAddress; prefixBits: number; dev: string; scope?: keyof typeof RT_SCOPE; isNoDad: boolean }
  | { kind: 'route'; verb: 'add' | 'del' | 'replace'; family: 4 | 6; dst?: IpAddress; dstBits: number; via?: IpAddress; dev?: string; scope?: keyof typeof RT_SCOPE; protocol?: number; table?: number; prefsrc?: IpAddress; metric?: number; isOnlink: boolean }
  | { kind: 'rule'; verb: 'add' | 'del'; family: 4 | 6; priority: number; table: number; dst?: IpAddress; dstBits: number; iif?: string; fwmark?: number; fwmask?: number };

/** What a request needs from the netns it runs in. */
export interface ResolveContext {
  /** ifindex of a link name, or 0 when there is none (if_nametoindex semantics). */
  ifindex(name: string): number;
  /** An open file descriptor of the netns file at `path` (for IFLA_NET_NS_FD). */
  netnsFd(path: string): number;
}

/** A request that cannot be built: iproute2's message for the same case, and its errno. */
export class RequestError extends Error {
  /**
   * @param message what `ip` prints for the same case, e.g. `Cannot find device "x"`
   * @param errno the positive errno it stands for (ENODEV = 19)
   */
  constructor(message: string, readonly errno: number) {
    super(message);
    this.name = 'RequestError';
  }
}

// ------------------------------------------------------------------ decoding of request values

/** A value outside what a request may carry (EINVAL, as the kernel or `ip` would refuse it). */
function invalid(what: string): RequestError {
  return new RequestError(`invalid ${what}`, 22);
}

function linkName(name: string | undefined): string {
  if (name === undefined || name.length === 0 || Buffer.byteLength(name) >= IFNAMSIZ || name.includes('/')) throw invalid(`link name "${name ?? ''}"`);
  return name;
}

function u32(v: number | undefined, what: string): number | undefined {
  if (v === undefined) return undefined;
  if (!Number.isInteger(v) || v < 0 || v > 0xffffffff) throw invalid(`${what} ${v}`);
  return v;
}

function mac(text: string | undefined): Uint8Array | undefined {
  if (text === undefined) return undefined;
  if (!/^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/i.test(text)) throw invalid(`MAC ${text}`);
  return Uint8Array.from(text.split(':').map((h) => parseInt(h, 16)));
}

function prefix(text: string): { address: IpAddress; bits: number } {
  const { address, bits } = splitPrefix(text);
  if (address === undefined) throw invalid(`address ${text}`);
  if (bits === undefined) throw invalid(`prefix ${text}`);
  return { address, bits };
}

function u16(v: number, what: string): number {
  if (!Number.isInteger(v) || v < 0 || v > 0xffff) throw invalid(`${what} ${v}`);
  return v;
}

function plainAddress(text: string): IpAddress {
  try {
    return addressOf(text);
  } catch {
    throw invalid(`address ${text}`);
  }
}

function scopeOf(s: string | undefined): keyof typeof RT_SCOPE | undefined {
  if (s === undefined) return undefined;
  if (!(s in RT_SCOPE)) throw invalid(`scope ${s}`);
  return s as keyof typeof RT_SCOPE;
}

/** Decodes the values of `r`. @throws RequestError (EINVAL) for a value no request may carry */
function decode(r: RtRequest): RtOp {
  const opt = <T>(k: string, v: T | undefined) => (v === undefined ? {} : { [k]: v });
  switch (r.kind) {
    case 'link-add-veth': {
      const p = r.peer;
      if (p.netnsPath !== undefined && !p.netnsPath.startsWith('/')) throw invalid(`netns path ${p.netnsPath}`);
      return {
        kind: r.kind, name: linkName(r.name), ...opt('mtu', u32(r.mtu, 'mtu')), ...opt('mac', mac(r.mac)),
        peer: { name: linkName(p.name), ...opt('mtu', u32(p.mtu, 'mtu')), ...opt('mac', mac(p.mac)), ...opt('netnsPath', p.netnsPath) },
      };
    }
    case 'link-set':
      if (r.alias !== undefined && Buffer.byteLength(r.alias) >= 256) throw invalid('alias'); // IFALIASZ
      return { kind: r.kind, dev: linkName(r.dev), ...opt('alias', r.alias), ...opt('mtu', u32(r.mtu, 'mtu')), ...opt('up', r.up), ...opt('group', u32(r.group, 'group')),
        ...opt('name', r.name === undefined ? undefined : linkName(r.name)) };
    case 'fou-port': // a generic netlink request: genetlink.ts builds it, on its own socket
      throw invalid('request: fou-port is not an rtnetlink message');
    case 'link-add-external':
      if (r.family !== 4 && r.family !== 6) throw invalid(`family ${String(r.family)}`);
      return { kind: r.kind, name: linkName(r.name), family: r.family };
    case 'link-del':
      if ((r.dev === undefined) === (r.group === undefined)) throw invalid('link-del: one of dev and group');
      return r.dev !== undefined ? { kind: r.kind, dev: linkName(r.dev) } : { kind: r.kind, group: u32(r.group, 'group')! };
    case 'link-add-fou': {
      const remote = plainAddress(r.remote);
      const local = plainAddress(r.local);
      if (remote.family !== local.family) throw invalid(`tunnel ends of two families: ${r.remote}, ${r.local}`);
      if (!Number.isInteger(r.ttl) || r.ttl < 0 || r.ttl > 255) throw invalid(`ttl ${r.ttl}`);
      return {
        kind: r.kind, name: linkName(r.name), ...opt('mtu', u32(r.mtu, 'mtu')), remote, local, ttl: r.ttl,
        encapSport: u16(r.encapSport, 'encap-sport'), encapDport: u16(r.encapDport, 'encap-dport'),
      };
    }
    case 'addr': {
      const { address, bits } = prefix(r.cidr);
      return { kind: r.kind, verb: r.verb, address, prefixBits: bits, dev: linkName(r.dev), isNoDad: r.isNoDad === true, ...opt('scope', scopeOf(r.scope)) };
    }
    case 'route': {
      const via = r.via === undefined ? undefined : prefix(r.via);
      if (via !== undefined && via.bits !== (via.address.family === 4 ? 32 : 128)) throw invalid(`gateway ${r.via ?? ''}`);
      let family: 4 | 6;
      let dst: IpAddress | undefined;
      let dstBits = 0;
      if (r.dst === 'default') {
        if (via === undefined) throw invalid('default route without a gateway'); // its family would be a guess
        family = via.address.family;
      } else {
        const d = prefix(r.dst);
        family = d.address.family;
        dstBits = d.bits;
        dst = d.bits === 0 ? undefined : d.address;
      }
      if (via !== undefined && via.address.family !== family) throw invalid('gateway of another family'); // RTA_VIA: not ours
      const protocol = u32(r.protocol, 'protocol');
      if (protocol !== undefined && protocol > 255) throw invalid(`protocol ${protocol}`);
      const prefsrc = r.prefsrc === undefined ? undefined : plainAddress(r.prefsrc);
      if (prefsrc !== undefined && prefsrc.family !== family) throw invalid(`source ${r.prefsrc ?? ''} of another family`);
      return {
        kind: r.kind, verb: r.verb, family, dstBits, ...opt('dst', dst), ...opt('via', via?.address),
        ...opt('dev', r.dev === undefined ? undefined : linkName(r.dev)), ...opt('scope', scopeOf(r.scope)),
        ...opt('protocol', protocol), ...opt('table', u32(r.table, 'table')), ...opt('prefsrc', prefsrc),
        ...opt('metric', u32(r.metric, 'metric')), isOnlink: r.isOnlink === true,
      };
    }
    case 'rule': {
      if (r.family !== 4 && r.family !== 6) throw invalid(`family ${String(r.family)}`);
      const d = r.dst === undefined ? undefined : prefix(r.dst);
      if (d !== undefined && d.address.family !== r.family) throw invalid(`rule destination ${r.dst ?? ''} of another family`);
      return {
        kind: r.kind, verb: r.verb, family: r.family, priority: u32(r.priority, 'priority')!, table: u32(r.table, 'table')!,
        dstBits: d?.bits ?? 0, ...opt('dst', d !== undefined && d.bits > 0 ? d.address : undefined), ...opt('iif', r.iif === undefined ? undefined : linkName(r.iif)),
        ...opt('fwmark', u32(r.fwmark, 'fwmark')), ...opt('fwmask', u32(r.fwmask, 'fwmask')),
      };
    }
  }
}

// ------------------------------------------------------------------ message building

/** Appends netlink attributes (struct rtattr + payload, 4-byte aligned). */
class Writer {
  private buf = new Uint8Array(256);
  private view = new DataView(this.buf.buffer);
  length = 0;

  private room(n: number): void {
    if (this.length + n <= this.buf.length) return;
    const next = new Uint8Array(Math.max(this.buf.length * 2, this.length + n));
    next.set(this.buf);
    this.buf = next;
    this.view = new DataView(next.buffer);
  }
  u8(v: number): void { this.room(1); this.view.setUint8(this.length, v); this.length += 1; }
  u16(v: number): void { this.room(2); this.view.setUint16(this.length, v, true); this.length += 2; }
  /** A u16 in network byte order (ports). */
  be16(v: number): void { this.room(2); this.view.setUint16(this.length, v, false); this.length += 2; }
  u32(v: number): void { this.room(4); this.view.setUint32(this.length, v >>> 0, true); this.length += 4; }
  i32(v: number): void { this.room(4); this.view.setInt32(this.length, v, true); this.length += 4; }
  bytes(b: Uint8Array): void { this.room(b.length); this.buf.set(b, this.length); this.length += b.length; }
  align(): void { while (this.length % 4 !== 0) this.u8(0); }
  /** Writes a u16 at `at` (a length patched in after its contents are known). */
  patch16(at: number, v: number): void { this.view.setUint16(at, v, true); }
  patch32(at: number, v: number): void { this.view.setUint32(at, v, true); }
  /** An attribute whose payload `fill` writes; nests naturally. */
  attr(type: number, fill: () => void): void {
    const at = this.length;
    this.u16(0);
    this.u16(type);
    fill();
    this.patch16(at, this.length - at);
    this.align();
  }
  attrU32(type: number, v: number): void { this.attr(type, () => this.u32(v)); }
  attrU8(type: number, v: number): void { this.attr(type, () => this.u8(v)); }
  attrU16(type: number, v: number): void { this.attr(type, () => this.u16(v)); }
  attrBytes(type: number, b: Uint8Array): void { this.attr(type, () => this.bytes(b)); }
  /** A C string attribute including its NUL, as iproute2 sends IFLA_IFNAME. */
  attrString(type: number, s: string, withNul = true): void {
    this.attrBytes(type, new TextEncoder().encode(withNul ? `${s}\0` : s));
  }
  result(): Uint8Array { return this.buf.slice(0, this.length); }
}

function ifindexOf(ctx: ResolveContext, name: string): number {
  const index = ctx.ifindex(name);
  // iproute2's wording, which NetlinkError classifies as ENODEV.
  if (index === 0) throw new RequestError(`Cannot find device "${name}"`, 19);
  return index;
}

/** struct ifinfomsg: family, pad, type, index, flags, change. */
function ifinfomsg(w: Writer, index: number, flags = 0, change = 0): void {
  w.u8(AF_UNSPEC); w.u8(0); w.u16(0); w.i32(index); w.u32(flags); w.u32(change);
}

/**
 * Builds the netlink message of `request` with sequence number `seq`, resolving link names in `ctx`.
 * @returns one netlink message (nlmsghdr + payload) asking for an ACK
 * @throws RequestError when a named link does not exist (errno ENODEV), as `ip` would fail, or a
 *   value is invalid (EINVAL: a malformed address, MAC or name)
 */
export function buildRequest(request: RtRequest, seq: number, ctx: ResolveContext): Uint8Array {
  const op = decode(request);
  const w = new Writer();
  const header = (type: number, flags: number): void => {
    w.u32(0); w.u16(type); w.u16(NLM_F_REQUEST | NLM_F_ACK | flags); w.u32(seq); w.u32(0);
  };
  switch (op.kind) {
    case 'link-add-veth': {
      header(RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL);
      ifinfomsg(w, 0);
      w.attrString(IFLA_IFNAME, op.name);
      if (op.mtu !== undefined) w.attrU32(IFLA_MTU, op.mtu);
      if (op.mac) w.attrBytes(IFLA_ADDRESS, op.mac);
      w.attr(IFLA_LINKINFO, () => {
        w.attrString(IFLA_INFO_KIND, 'veth', false);
        w.attr(IFLA_INFO_DATA, () => w.attr(VETH_INFO_PEER, () => {
          ifinfomsg(w, 0);
          w.attrString(IFLA_IFNAME, op.peer.name);
          if (op.peer.mtu !== undefined) w.attrU32(IFLA_MTU, op.peer.mtu);
          if (op.peer.mac) w.attrBytes(IFLA_ADDRESS, op.peer.mac);
          if (op.peer.netnsPath !== undefined) w.attrU32(IFLA_NET_NS_FD, ctx.netnsFd(op.peer.netnsPath));
        }));
      });
      break;
    }
    case 'link-set': {
      header(RTM_NEWLINK, 0);
      ifinfomsg(w, ifindexOf(ctx, op.dev), op.up ? IFF_UP : 0, op.up === undefined ? 0 : IFF_UP);
      if (op.mtu !== undefined) w.attrU32(IFLA_MTU, op.mtu);
      if (op.alias !== undefined) w.attrString(IFLA_IFALIAS, op.alias, false);
      if (op.group !== undefined) w.attrU32(IFLA_GROUP, op.group);
      if (op.name !== undefined) w.attrString(IFLA_IFNAME, op.name);
      break;
    }
    case 'link-add-external': {
      // As link_iptnl.c / link_ip6tnl.c send `type ipip|ip6tnl external`: proto 0 (any), then
      // the metadata flag and nothing else.
      header(RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL);
      ifinfomsg(w, 0);
      w.attrString(IFLA_IFNAME, op.name);
      w.attr(IFLA_LINKINFO, () => {
        w.attrString(IFLA_INFO_KIND, op.family === 4 ? 'ipip' : 'ip6tnl', false);
        w.attr(IFLA_INFO_DATA, () => {
          w.attrU8(IFLA_IPTUN_PROTO, 0);
          w.attr(IFLA_IPTUN_COLLECT_METADATA, () => undefined);
        });
      });
      break;
    }
    case 'link-del': {
      header(RTM_DELLINK, 0);
      // By group: ifindex 0 and IFLA_GROUP (the kernel's rtnl_group_dellink), as `ip link del group`.
      ifinfomsg(w, op.dev !== undefined ? ifindexOf(ctx, op.dev) : 0);
      if (op.group !== undefined) w.attrU32(IFLA_GROUP, op.group);
      break;
    }
    case 'link-add-fou': {
      header(RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL);
      ifinfomsg(w, 0);
      w.attrString(IFLA_IFNAME, op.name);
      if (op.mtu !== undefined) w.attrU32(IFLA_MTU, op.mtu);
      const isV6 = op.remote.family === 6;
      w.attr(IFLA_LINKINFO, () => {
        w.attrString(IFLA_INFO_KIND, isV6 ? 'ip6tnl' : 'ipip', false);
        w.attr(IFLA_INFO_DATA, () => (isV6 ? ip6tnlData(w, op) : ipipData(w, op)));
      });
      break;
    }
    case 'addr': {
      header(op.verb === 'add' ? RTM_NEWADDR : RTM_DELADDR, op.verb === 'add' ? NLM_F_CREATE | NLM_F_EXCL : 0);
      const bytes = addressBytes(op.address);
      w.u8(op.address.family === 4 ? AF_INET : AF_INET6);
      w.u8(op.prefixBits);
      w.u8(op.isNoDad ? IFA_F_NODAD : 0);
      w.u8(op.scope !== undefined ? RT_SCOPE[op.scope] : 0);
      w.u32(ifindexOf(ctx, op.dev));
      w.attrBytes(IFA_LOCAL, bytes);
      w.attrBytes(IFA_ADDRESS, bytes);
      break;
    }
    case 'route': {
      // replace: add's defaults, but an existing route of the same key is replaced.
      const isAdd = op.verb !== 'del';
      header(isAdd ? RTM_NEWROUTE : RTM_DELROUTE, op.verb === 'add' ? NLM_F_CREATE | NLM_F_EXCL : op.verb === 'replace' ? NLM_F_CREATE | NLM_F_REPLACE : 0);
      const table = op.table ?? RT_TABLE_MAIN;
      // iproute2: no scope given → link for a gatewayless unicast add, nowhere (a wildcard) for del.
      const scope = op.scope !== undefined ? RT_SCOPE[op.scope] : !isAdd ? RT_SCOPE_NOWHERE : op.via === undefined ? RT_SCOPE.link : RT_SCOPE.global;
      w.u8(op.family === 4 ? AF_INET : AF_INET6);
      w.u8(op.dstBits);
      w.u8(0); // src_len
      w.u8(0); // tos
      w.u8(table < 256 ? table : RT_TABLE_UNSPEC);
      w.u8(op.protocol ?? (isAdd ? RTPROT_BOOT : 0));
      w.u8(scope);
      w.u8(isAdd ? RTN_UNICAST : 0);
      w.u32(op.isOnlink ? RTNH_F_ONLINK : 0); // rtm_flags
      if (table >= 256) w.attrU32(RTA_TABLE, table);
      if (op.dst) w.attrBytes(RTA_DST, addressBytes(op.dst));
      if (op.metric !== undefined) w.attrU32(RTA_PRIORITY, op.metric);
      if (op.prefsrc) w.attrBytes(RTA_PREFSRC, addressBytes(op.prefsrc));
      if (op.via) w.attrBytes(RTA_GATEWAY, addressBytes(op.via));
      if (op.dev !== undefined) w.attrU32(RTA_OIF, ifindexOf(ctx, op.dev));
      break;
    }
    case 'rule': {
      // As iprule.c sends it: struct fib_rule_hdr, then the selectors given; a table past 255 in FRA_TABLE.
      header(op.verb === 'add' ? RTM_NEWRULE : RTM_DELRULE, op.verb === 'add' ? NLM_F_CREATE | NLM_F_EXCL : 0);
      w.u8(op.family === 4 ? AF_INET : AF_INET6);
      w.u8(op.dstBits);
      w.u8(0); // src_len
      w.u8(0); // tos
      w.u8(op.table < 256 ? op.table : RT_TABLE_UNSPEC);
      w.u8(0); // res1
      w.u8(0); // res2
      w.u8(FR_ACT_TO_TBL);
      w.u32(0); // flags
      w.attrU32(FRA_PRIORITY, op.priority);
      if (op.table >= 256) w.attrU32(FRA_TABLE, op.table);
      if (op.dst) w.attrBytes(FRA_DST, addressBytes(op.dst));
      if (op.iif !== undefined) w.attrString(FRA_IIFNAME, op.iif);
      if (op.fwmark !== undefined) w.attrU32(FRA_FWMARK, op.fwmark);
      if (op.fwmask !== undefined) w.attrU32(FRA_FWMASK, op.fwmask);
      break;
    }
  }
  w.patch32(0, w.length); // nlmsg_len
  return w.result();
}

type FouOp = Extract<RtOp, { kind: 'link-add-fou' }>;

/** The IFLA_INFO_DATA of `type ipip … encap fou`, attribute for attribute as link_iptnl.c sends it (proto 0 = any, pmtudisc on). */
function ipipData(w: Writer, op: FouOp): void {
  w.attrU8(IFLA_IPTUN_PROTO, 0);
  w.attrU32(IFLA_IPTUN_LINK, 0);
  w.attrBytes(IFLA_IPTUN_LOCAL, addressBytes(op.local));
  w.attrBytes(IFLA_IPTUN_REMOTE, addressBytes(op.remote));
  w.attrU8(IFLA_IPTUN_TTL, op.ttl);
  w.attrU8(IFLA_IPTUN_TOS, 0);
  w.attrU8(IFLA_IPTUN_PMTUDISC, 1);
  w.attrU32(IFLA_IPTUN_FWMARK, 0);
  fouEncap(w, op, 0);
}

/**
 * The IFLA_INFO_DATA of `type ip6tnl mode ip6ip6 encaplimit none … encap fou`, as link_ip6tnl.c
 * sends it: proto IPv6, the default encapsulation limit with the flag that ignores it, and
 * iproute2's default UDP checksum over IPv6.
 */
function ip6tnlData(w: Writer, op: FouOp): void {
  w.attrU8(IFLA_IPTUN_PROTO, IPPROTO_IPV6);
  w.attrBytes(IFLA_IPTUN_LOCAL, addressBytes(op.local));
  w.attrBytes(IFLA_IPTUN_REMOTE, addressBytes(op.remote));
  w.attrU8(IFLA_IPTUN_TTL, op.ttl);
  w.attrU8(IFLA_IPTUN_ENCAP_LIMIT, IPV6_DEFAULT_TNL_ENCAP_LIMIT);
  w.attrU32(IFLA_IPTUN_FLOWINFO, 0);
  w.attrU32(IFLA_IPTUN_FLAGS, IP6_TNL_F_IGN_ENCAP_LIMIT);
  w.attrU32(IFLA_IPTUN_LINK, 0);
  w.attrU32(IFLA_IPTUN_FWMARK, 0);
  fouEncap(w, op, TUNNEL_ENCAP_FLAG_CSUM6);
}

/** The encapsulation attributes: FoU, its flags, the ports in network byte order. */
function fouEncap(w: Writer, op: FouOp, flags: number): void {
  w.attrU16(IFLA_IPTUN_ENCAP_TYPE, TUNNEL_ENCAP_FOU);
  w.attrU16(IFLA_IPTUN_ENCAP_FLAGS, flags);
  w.attr(IFLA_IPTUN_ENCAP_SPORT, () => w.be16(op.encapSport));
  w.attr(IFLA_IPTUN_ENCAP_DPORT, () => w.be16(op.encapDport));
}

// ------------------------------------------------------------------ replies

/** One decoded NLMSG_ERROR reply: `errno` 0 is an ACK. */
export interface Ack {
  seq: number;
  /** Positive errno (0 = success). */
  errno: number;
  /** The kernel's extended-ACK message (NLMSGERR_ATTR_MSG), e.g. "ipv4: Address already assigned". */
  message?: string;
}

const NLM_F_CAPPED = 0x100;
const NLM_F_ACK_TLVS = 0x200;
const NLMSGERR_ATTR_MSG = 1;

/**
 * Decodes the NLMSG_ERROR messages in one datagram read from a netlink socket; other message
 * types (none are expected for requests that only ask for an ACK) are skipped.
 * @throws RangeError on a truncated message
 */
export function parseAcks(buf: Uint8Array, length = buf.length): Ack[] {
  const view = new DataView(buf.buffer, buf.byteOffset, length);
  const acks: Ack[] = [];
  for (let off = 0; off + NLMSG_HDRLEN <= length;) {
    const len = view.getUint32(off, true);
    if (len < NLMSG_HDRLEN || off + len > length) throw new RangeError(`truncated netlink message at ${off}`);
    if (view.getUint16(off + 4, true) === NLMSG_ERROR) {
      const flags = view.getUint16(off + 6, true);
      const ack: Ack = { seq: view.getUint32(off + 8, true), errno: Math.abs(view.getInt32(off + NLMSG_HDRLEN, true)) };
      if (flags & NLM_F_ACK_TLVS) {
        // struct nlmsgerr: error, then the request's header (and its payload unless capped), then TLVs.
        const request = off + NLMSG_HDRLEN + 4;
        let at = request + (flags & NLM_F_CAPPED ? NLMSG_HDRLEN : view.getUint32(request, true));
        while (at + 4 <= off + len) {
          const alen = view.getUint16(at, true);
          if (alen < 4 || at + alen > off + len) break;
          if (view.getUint16(at + 2, true) === NLMSGERR_ATTR_MSG) {
            ack.message = new TextDecoder().decode(buf.subarray(at + 4, at + alen)).replace(/\0+$/, '');
          }
          at += (alen + 3) & ~3;
        }
      }
      acks.push(ack);
    }
    off += (len + 3) & ~3;
  }
  return acks;
}

/** errno → [name, strerror(3) text], for the errnos rtnetlink answers coil's requests with. */
const STRERROR: Record<number, [string, string]> = {
  1: ['EPERM', 'Operation not permitted'],
  2: ['ENOENT', 'No such file or directory'],
  3: ['ESRCH', 'No such process'],
  4: ['EINTR', 'Interrupted system call'],
  9: ['EBADF', 'Bad file descriptor'],
  11: ['EAGAIN', 'Resource temporarily unavailable'],
  12: ['ENOMEM', 'Cannot allocate memory'],
  13: ['EACCES', 'Permission denied'],
  16: ['EBUSY', 'Device or resource busy'],
  17: ['EEXIST', 'File exists'],
  19: ['ENODEV', 'No such device'],
  22: ['EINVAL', 'Invalid argument'],
  34: ['ERANGE', 'Numerical result out of range'],
  95: ['EOPNOTSUPP', 'Operation not supported'],
  99: ['EADDRNOTAVAIL', 'Cannot assign requested address'],
  101: ['ENETUNREACH', 'Network is unreachable'],
  105: ['ENOBUFS', 'No buffer space available'],
};

/** strerror(3) text of `errno` (`errno N` for ones coil never meets). */
export function strerror(errno: number): string {
  return STRERROR[errno]?.[1] ?? `errno ${errno}`;
}

/**
 * The message `ip` prints for a kernel refusal: the extended-ACK text when the kernel gave one
 * (`Error: ipv4: Address already assigned.`), else `RTNETLINK answers: <strerror>`, which
 * NetlinkError's classifier understands. @see iproute2 lib/libnetlink.c nl_dump_ext_ack()
 */
export function kernelMessage(errno: number, extAck?: string): string {
  return extAck ? `Error: ${extAck}.` : `RTNETLINK answers: ${strerror(errno)}`;
}
