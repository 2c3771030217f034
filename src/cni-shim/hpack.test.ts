import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { buildHuffmanTable, encodeHeaders, HpackDecoder } from './hpack.js';

const hex = (s: string): Buffer => Buffer.from(s.replace(/\s+/g, ''), 'hex');

describe('HpackDecoder', () => {
  // RFC 7541 C.4: requests with Huffman coding, decoded on one connection.
  it('decodes RFC 7541 C.4 (Huffman, dynamic table across blocks)', () => {
    const d = new HpackDecoder();
    assert.deepEqual(d.decode(hex('8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff')), [
      [':method', 'GET'],
      [':scheme', 'http'],
      [':path', '/'],
      [':authority', 'www.example.com'],
    ]);
    assert.deepEqual(d.decode(hex('8286 84be 5886 a8eb 1064 9cbf')), [
      [':method', 'GET'],
      [':scheme', 'http'],
      [':path', '/'],
      [':authority', 'www.example.com'],
      ['cache-control', 'no-cache'],
    ]);
    assert.deepEqual(d.decode(hex('8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf')), [
      [':method', 'GET'],
      [':scheme', 'https'],
      [':path', '/index.html'],
      [':authority', 'www.example.com'],
      ['custom-key', 'custom-value'],
    ]);
  });

  // RFC 7541 C.6.1: responses with Huffman coding and a small table; first block only.
  it('decodes RFC 7541 C.6.1 (Huffman response headers)', () => {
    const block = hex(
      '4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6 2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3',
    );
    assert.deepEqual(new HpackDecoder().decode(block), [
      [':status', '302'],
      ['cache-control', 'private'],
      ['date', 'Mon, 21 Oct 2013 20:13:21 GMT'],
      ['location', 'https://www.example.com'],
    ]);
  });

  it('rejects an index beyond both tables', () => {
    assert.throws(() => new HpackDecoder().decode(hex('ff00')), /bad index/);
  });

  it('reads back what encodeHeaders wrote, including values over 126 bytes', () => {
    const fields: [string, string][] = [
      [':path', '/pkg.cnirpc.CNI/Add'],
      ['x-long', 'v'.repeat(300)],
    ];
    assert.deepEqual(new HpackDecoder().decode(encodeHeaders(fields)), fields);
  });
});

describe('buildHuffmanTable', () => {
  /** The code of `symbol` as the table decodes it: [code, length in bits]. */
  function codeOf(symbol: number): [number, number] {
    const t = buildHuffmanTable();
    const i = t.symbols.indexOf(symbol);
    for (let len = 1; len <= 30; len++) {
      const first = t.firstIndex[len];
      if (first !== undefined && i >= first && i < first + (t.count[len] as number)) return [(t.firstCode[len] as number) + i - first, len];
    }
    throw new Error(`symbol ${symbol} not in the table`);
  }

  it('gives the codes of RFC 7541 Appendix B', () => {
    assert.deepEqual(codeOf(0x30), [0x0, 5]); // '0'
    assert.deepEqual(codeOf(0x61), [0x3, 5]); // 'a'
    assert.deepEqual(codeOf(0x20), [0x14, 6]); // ' '
    assert.deepEqual(codeOf(0x3a), [0x5c, 7]); // ':'
    assert.deepEqual(codeOf(0x00), [0x1ff8, 13]);
    assert.deepEqual(codeOf(0x0a), [0x3ffffffc, 30]); // LF
    assert.deepEqual(codeOf(0xff), [0x3ffffee, 26]);
    assert.deepEqual(codeOf(256), [0x3fffffff, 30]); // EOS
  });

  it('holds every symbol once', () => {
    assert.deepEqual([...buildHuffmanTable().symbols].sort((a, b) => a - b), Array.from({ length: 257 }, (_, i) => i));
  });
});
