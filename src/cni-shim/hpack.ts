/**
 * HPACK (RFC 7541), the HTTP/2 header compression: a full decoder (static and dynamic table,
 * Huffman strings) for what coild's grpc-js/nghttp2 server sends, and the simplest valid
 * encoder (literals without indexing) for our one request. It exists because importing
 * `node:http2` alone costs the Bun-compiled shim ≈ 17 ms per pod (hack/build-cni.sh).
 *
 * @see https://www.rfc-editor.org/rfc/rfc7541
 */

/** A header field as decoded: name and value as latin1 strings (HPACK is octet-based). */
export type HeaderField = [name: string, value: string];

/** RFC 7541 Appendix A, entries 1–61; `name=value`, or just `name` when the value is empty. */
const STATIC_TABLE: readonly HeaderField[] = (
  ':authority|:method=GET|:method=POST|:path=/|:path=/index.html|:scheme=http|:scheme=https|:status=200|' +
  ':status=204|:status=206|:status=304|:status=400|:status=404|:status=500|accept-charset|' +
  'accept-encoding=gzip, deflate|accept-language|accept-ranges|accept|access-control-allow-origin|age|allow|' +
  'authorization|cache-control|content-disposition|content-encoding|content-language|content-length|' +
  'content-location|content-range|content-type|cookie|date|etag|expect|expires|from|host|if-match|' +
  'if-modified-since|if-none-match|if-range|if-unmodified-since|last-modified|link|location|max-forwards|' +
  'proxy-authenticate|proxy-authorization|range|referer|refresh|retry-after|server|set-cookie|' +
  'strict-transport-security|transfer-encoding|user-agent|vary|via|www-authenticate'
)
  .split('|')
  .map((e) => {
    const eq = e.indexOf('=', 1);
    return eq < 0 ? [e, ''] : [e.slice(0, eq), e.slice(eq + 1)];
  });

/**
 * Huffman code lengths of symbols 0–255 (RFC 7541 Appendix B), one letter each: 'A' = 5 bits.
 * The code is canonical (codes ordered by length, then symbol), so lengths define it fully;
 * EOS (256) is the one 30-bit code after all others.
 */
const HUFFMAN_LENGTHS =
  'ISXXXXXXXTZXXZXXXXXXXXZXXXXXXXXXBFFHIBDGFFDGDBBBAAABBBBBBBCDKBHFIBCCCCCCCCCCCCCCCCCCCCCCDCDIOIJBKABABABBBACCBBBABCBAABCCCCCKGJIXPRPPRRRSRSSSSSTSTTRSTSSSSQRSRSSTRQPRRSSQSRRTQRSSQQRQSRSSPRRRSRRSVVPORSRUVVVWWVTUOQVWWVWTQQVVXWWWPTPQRQQSRRUUTTVSVWVVWWWWWXWWWWWV';

/** Canonical decoding tables: per length, the first code, its index in `symbols`, and the count. */
export interface HuffmanTable {
  firstCode: number[];
  firstIndex: number[];
  count: number[];
  symbols: number[];
}

/**
 * Builds the canonical decoding tables with plain counting loops: this runs once per process, in
 * the interpreter, on every pod's ADD, where a comparator sort over the 257 symbols measured
 * 1.0–1.7 ms and the loops below ≈ 0.05 ms.
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

/**
 * A decoder for one HTTP/2 connection: header blocks must be decoded in the order received,
 * since each may change the dynamic table.
 */
export class HpackDecoder {
  private dynamic: HeaderField[] = [];
  private dynamicSize = 0;
  private maxSize = 4096; // SETTINGS_HEADER_TABLE_SIZE default, which we never change
  private huffman: HuffmanTable | undefined;

  /**
   * Decodes one complete header block (HEADERS + CONTINUATION payloads).
   * @throws Error on malformed input (bad index, truncated integer or string, bad Huffman padding).
   */
  decode(block: Buffer): HeaderField[] {
    const out: HeaderField[] = [];
    const r = { buf: block, pos: 0 };
    while (r.pos < block.length) {
      const b = block[r.pos] as number;
      if (b & 0x80) {
        out.push(this.entry(this.integer(r, 7)));
      } else if (b & 0x40) {
        const field = this.literal(r, 6);
        out.push(field);
        this.insert(field);
      } else if (b & 0x20) {
        this.maxSize = this.integer(r, 5);
        this.evict(0);
      } else {
        out.push(this.literal(r, 4));
      }
    }
    return out;
  }

  private literal(r: { buf: Buffer; pos: number }, prefixBits: number): HeaderField {
    const index = this.integer(r, prefixBits);
    const name = index === 0 ? this.string(r) : this.entry(index)[0];
    return [name, this.string(r)];
  }

  private entry(index: number): HeaderField {
    const e = index <= STATIC_TABLE.length ? STATIC_TABLE[index - 1] : this.dynamic[index - STATIC_TABLE.length - 1];
    if (index === 0 || !e) throw new Error(`hpack: bad index ${index}`);
    return e;
  }

  private insert(field: HeaderField): void {
    const size = field[0].length + field[1].length + 32;
    this.evict(size);
    if (size <= this.maxSize) {
      this.dynamic.unshift(field);
      this.dynamicSize += size;
    }
  }

  private evict(incoming: number): void {
    while (this.dynamic.length > 0 && this.dynamicSize + incoming > this.maxSize) {
      const [n, v] = this.dynamic.pop() as HeaderField;
      this.dynamicSize -= n.length + v.length + 32;
    }
  }

  private integer(r: { buf: Buffer; pos: number }, prefixBits: number): number {
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

  private string(r: { buf: Buffer; pos: number }): string {
    if (r.pos >= r.buf.length) throw new Error('hpack: truncated string');
    const isHuffman = ((r.buf[r.pos] as number) & 0x80) !== 0;
    const len = this.integer(r, 7);
    if (r.pos + len > r.buf.length) throw new Error('hpack: truncated string');
    const raw = r.buf.subarray(r.pos, r.pos + len);
    r.pos += len;
    return isHuffman ? this.huffmanDecode(raw) : raw.toString('latin1');
  }

  private huffmanDecode(raw: Buffer): string {
    const t = (this.huffman ??= buildHuffmanTable());
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
    // Padding: fewer than 8 bits, all ones (the start of EOS).
    if (len > 7 || code !== 2 ** len - 1) throw new Error('hpack: bad Huffman padding');
    return out; // latin1: one char per octet, as raw.toString('latin1') gives for plain strings
  }
}

/**
 * Encodes headers as literals without indexing and without Huffman: valid for any decoder,
 * stateless, and our request is a few hundred bytes.
 */
export function encodeHeaders(fields: readonly HeaderField[]): Buffer {
  const parts: Buffer[] = [];
  for (const [name, value] of fields) parts.push(Buffer.from([0]), encodeString(name), encodeString(value));
  return Buffer.concat(parts);
}

function encodeString(s: string): Buffer {
  const bytes = Buffer.from(s, 'latin1');
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
  return Buffer.concat([Buffer.from(prefix), bytes]);
}
