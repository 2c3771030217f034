/**
 * The probe coild sends each NAT pod through the real FoU path: a UDP datagram to the NAT pod's
 * FoU port whose payload is a whole inner IP packet — exactly what a client pod's peer link sends
 * (FoU "direct" encapsulation, no GUE header). The inner packet is UDP from this node's address
 * and port back to the same address and port. The NAT pod's kernel decapsulates it, forwards it
 * out of its `eth0` and masquerades it, as it does every client packet, so the answer arrives on
 * coild's socket from the NAT pod's address. It needs nothing of the NAT pod that Coil's
 * coil-egress does not do (FoU receive port, forwarding, MASQUERADE of what is not its own),
 * and it proves the whole client path — decapsulation, forwarding and NAT — not only that a
 * kernel is alive.
 *
 * Why not GLB's ICMP echo to the NAT pod's own address: the answer would be an ICMP echo reply,
 * and Node has no raw or ICMP sockets; the reflected UDP datagram reaches an ordinary socket.
 * Pure: no I/O.
 * @see docs/egress-failover.md#the-probe
 */
import { addressBytes } from '../../ipam/ip-address.js';
import { addressOf } from '../../netlink/cidr.js';

/** The first 8 bytes of every probe payload. */
export const PROBE_MAGIC = Buffer.from('COILPRB1', 'latin1');
/** Payload bytes: magic 8, prober nonce 8, target id 4, sequence 4. */
export const PROBE_PAYLOAD_BYTES = 24;
/** TTL of the inner packet (the NAT pod's forwarding takes one). */
const INNER_TTL = 64;

/** What a probe payload carries. */
export interface ProbeId {
  /** 8 random bytes per prober: answers to another coild's (or an earlier run's) probes are ignored. */
  nonce: Buffer;
  /** Which NAT pod was probed (the prober's number for it). */
  target: number;
  /** Probe number, per target. */
  seq: number;
}

/** The payload of {@link ProbeId}. */
export function probePayload(id: ProbeId): Buffer {
  const b = Buffer.alloc(PROBE_PAYLOAD_BYTES);
  PROBE_MAGIC.copy(b, 0);
  id.nonce.copy(b, 8, 0, 8);
  b.writeUInt32BE(id.target >>> 0, 16);
  b.writeUInt32BE(id.seq >>> 0, 20);
  return b;
}

/** Reads a payload back; undefined for anything else (wrong size, magic or nonce). */
export function parseProbePayload(b: Buffer, nonce: Buffer): ProbeId | undefined {
  if (b.length !== PROBE_PAYLOAD_BYTES || !b.subarray(0, 8).equals(PROBE_MAGIC) || !b.subarray(8, 16).equals(nonce)) return undefined;
  return { nonce: b.subarray(8, 16), target: b.readUInt32BE(16), seq: b.readUInt32BE(20) };
}

/** One's-complement sum of 16-bit words (RFC 1071), folded, not inverted. */
function sum16(bufs: readonly Buffer[]): number {
  let s = 0;
  for (const b of bufs) {
    for (let i = 0; i + 1 < b.length; i += 2) s += b.readUInt16BE(i);
    if (b.length % 2 === 1) s += b[b.length - 1]! << 8;
  }
  while (s > 0xffff) s = (s & 0xffff) + (s >>> 16);
  return s;
}

/**
 * The inner packet: IPv4 (no options, checksum set, UDP checksum 0 as RFC 768 allows) or IPv6
 * (UDP checksum over the pseudo-header, mandatory in IPv6, RFC 8200 §8.1) from `address`:`port`
 * to the same `address`:`port`, carrying `payload`.
 * @throws TypeError when `address` is not an address
 */
export function innerProbePacket(address: string, port: number, payload: Buffer): Buffer {
  const a = addressOf(address);
  const ab = Buffer.from(addressBytes(a));
  const udp = Buffer.alloc(8 + payload.length);
  udp.writeUInt16BE(port, 0);
  udp.writeUInt16BE(port, 2);
  udp.writeUInt16BE(udp.length, 4);
  payload.copy(udp, 8);
  if (a.family === 4) {
    const ip = Buffer.alloc(20);
    ip[0] = 0x45;
    ip.writeUInt16BE(20 + udp.length, 2);
    ip[8] = INNER_TTL;
    ip[9] = 17;
    ab.copy(ip, 12);
    ab.copy(ip, 16);
    ip.writeUInt16BE(~sum16([ip]) & 0xffff, 10);
    return Buffer.concat([ip, udp]);
  }
  const pseudo = Buffer.alloc(40);
  ab.copy(pseudo, 0);
  ab.copy(pseudo, 16);
  pseudo.writeUInt32BE(udp.length, 32);
  pseudo[39] = 17;
  const ck = ~sum16([pseudo, udp]) & 0xffff;
  udp.writeUInt16BE(ck === 0 ? 0xffff : ck, 6);
  const ip = Buffer.alloc(40);
  ip.writeUInt32BE(0x60000000, 0);
  ip.writeUInt16BE(udp.length, 4);
  ip[6] = 17;
  ip[7] = INNER_TTL;
  ab.copy(ip, 8);
  ab.copy(ip, 24);
  return Buffer.concat([ip, udp]);
}
