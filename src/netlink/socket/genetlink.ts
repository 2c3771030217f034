/**
 * Generic netlink messages for the FoU receive ports (the `fou-port` requests and the `fou-ports`
 * read of rt-request.ts): the controller's CTRL_CMD_GETFAMILY that resolves the family `fou` to
 * its message type, and FOU_CMD_ADD / FOU_CMD_DEL / FOU_CMD_GET as iproute2's ip/ipfou.c sends
 * them (port in network byte order, FOU_ATTR_TYPE direct, FOU_ATTR_AF, FOU_ATTR_IPPROTO). Pure:
 * it builds message bytes and decodes answers; rtnetlink-socket.ts does the I/O on a
 * NETLINK_GENERIC socket of the target netns.
 *
 * A family's message type is allocated when its module registers it, the same in every netns, but
 * it changes when `fou` is unloaded and loaded again: the socket resolves it per batch, one round
 * trip of microseconds.
 * @see https://docs.kernel.org/userspace-api/netlink/intro.html#generic-netlink,
 *   include/uapi/linux/{genetlink,fou}.h, Documentation/netlink/specs/fou.yaml
 */
import type { FouPortEntry, RtRequest } from '../rt-request.js';
import {
  NLM_F_REQUEST, NLM_F_ACK, NLM_F_DUMP, NLMSG_HDRLEN, GENL_HDRLEN, CTRL_CMD_GETFAMILY, CTRL_ATTR_FAMILY_ID,
  CTRL_ATTR_FAMILY_NAME, FOU_GENL_VERSION, FOU_CMD_ADD, FOU_CMD_DEL, FOU_CMD_GET, FOU_ATTR_PORT, FOU_ATTR_AF,
  FOU_ATTR_IPPROTO, FOU_ATTR_TYPE, FOU_ENCAP_DIRECT, FOU_ENCAP_GUE, AF_INET, AF_INET6,
} from './rtnetlink-uapi.js';

/** A `fou-port` request. */
export type FouPortRequest = Extract<RtRequest, { kind: 'fou-port' }>;

/** An attribute (struct nlattr + payload, padded to 4 bytes). */
function attr(type: number, payload: Uint8Array): Uint8Array {
  const len = 4 + payload.length;
  const b = new Uint8Array((len + 3) & ~3);
  const v = new DataView(b.buffer);
  v.setUint16(0, len, true);
  v.setUint16(2, type, true);
  b.set(payload, 4);
  return b;
}

/** One generic netlink message: nlmsghdr, genlmsghdr (cmd, version), attributes. */
function genlMessage(type: number, flags: number, seq: number, cmd: number, version: number, attrs: readonly Uint8Array[]): Uint8Array {
  const size = NLMSG_HDRLEN + GENL_HDRLEN + attrs.reduce((n, a) => n + a.length, 0);
  const b = new Uint8Array(size);
  const v = new DataView(b.buffer);
  v.setUint32(0, size, true);
  v.setUint16(4, type, true);
  v.setUint16(6, flags, true);
  v.setUint32(8, seq, true);
  b[NLMSG_HDRLEN] = cmd;
  b[NLMSG_HDRLEN + 1] = version;
  let at = NLMSG_HDRLEN + GENL_HDRLEN;
  for (const a of attrs) {
    b.set(a, at);
    at += a.length;
  }
  return b;
}

/**
 * The body (genlmsghdr + attributes, no nlmsghdr) of CTRL_CMD_GETFAMILY for `name`, to send to
 * GENL_ID_CTRL: what libgenl's genl_resolve_family asks.
 */
export function getFamilyBody(name: string): Uint8Array {
  const m = genlMessage(0, 0, 0, CTRL_CMD_GETFAMILY, 1, [attr(CTRL_ATTR_FAMILY_NAME, new TextEncoder().encode(`${name}\0`))]);
  return m.subarray(NLMSG_HDRLEN);
}

/**
 * The family id (message type) in a CTRL_CMD_GETFAMILY answer's payload (after nlmsghdr).
 * @returns undefined when the answer holds none
 */
