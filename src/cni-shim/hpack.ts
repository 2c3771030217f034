/**
 * HPACK (RFC 7541), the HTTP/2 header compression: a full decoder (static and dynamic table,
 * Huffman strings) for what coild's grpc-js/nghttp2 server sends, and the simplest valid
 * encoder (literals without indexing) for our one request. It exists because importing
 * `node:http2` alone costs the Bun-compiled shim ≈ 17 ms per pod
 * (docs/performance.md#the-cni-executables-start).
 *
 * @see https://www.rfc-editor.org/rfc/rfc7541
 */

import { concatBytes, latin1Bytes, latin1Text } from './bytes.js';

/** A header field as decoded: name and value as latin1 strings (HPACK is octet-based). */
export type HeaderField = [name: string, value: string];

/** RFC 7541 Appendix A, entries 1–61, as [name, value]. A literal: no work at start. */
const STATIC_TABLE: readonly HeaderField[] = [
  [':authority', ''], [':method', 'GET'], [':method', 'POST'], [':path', '/'], [':path', '/index.html'],
  [':scheme', 'http'], [':scheme', 'https'], [':status', '200'], [':status', '204'], [':status', '206'],
  [':status', '304'], [':status', '400'], [':status', '404'], [':status', '500'], ['accept-charset', ''],
  ['accept-encoding', 'gzip, deflate'], ['accept-language', ''], ['accept-ranges', ''], ['accept', ''],
  ['access-control-allow-origin', ''], ['age', ''], ['allow', ''], ['authorization', ''], ['cache-control', ''],
  ['content-disposition', ''], ['content-encoding', ''], ['content-language', ''], ['content-length', ''],
  ['content-location', ''], ['content-range', ''], ['content-type', ''], ['cookie', ''], ['date', ''], ['etag', ''],
  ['expect', ''], ['expires', ''], ['from', ''], ['host', ''], ['if-match', ''], ['if-modified-since', ''],
  ['if-none-match', ''], ['if-range', ''], ['if-unmodified-since', ''], ['last-modified', ''], ['link', ''],
  ['location', ''], ['max-forwards', ''], ['proxy-authenticate', ''], ['proxy-authorization', ''], ['range', ''],
  ['referer', ''], ['refresh', ''], ['retry-after', ''], ['server', ''], ['set-cookie', ''],
  ['strict-transport-security', ''], ['transfer-encoding', ''], ['user-agent', ''], ['vary', ''], ['via', ''],
  ['www-authenticate', ''],
];

/**
 * Huffman code lengths of symbols 0–255 (RFC 7541 Appendix B), one letter each: 'A' = 5 bits.
 * The code is canonical (codes ordered by length, then symbol), so lengths define it fully;
 * EOS (256) is the one 30-bit code after all others.
 */
const HUFFMAN_LENGTHS =
  'ISXXXXXXXTZXXZXXXXXXXXZXXXXXXXXXBFFHIBDGFFDGDBBBAAABBBBBBBCDKBHFIBCCCCCCCCCCCCCCCCCCCCCCDCDIOIJBKABABABBBACCBBBABCBAABCCCCCKGJIXPRPPRRRSRSSSSSTSTTRSTSSSSQRSRSSTRQPRRSSQSRRTQRSSQQRQSRSSPRRRSRRSVVPORSRUVVVWWVTUOQVWWVWTQQVVXWWWPTPQRQQSRRUUTTVSVWVVWWWWWXWWWWWV';

/**
 * For each value of the next 8 bits of a Huffman string, the symbol whose code (5–8 bits long)
 * starts them, or `~` (a 13-bit code, so never one of these) when the code is longer. Derived
 * from {@link HUFFMAN_LENGTHS}; hpack.test.ts derives it again and compares.
 */
export const FAST_SYMBOLS =
  '000000001111111122222222aaaaaaaacccccccceeeeeeeeiiiiiiiioooooooosssssssstttttttt    %%%%----....////3333444455556666' +
  '777788889999====AAAA____bbbbddddffffgggghhhhllllmmmmnnnnpppprrrruuuu::BBCCDDEEFFGGHHIIJJKKLLMMNNOOPPQQRRSSTTUUVVWWYYjjkk' +
  'qqvvwwxxyyzz&*,;XZ~~';
const LONG_CODE = 0x7e; // '~'

