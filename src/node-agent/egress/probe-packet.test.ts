import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { innerProbePacket, parseProbePayload, probePayload, PROBE_PAYLOAD_BYTES } from './probe-packet.js';

/** RFC 1071 check: the one's-complement sum over a region including its checksum is 0xffff. */
function folds(bufs: Buffer[]): number {
  let s = 0;
  for (const b of bufs) for (let i = 0; i < b.length; i += 2) s += (b[i]! << 8) + (b[i + 1] ?? 0);
  while (s > 0xffff) s = (s & 0xffff) + (s >>> 16);
  return s;
}

describe('probe packets', () => {
  const nonce = Buffer.from('0123456789abcdef', 'hex');

  test('the payload round-trips; another nonce, size or magic is not a probe', () => {
    const p = probePayload({ nonce, target: 7, seq: 4_000_000_000 });
    assert.equal(p.length, PROBE_PAYLOAD_BYTES);
    assert.deepEqual({ ...parseProbePayload(p, nonce), nonce: undefined }, { nonce: undefined, target: 7, seq: 4_000_000_000 });
    assert.equal(parseProbePayload(p, Buffer.alloc(8)), undefined);
    assert.equal(parseProbePayload(p.subarray(1), nonce), undefined);
    assert.equal(parseProbePayload(Buffer.concat([Buffer.from('X'), p.subarray(1)]), nonce), undefined);
  });

  test('IPv4: header 0x45, UDP, TTL 64, src = dst = the node address, valid header checksum, UDP to the same port', () => {
    const payload = probePayload({ nonce, target: 1, seq: 1 });
    const pkt = innerProbePacket('10.1.2.3', 40000, payload);
    assert.equal(pkt.length, 20 + 8 + 24);
    assert.equal(pkt[0], 0x45);
    assert.equal(pkt.readUInt16BE(2), pkt.length);
    assert.deepEqual([pkt[8], pkt[9]], [64, 17]);
    assert.deepEqual([...pkt.subarray(12, 16)], [10, 1, 2, 3]);
    assert.deepEqual([...pkt.subarray(16, 20)], [10, 1, 2, 3]);
    assert.equal(folds([pkt.subarray(0, 20)]), 0xffff);
    assert.deepEqual([pkt.readUInt16BE(20), pkt.readUInt16BE(22), pkt.readUInt16BE(24)], [40000, 40000, 32]);
    assert.ok(pkt.subarray(28).equals(payload));
  });

  test('IPv6: version 6, next header UDP, hop limit 64, and a UDP checksum valid over the pseudo-header', () => {
    const payload = probePayload({ nonce, target: 2, seq: 9 });
    const pkt = innerProbePacket('fd00::a:1', 40001, payload);
    assert.equal(pkt.length, 40 + 8 + 24);
    assert.equal(pkt[0]! >> 4, 6);
    assert.deepEqual([pkt.readUInt16BE(4), pkt[6], pkt[7]], [32, 17, 64]);
    const pseudo = Buffer.alloc(40);
    pkt.copy(pseudo, 0, 8, 40);
    pseudo.writeUInt32BE(32, 32);
    pseudo[39] = 17;
    assert.equal(folds([pseudo, pkt.subarray(40)]), 0xffff);
    assert.notEqual(pkt.readUInt16BE(46), 0);
  });

  test('a non-address is refused', () => {
    assert.throws(() => innerProbePacket('nat-pod', 1, Buffer.alloc(0)), TypeError);
  });
});
