/**
 * The kernel ABI numbers of rtnetlink and of the generic netlink family `fou` that coil's
 * encoders (rtnetlink.ts, genetlink.ts: writes), decoder (rtnetlink-dump.ts, reads) and socket
 * (rtnetlink-socket.ts) share: message types and flags, attribute types and values, from
 * include/uapi/linux/{netlink,rtnetlink,if_link,if,veth,if_addr,fib_rules,if_tunnel,ip6_tunnel,
 * in,in6,genetlink,fou}.h and socket.h. One place, so a request and the reading of its answer cannot disagree
 * on a number.
 */
// netlink.h
export const NLM_F_REQUEST = 0x1;
export const NLM_F_MULTI = 0x2;
export const NLM_F_ACK = 0x4;
/** A dump whose table changed while it was read. */
export const NLM_F_DUMP_INTR = 0x10;
/** Replace an existing object (with NLM_F_CREATE: create or replace, `ip route replace`). */
export const NLM_F_REPLACE = 0x100;
export const NLM_F_EXCL = 0x200;
export const NLM_F_CREATE = 0x400;
/** nlmsghdr type of an error/ACK reply. */
export const NLMSG_ERROR = 2;
/** End of a multipart (dump) answer. */
export const NLMSG_DONE = 3;
/** Size of struct nlmsghdr, bytes. */
export const NLMSG_HDRLEN = 16;
export const NLM_F_DUMP = 0x300; // NLM_F_ROOT | NLM_F_MATCH
// rtnetlink.h
export const RTM_NEWLINK = 16;
export const RTM_DELLINK = 17;
export const RTM_NEWADDR = 20;
export const RTM_DELADDR = 21;
export const RTM_NEWROUTE = 24;
export const RTM_DELROUTE = 25;
export const RTA_DST = 1;
export const RTA_OIF = 4;
export const RTA_GATEWAY = 5;
export const RTA_TABLE = 15;
export const RT_TABLE_UNSPEC = 0;
export const RT_TABLE_MAIN = 254;
export const RTPROT_BOOT = 3;
export const RTN_UNICAST = 1;
export const RT_SCOPE_NOWHERE = 255;
export const RTM_GETLINK = 18;
export const RTM_GETADDR = 22;
export const RTM_GETROUTE = 26;
export const RTM_NEWRULE = 32;
export const RTM_DELRULE = 33;
export const RTM_GETRULE = 34;
export const RTEXT_FILTER_VF = 1 << 0;
export const RTEXT_FILTER_SKIP_STATS = 1 << 3;
export const RTA_PREFSRC = 7;
/** The route's metric (u32): `metric` / `priority` of `ip route`. */
export const RTA_PRIORITY = 6;
/** rtm_flags / rtnh_flags bits, in the order ip prints them (iproute.c print_rt_flags). */
export const RT_FLAG_NAMES: ReadonlyArray<readonly [number, string]> = [
  [0x1, 'dead'], [0x4, 'onlink'], [0x2, 'pervasive'], [0x8, 'offload'], [0x40, 'trap'], [0x100, 'notify'],
  [0x10, 'linkdown'], [0x20, 'unresolved'], [0x2000, 'rt_offload'], [0x4000, 'rt_trap'], [0x20000000, 'rt_offload_failed'],
];
/** RTNH_F_ONLINK: the gateway is on the link even if no prefix says so. */
export const RTNH_F_ONLINK = 0x4;
export const RTM_F_CLONED = 0x200;
export const RTM_F_LOOKUP_TABLE = 0x1000;
// socket.h
export const AF_UNSPEC = 0;
export const AF_INET = 2;
export const AF_INET6 = 10;
// if_link.h
export const IFLA_ADDRESS = 1;
export const IFLA_IFNAME = 3;
export const IFLA_MTU = 4;
export const IFLA_LINKINFO = 18;
export const IFLA_IFALIAS = 20;
export const IFLA_GROUP = 27;
export const IFLA_NET_NS_FD = 28;
export const IFLA_INFO_KIND = 1;
export const IFLA_INFO_DATA = 2;
export const IFLA_LINK = 5;
export const IFLA_OPERSTATE = 16;
export const IFLA_EXT_MASK = 29;
export const IFLA_LINK_NETNSID = 37;
// if.h
export const IFF_UP = 0x1;
export const IFNAMSIZ = 16;
// veth.h
export const VETH_INFO_PEER = 1;
// if_tunnel.h: the IFLA_INFO_DATA of ipip and ip6tnl links (one attribute set for both)
export const IFLA_IPTUN_LINK = 1;
export const IFLA_IPTUN_LOCAL = 2;
export const IFLA_IPTUN_REMOTE = 3;
export const IFLA_IPTUN_TTL = 4;
export const IFLA_IPTUN_TOS = 5;
export const IFLA_IPTUN_ENCAP_LIMIT = 6;
export const IFLA_IPTUN_FLOWINFO = 7;
export const IFLA_IPTUN_FLAGS = 8;
export const IFLA_IPTUN_PROTO = 9;
export const IFLA_IPTUN_PMTUDISC = 10;
export const IFLA_IPTUN_ENCAP_TYPE = 15;
export const IFLA_IPTUN_ENCAP_FLAGS = 16;
/** u16 in network byte order; 0 = chosen per flow by the kernel ("auto"). */
export const IFLA_IPTUN_ENCAP_SPORT = 17;
/** u16 in network byte order. */
export const IFLA_IPTUN_ENCAP_DPORT = 18;
export const IFLA_IPTUN_FWMARK = 20;
export const TUNNEL_ENCAP_FOU = 1;
/** UDP checksum over IPv6 outer headers: iproute2's default encap flag for ip6tnl. */
export const TUNNEL_ENCAP_FLAG_CSUM6 = 1 << 1;
// ip6_tunnel.h
/** `encaplimit none`: no tunnel encapsulation limit option (8 bytes) in the outer header. */
export const IP6_TNL_F_IGN_ENCAP_LIMIT = 0x1;
/** The encapsulation limit ip6tnl links get unless told (IPV6_DEFAULT_TNL_ENCAP_LIMIT). */
export const IPV6_DEFAULT_TNL_ENCAP_LIMIT = 4;
// in.h, in6.h
export const IPPROTO_IPV6 = 41;
// if_addr.h
export const IFA_ADDRESS = 1;
export const IFA_LOCAL = 2;
export const IFA_F_NODAD = 0x02;
export const IFA_FLAGS = 8;
export const IFA_F_TENTATIVE = 0x40;
// fib_rules.h
export const FRA_DST = 1;
export const FRA_SRC = 2;
export const FRA_IIFNAME = 3;
export const FRA_PRIORITY = 6;
export const FRA_FWMARK = 10;
export const FRA_TABLE = 15;
export const FRA_FWMASK = 16;
export const FR_ACT_TO_TBL = 1;
/** Zero-length flag attribute of an `external` (flow-based) ipip/ip6tnl link. */
export const IFLA_IPTUN_COLLECT_METADATA = 19;
// netlink.h: the generic netlink protocol (the socket of the `fou` family)
export const NETLINK_GENERIC = 16;
// genetlink.h: the controller family that resolves a family's name to its message type
export const GENL_ID_CTRL = 0x10;
/** Size of struct genlmsghdr (cmd, version, reserved), bytes. */
export const GENL_HDRLEN = 4;
export const CTRL_CMD_GETFAMILY = 3;
export const CTRL_ATTR_FAMILY_ID = 1;
export const CTRL_ATTR_FAMILY_NAME = 2;
// fou.h: the `fou` generic netlink family (FoU receive ports)
export const FOU_GENL_NAME = 'fou';
export const FOU_GENL_VERSION = 1;
export const FOU_CMD_ADD = 1;
export const FOU_CMD_DEL = 2;
export const FOU_CMD_GET = 3;
/** u16 in network byte order. */
export const FOU_ATTR_PORT = 1;
/** u8: AF_INET or AF_INET6. */
export const FOU_ATTR_AF = 2;
/** u8: the protocol of the decapsulated payload (4 = IPIP, 41 = IPv6). */
export const FOU_ATTR_IPPROTO = 3;
/** u8: FOU_ENCAP_DIRECT or FOU_ENCAP_GUE. */
export const FOU_ATTR_TYPE = 4;
export const FOU_ENCAP_DIRECT = 1;
export const FOU_ENCAP_GUE = 2;