/**
 * The canonical decoding tables of {@link buildHuffmanTable}, written out: building them took the
 * shim ≈ 0.1 ms per run, and gRPC's `content-type` (`application/grpc+proto`: `+` has an 11-bit
 * code) needs them on every call. hpack.test.ts builds them again and compares.
 */
export const HUFFMAN: Readonly<HuffmanTable> = {
  firstCode: [0, 0, 0, 0, 0, 0, 20, 92, 248, 0, 1016, 2042, 4090, 8184, 16380, 32764, 0, 0, 0, 524272, 1048550, 2097116, 4194258,
    8388568, 16777194, 33554412, 67108832, 134217694, 268435426, 0, 1073741820],
  firstIndex: [0, 0, 0, 0, 0, 0, 10, 36, 68, 0, 74, 79, 82, 84, 90, 92, 0, 0, 0, 95, 98, 106, 119, 145, 174, 186, 190, 205, 224, 0, 253],
  count: [0, 0, 0, 0, 0, 10, 26, 32, 6, 0, 5, 3, 2, 6, 2, 3, 0, 0, 0, 3, 8, 13, 26, 29, 12, 4, 15, 19, 29, 0, 4],
  symbols: [48, 49, 50, 97, 99, 101, 105, 111, 115, 116, 32, 37, 45, 46, 47, 51, 52, 53, 54, 55, 56, 57, 61, 65, 95, 98, 100, 102, 103,
    104, 108, 109, 110, 112, 114, 117, 58, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 83, 84, 85, 86, 87, 89, 106,
    107, 113, 118, 119, 120, 121, 122, 38, 42, 44, 59, 88, 90, 33, 34, 40, 41, 63, 39, 43, 124, 35, 62, 0, 36, 64, 91, 93, 126, 94, 125,
    60, 96, 123, 92, 195, 208, 128, 130, 131, 162, 184, 194, 224, 226, 153, 161, 167, 172, 176, 177, 179, 209, 216, 217, 227, 229, 230,
    129, 132, 133, 134, 136, 146, 154, 156, 160, 163, 164, 169, 170, 173, 178, 181, 185, 186, 187, 189, 190, 196, 198, 228, 232, 233, 1,
    135, 137, 138, 139, 140, 141, 143, 147, 149, 150, 151, 152, 155, 157, 158, 165, 166, 168, 174, 175, 180, 182, 183, 188, 191, 197, 231,
    239, 9, 142, 144, 145, 148, 159, 171, 206, 215, 225, 236, 237, 199, 207, 234, 235, 192, 193, 200, 201, 202, 205, 210, 213, 218, 219,
    238, 240, 242, 243, 255, 203, 204, 211, 212, 214, 221, 222, 223, 241, 244, 245, 246, 247, 248, 250, 251, 252, 253, 254, 2, 3, 4, 5, 6,
    7, 8, 11, 12, 14, 15, 16, 17, 18, 19, 20, 21, 23, 24, 25, 26, 27, 28, 29, 30, 31, 127, 220, 249, 10, 13, 22, 256],
};

/** Canonical decoding tables: per length, the first code, its index in `symbols`, and the count. */
export interface HuffmanTable {
  firstCode: number[];
  firstIndex: number[];
  count: number[];
  symbols: number[];
}

/**
 * Builds the canonical decoding tables from {@link HUFFMAN_LENGTHS}: the derivation of
 * {@link HUFFMAN}, which hpack.test.ts checks against it (the shim itself uses the written-out copy).
 */
export function buildHuffmanTable(): HuffmanTable {
  const MAX_LEN = 30;
  const lengths = new Array<number>(257);
  for (let s = 0; s < 256; s++) lengths[s] = HUFFMAN_LENGTHS.charCodeAt(s) - 60;
  lengths[256] = MAX_LEN; // EOS
  const count: number[] = [];
  for (let len = 0; len <= MAX_LEN; len++) count[len] = 0;
  for (let s = 0; s < 257; s++) count[lengths[s] as number]! += 1;
  // Symbols ordered by (length, symbol): each length's run starts after all shorter ones.
  const firstIndex: number[] = [];
  const firstCode: number[] = [];
  let index = 0;
  let code = 0;
  for (let len = 1; len <= MAX_LEN; len++) {
    code *= 2;
    if (count[len] !== 0) {
      firstIndex[len] = index;
      firstCode[len] = code;
    }
    index += count[len] as number;
    code += count[len] as number;
  }
  const symbols = new Array<number>(257);
  const next = firstIndex.slice();
  for (let s = 0; s < 257; s++) {
    const len = lengths[s] as number;
    symbols[next[len] as number] = s;
    next[len] = (next[len] as number) + 1;
  }
  return { firstCode, firstIndex, count, symbols };
}

