import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { buildHuffmanTable, encodeHeaders, FAST_SYMBOLS, HpackDecoder, HUFFMAN } from './hpack.js';

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

  it('leaves out the fields `keep` refuses but still enters them in the dynamic table', () => {
    const d = new HpackDecoder();
    // C.4.1 inserts `:authority: www.example.com` (Huffman); C.4.2 refers to it by index 62.
    assert.deepEqual(d.decode(hex('8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff'), (n) => n !== ':authority'), [
      [':method', 'GET'],
      [':scheme', 'http'],
      [':path', '/'],
    ]);
    assert.deepEqual(d.decode(hex('8286 84be 5886 a8eb 1064 9cbf'), (n) => n === ':authority' || n === 'cache-control'), [
      [':authority', 'www.example.com'],
      ['cache-control', 'no-cache'],
    ]);
  });

  it('with a zero-size table, skips unwanted values undecoded and keeps nothing', () => {
    // 0x20: table size 0. Then `x-a: <bad Huffman>` and `x-b: <bad Huffman>` with incremental
    // indexing, new names; 0xff 0xff is not valid padding.
    const block = hex('20 4003 782d61 82ffff 4003 782d62 82ffff');
    assert.deepEqual(new HpackDecoder().decode(block, (n) => n === 'x-c'), []);
    assert.throws(() => new HpackDecoder().decode(block, (n) => n === 'x-b'), /Huffman/);
    const d = new HpackDecoder();
    d.decode(block, () => false);
    assert.throws(() => d.decode(hex('be')), /bad index 62/); // nothing was kept in the table
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

  it('is HUFFMAN, the tables the decoder uses as written out', () => {
    const dense = (a: number[]): number[] => Array.from({ length: 31 }, (_, i) => a[i] ?? 0);
    const t = buildHuffmanTable();
    assert.deepEqual(HUFFMAN, { firstCode: dense(t.firstCode), firstIndex: dense(t.firstIndex), count: dense(t.count), symbols: t.symbols });
  });

  it('holds every symbol once', () => {
    assert.deepEqual([...buildHuffmanTable().symbols].sort((a, b) => a - b), Array.from({ length: 257 }, (_, i) => i));
  });
});

describe('Huffman decoding', () => {
  const t = buildHuffmanTable();
  const codes = new Map<number, [number, number]>();
  for (let len = 1; len <= 30; len++) {
    for (let k = 0; k < (t.count[len] ?? 0); k++) codes.set(t.symbols[(t.firstIndex[len] as number) + k] as number, [(t.firstCode[len] as number) + k, len]);
  }

  /** RFC 7541 §5.2: codes MSB first, the last byte padded with the high bits of EOS (ones). */
  function huffmanEncode(bytes: readonly number[]): Buffer {
    const bits: number[] = [];
    for (const b of bytes) {
      const [code, len] = codes.get(b)!;
      for (let i = len - 1; i >= 0; i--) bits.push(Math.floor(code / 2 ** i) % 2);
    }
    while (bits.length % 8 !== 0) bits.push(1);
    return Buffer.from(Array.from({ length: bits.length / 8 }, (_, i) => bits.slice(8 * i, 8 * i + 8).reduce((a, x) => a * 2 + x, 0)));
  }

  /** The plain bit-by-bit canonical decoder the fast one replaced: the reference. */
  function referenceDecode(raw: Buffer): string {
    let out = '';
    let code = 0;
    let len = 0;
    for (const byte of raw) {
      for (let bit = 7; bit >= 0; bit--) {
        code = code * 2 + ((byte >> bit) & 1);
        len++;
        const first = t.firstCode[len];
        if (first !== undefined && code >= first && code - first < (t.count[len] as number)) {
          const sym = t.symbols[(t.firstIndex[len] as number) + code - first] as number;
          if (sym === 256) throw new Error('hpack: EOS in Huffman string');
          out += String.fromCharCode(sym);
          code = 0;
          len = 0;
        }
      }
    }
    if (len > 7 || code !== 2 ** len - 1) throw new Error('hpack: bad Huffman padding');
    return out;
  }

  /** Decodes `raw` as the Huffman value of a literal header field (without indexing). */
  function decodeValue(raw: Buffer): string {
    assert.ok(raw.length < 127);
    const [[, value]] = new HpackDecoder().decode(Buffer.concat([Buffer.from([0x00, 0x01, 0x78, 0x80 | raw.length]), raw])) as [[string, string]];
    return value;
  }

  const outcome = (f: () => string): string => {
    try {
      return `ok ${JSON.stringify(f())}`;
    } catch (err) {
      return `error ${(err as Error).message}`;
    }
  };

  it('FAST_SYMBOLS is the table the code lengths give', () => {
    const fast = Array.from({ length: 256 }, () => '~');
    for (const [sym, [code, len]] of codes) {
      if (len > 8) continue;
      for (let j = 0; j < 2 ** (8 - len); j++) fast[code * 2 ** (8 - len) + j] = String.fromCharCode(sym);
    }
    assert.equal(FAST_SYMBOLS, fast.join(''));
  });

  it('decodes every byte value, alone and in runs, as the reference does', () => {
    for (let b = 0; b < 256; b++) assert.equal(decodeValue(huffmanEncode([b])), String.fromCharCode(b), `byte ${b}`);
    let seed = 7;
    const rand = (n: number): number => ((seed = (seed * 1103515245 + 12345) % 2 ** 31), seed % n);
    for (let i = 0; i < 300; i++) {
      const bytes = Array.from({ length: rand(40) }, () => (rand(3) === 0 ? rand(256) : 32 + rand(95)));
      const raw = huffmanEncode(bytes);
      if (raw.length >= 127) continue;
      assert.equal(decodeValue(raw), String.fromCharCode(...bytes));
    }
  });

  it('accepts and refuses exactly what the reference does (padding, EOS, garbage)', () => {
    let seed = 11;
    const rand = (n: number): number => ((seed = (seed * 1103515245 + 12345) % 2 ** 31), seed % n);
    const cases = [[0xff], [0xff, 0xff], [0xff, 0xff, 0xff, 0xfc], [0x1f], [0x00, 0x7f], [0xfe], [0x07], []].map((b) => Buffer.from(b));
    for (let i = 0; i < 2000; i++) cases.push(Buffer.from(Array.from({ length: 1 + rand(6) }, () => (rand(2) ? 0xff : rand(256)))));
    for (const raw of cases) assert.equal(outcome(() => decodeValue(raw)), outcome(() => referenceDecode(raw)), raw.toString('hex'));
  });
});
