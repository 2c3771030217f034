/**
 * Byte helpers over plain `Uint8Array`s. The shim avoids `Buffer` on its ADD path: its methods
 * are builtins written in JavaScript, and the first call of each costs the Bun executable tens of
 * µs per run (`Buffer.from` ≈ 0.1–0.2 ms, `Buffer.alloc` and `writeUInt32BE` ≈ 25 µs each;
 * typed arrays and TextEncoder/TextDecoder a few µs;
 * docs/performance.md#the-cni-executables-start).
 */
const encoder = new TextEncoder();
/** Keeps a leading BOM, as `Buffer#toString('utf8')` does (a netconf must not start with one). */
const decoder = new TextDecoder('utf-8', { ignoreBOM: true });

/** UTF-8 bytes of `s`. */
export function utf8Bytes(s: string): Uint8Array {
  const b = new Uint8Array(utf8MaxBytes(s));
  return b.subarray(0, utf8Into(s, b));
}

/** An upper bound of the UTF-8 length of `s` (bytes): 3 per UTF-16 unit. */
export function utf8MaxBytes(s: string): number {
  return s.length * 3;
}

/**
 * Writes the UTF-8 bytes of `s` at the start of `target`, which must hold {@link utf8MaxBytes}.
 * @returns how many bytes were written
 */
export function utf8Into(s: string, target: Uint8Array): number {
  return encoder.encodeInto(s, target).written;
}

/** `b` as UTF-8 text; invalid sequences become U+FFFD (as `Buffer#toString('utf8')`). */
export function utf8Text(b: Uint8Array): string {
  return decoder.decode(b);
}

/** latin1 bytes of `s`: one byte per char, the low 8 bits (as `Buffer.from(s, 'latin1')`). */
export function latin1Bytes(s: string): Uint8Array {
  const b = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) b[i] = s.charCodeAt(i) & 0xff;
  return b;
}

/** `b` as latin1 text: one char per byte (as `Buffer#toString('latin1')`). */
export function latin1Text(b: Uint8Array): string {
  let s = '';
  for (let i = 0; i < b.length; i++) s += String.fromCharCode(b[i] as number);
  return s;
}

/** The bytes of `parts`, one after another. */
export function concatBytes(parts: readonly Uint8Array[]): Uint8Array {
  let length = 0;
  for (const p of parts) length += p.length;
  const out = new Uint8Array(length);
  let off = 0;
  for (const p of parts) {
    out.set(p, off);
    off += p.length;
  }
  return out;
}

/** The big-endian unsigned 32-bit integer at `off` of `b`. */
export function uint32BE(b: Uint8Array, off: number): number {
  return (((b[off] as number) << 24) | ((b[off + 1] as number) << 16) | ((b[off + 2] as number) << 8) | (b[off + 3] as number)) >>> 0;
}