/** What a dynamic-table entry costs beyond its name and value octets (RFC 7541 §4.1). */
const ENTRY_OVERHEAD = 32;

/**
 * A decoder for one HTTP/2 connection: header blocks must be decoded in the order received,
 * since each may change the dynamic table.
 */
export class HpackDecoder {
  private dynamic: HeaderField[] = [];
  private dynamicSize = 0;
  private maxSize = 4096; // SETTINGS_HEADER_TABLE_SIZE default, which we never change

  /**
   * Decodes one complete header block (HEADERS + CONTINUATION payloads).
   * @param keep which fields the caller wants: others are parsed (and enter the dynamic table as
   *   the encoder asked) but left out, and their values are not Huffman-decoded unless the table
   *   must know their size. Decoding a response's `content-type`, `date` and the like, which the
   *   shim never reads, cost its one-shot process ≈ 0.1 ms. Default: every field.
   * @throws Error on malformed input (bad index, truncated integer or string, bad Huffman padding).
   */
  decode(block: Uint8Array, keep?: (name: string) => boolean): HeaderField[] {
    const out: HeaderField[] = [];
    const r = { buf: block, pos: 0 };
    while (r.pos < block.length) {
      const b = block[r.pos] as number;
      if (b & 0x80) {
        const field = this.entry(this.integer(r, 7));
        if (!keep || keep(field[0])) out.push(field);
      } else if ((b & 0xe0) === 0x20) {
        // Dynamic table size update (RFC 7541 §6.3): 001xxxxx.
        this.maxSize = this.integer(r, 5);
        this.evict(0);
      } else {
        const indexed = (b & 0x40) !== 0; // 01xxxxxx: with incremental indexing (RFC 7541 §6.2.1); else 000xxxxx
        const index = this.integer(r, indexed ? 6 : 4);
        const name = index === 0 ? this.string(r) : this.entry(index)[0];
        const wanted = !keep || keep(name);
        if (indexed && this.maxSize >= ENTRY_OVERHEAD + name.length) {
          // The table may hold it: its size counts the decoded value, so decode it.
          const field: HeaderField = [name, this.string(r)];
          this.insert(field);
          if (wanted) out.push(field);
        } else {
          // An entry that cannot fit empties the table (RFC 7541 §4.4), whatever its value.
          if (indexed) this.evict(this.maxSize + 1);
          if (wanted) out.push([name, this.string(r)]);
          else this.stringOctets(r); // skipped undecoded
        }
      }
    }
    return out;
  }

  private entry(index: number): HeaderField {
    const e = index <= STATIC_TABLE.length ? STATIC_TABLE[index - 1] : this.dynamic[index - STATIC_TABLE.length - 1];
    if (index === 0 || !e) throw new Error(`hpack: bad index ${index}`);
    return e;
  }

  private insert(field: HeaderField): void {
    const size = field[0].length + field[1].length + ENTRY_OVERHEAD;
    this.evict(size);
    if (size <= this.maxSize) {
      this.dynamic.unshift(field);
      this.dynamicSize += size;
    }
  }

  private evict(incoming: number): void {
    while (this.dynamic.length > 0 && this.dynamicSize + incoming > this.maxSize) {
      const [n, v] = this.dynamic.pop() as HeaderField;
      this.dynamicSize -= n.length + v.length + ENTRY_OVERHEAD;
    }
  }

  private integer(r: { buf: Uint8Array; pos: number }, prefixBits: number): number {
    const max = (1 << prefixBits) - 1;
    let value = (r.buf[r.pos++] as number) & max;
    if (value < max) return value;
    for (let shift = 0; ; shift += 7) {
      if (r.pos >= r.buf.length || shift > 28) throw new Error('hpack: bad integer');
      const b = r.buf[r.pos++] as number;
      value += (b & 0x7f) * 2 ** shift;
      if (b < 0x80) return value;
    }
  }

  private string(r: { buf: Uint8Array; pos: number }): string {
    const isHuffman = r.pos < r.buf.length && ((r.buf[r.pos] as number) & 0x80) !== 0;
    const raw = this.stringOctets(r);
    return isHuffman ? this.huffmanDecode(raw) : latin1Text(raw);
  }

