import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { concatBytes, latin1Bytes, latin1Text, uint32BE, utf8Bytes, utf8Text } from './bytes.js';

/** A Buffer's bytes as a plain Uint8Array, for strict comparison with ours. */
const plain = (b: Buffer): Uint8Array => new Uint8Array(b);

describe('bytes', () => {
  const samples = ['', 'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', '/run/coild.sock', 'héllo ÿ', '日本語 🙂', '\u0000\u0080', '\ufeff{"a":1}'];

  it('give what Buffer.from gives, for ASCII, latin1 and multi-byte characters', () => {
    for (const s of samples) {
      assert.deepEqual(utf8Bytes(s), plain(Buffer.from(s, 'utf8')), JSON.stringify(s));
      assert.deepEqual(latin1Bytes(s), plain(Buffer.from(s, 'latin1')), JSON.stringify(s));
    }
  });

  it('decode as Buffer#toString does, keeping a BOM and replacing invalid UTF-8', () => {
    const inputs = [...samples.map((s) => Buffer.from(s, 'utf8')), Buffer.from([0xff, 0xfe, 0x41]), Buffer.from([0xe6, 0x97]), Buffer.from([0xc3, 0xa9, 0x80])];
    for (const b of inputs) {
      assert.equal(utf8Text(new Uint8Array(b)), b.toString('utf8'), b.toString('hex'));
      assert.equal(latin1Text(new Uint8Array(b)), b.toString('latin1'), b.toString('hex'));
    }
  });

  it('concatenate and read big-endian integers as Buffer does', () => {
    const parts = [Buffer.from([1, 2]), Buffer.alloc(0), Buffer.from([3]), Buffer.from([0xff, 0xff, 0xff, 0xff, 0x80])];
    assert.deepEqual(concatBytes(parts), plain(Buffer.concat(parts)));
    assert.deepEqual(concatBytes([]), new Uint8Array(0));
    const b = Buffer.from([0x80, 0, 0, 1, 0xff, 0xff, 0xff, 0xff]);
    for (let off = 0; off <= 4; off++) assert.equal(uint32BE(b, off), b.readUInt32BE(off));
  });
});