export function parseFamilyId(payload: Uint8Array): number | undefined {
  const v = new DataView(payload.buffer, payload.byteOffset, payload.length);
  for (let off = GENL_HDRLEN; off + 4 <= payload.length;) {
    const len = v.getUint16(off, true);
    if (len < 4 || off + len > payload.length) break;
    if ((v.getUint16(off + 2, true) & 0x3fff) === CTRL_ATTR_FAMILY_ID && len >= 6) return v.getUint16(off + 4, true);
    off += (len + 3) & ~3;
  }
  return undefined;
}

function u8(v: number): Uint8Array {
  return Uint8Array.of(v);
}

/** A port as FOU_ATTR_PORT carries it: u16 in network byte order. */
function be16(v: number): Uint8Array {
  return Uint8Array.of((v >> 8) & 0xff, v & 0xff);
}

/**
 * Builds FOU_CMD_ADD / FOU_CMD_DEL for `r`, addressed to the family's message type `familyId`,
 * asking for an ACK; attributes in ipfou.c's order (PORT, TYPE, AF, IPPROTO).
 * @throws RangeError when the port is not 1–65535 or ipproto not 1–255 (iproute2 refuses both)
 */
export function buildFouPortRequest(r: FouPortRequest, seq: number, familyId: number): Uint8Array {
  if (!Number.isInteger(r.port) || r.port < 1 || r.port > 0xffff) throw new RangeError(`invalid port ${r.port}`);
  if (!Number.isInteger(r.ipproto) || r.ipproto < 1 || r.ipproto > 0xff) throw new RangeError(`invalid ipproto ${r.ipproto}`);
  return genlMessage(familyId, NLM_F_REQUEST | NLM_F_ACK, seq, r.verb === 'add' ? FOU_CMD_ADD : FOU_CMD_DEL, FOU_GENL_VERSION, [
    attr(FOU_ATTR_PORT, be16(r.port)), attr(FOU_ATTR_TYPE, u8(FOU_ENCAP_DIRECT)),
    attr(FOU_ATTR_AF, u8(r.family === 4 ? AF_INET : AF_INET6)), attr(FOU_ATTR_IPPROTO, u8(r.ipproto)),
  ]);
}

/** The body (genlmsghdr, no attributes) of the FOU_CMD_GET dump: every port of both families. */
export function fouDumpBody(): Uint8Array {
  return genlMessage(0, NLM_F_REQUEST | NLM_F_DUMP, 0, FOU_CMD_GET, FOU_GENL_VERSION, []).subarray(NLMSG_HDRLEN);
}

/** Decodes one FOU_CMD_GET answer's payload (after nlmsghdr) as `ip -json fou show` prints it. */
export function decodeFouPort(payload: Uint8Array): FouPortEntry {
  const v = new DataView(payload.buffer, payload.byteOffset, payload.length);
  let port = 0;
  let type: number | undefined;
  let ipproto: number | undefined;
  let af = AF_INET;
  for (let off = GENL_HDRLEN; off + 4 <= payload.length;) {
    const len = v.getUint16(off, true);
    if (len < 4 || off + len > payload.length) break;
    const t = v.getUint16(off + 2, true) & 0x3fff;
    if (t === FOU_ATTR_PORT && len >= 6) port = v.getUint16(off + 4, false);
    else if (t === FOU_ATTR_TYPE && len >= 5) type = v.getUint8(off + 4);
    else if (t === FOU_ATTR_IPPROTO && len >= 5) ipproto = v.getUint8(off + 4);
    else if (t === FOU_ATTR_AF && len >= 5) af = v.getUint8(off + 4);
    off += (len + 3) & ~3;
  }
  const family = af === AF_INET6 ? 'inet6' : 'inet';
  // In ip's key order: port, ipproto or gue, family.
  if (type === FOU_ENCAP_GUE) return { port, gue: null, family };
  return ipproto !== undefined ? { port, ipproto, family } : { port, family };
}