  /** Moves past a string literal (RFC 7541 §5.2). @returns its octets, still Huffman-coded if they were */
  private stringOctets(r: { buf: Uint8Array; pos: number }): Uint8Array {
    if (r.pos >= r.buf.length) throw new Error('hpack: truncated string');
    const len = this.integer(r, 7);
    if (r.pos + len > r.buf.length) throw new Error('hpack: truncated string');
    r.pos += len;
    return r.buf.subarray(r.pos - len, r.pos);
  }

  /**
   * Decodes a Huffman string 8 bits at a time through {@link FAST_SYMBOLS}, which covers every
   * symbol with a code of at most 8 bits (most of what gRPC's headers use); longer codes are walked
   * bit by bit with the canonical tables. Walking every code bit by bit, with the tables built at
   * run time, cost the shim ≈ 0.3 ms per run.
   */
  private huffmanDecode(raw: Uint8Array): string {
    let out = '';
    let acc = 0; // bits read and not yet decoded, right-aligned; never more than 15
    let n = 0; // how many
    let pos = 0;
    for (;;) {
      if (n < 8 && pos < raw.length) {
        acc = (acc << 8) | (raw[pos++] as number);
        n += 8;
      }
      if (n === 0) return out;
      // The next 8 bits; a shorter tail is filled with ones, as its padding must be.
      const top = n >= 8 ? (acc >> (n - 8)) & 0xff : ((acc << (8 - n)) | ((1 << (8 - n)) - 1)) & 0xff;
      const sym = FAST_SYMBOLS.charCodeAt(top);
      if (sym !== LONG_CODE) {
        const len = HUFFMAN_LENGTHS.charCodeAt(sym) - 60;
        if (len <= n) {
          out += String.fromCharCode(sym);
          n -= len;
          acc &= (1 << n) - 1;
          continue;
        }
      }
      if (n < 8) {
        // What is left can only be padding: fewer than 8 bits, all ones (the start of EOS).
        if (acc !== (1 << n) - 1) throw new Error('hpack: bad Huffman padding');
        return out;
      }
      // A code longer than 8 bits.
      const t = HUFFMAN;
      let code = 0;
      for (let len = 1; ; len++) {
        if (n === 0) {
          // Input ended inside a code of more than 8 bits: more than 7 bits of padding.
          if (pos >= raw.length) throw new Error('hpack: bad Huffman padding');
          acc = raw[pos++] as number;
          n = 8;
        }
        n--;
        code = code * 2 + ((acc >> n) & 1);
        acc &= (1 << n) - 1;
        const first = t.firstCode[len];
        if (first !== undefined && code >= first && code - first < (t.count[len] as number)) {
          const long = t.symbols[(t.firstIndex[len] as number) + code - first] as number;
          if (long === 256) throw new Error('hpack: EOS in Huffman string');
          out += String.fromCharCode(long);
          break;
        }
        if (len === 30) throw new Error('hpack: bad Huffman code');
      }
    }
  }
}

/** First octet of a field: literal, new name, not indexed (RFC 7541 §6.2.2). */
const LITERAL_WITHOUT_INDEXING = new Uint8Array([0]);

/**
 * Encodes headers as literals without indexing and without Huffman: valid for any decoder,
 * stateless, and our request is a few hundred bytes.
 */
export function encodeHeaders(fields: readonly HeaderField[]): Uint8Array {
  const parts: Uint8Array[] = [];
  for (const [name, value] of fields) {
    parts.push(LITERAL_WITHOUT_INDEXING);
    encodeString(name, parts);
    encodeString(value, parts);
  }
  return concatBytes(parts);
}

/** Appends a string literal (length prefix, then the latin1 bytes) to `parts`. */
function encodeString(s: string, parts: Uint8Array[]): void {
  const bytes = latin1Bytes(s);
  const prefix: number[] = [];
  if (bytes.length < 0x7f) {
    prefix.push(bytes.length);
  } else {
    prefix.push(0x7f);
    let rest = bytes.length - 0x7f;
    while (rest >= 0x80) {
      prefix.push((rest & 0x7f) | 0x80);
      rest >>= 7;
    }
    prefix.push(rest);
  }
  const head = new Uint8Array(prefix.length);
  for (let i = 0; i < prefix.length; i++) head[i] = prefix[i] as number;
  parts.push(head, bytes);
}
