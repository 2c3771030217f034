/**
 * A string's bytes without `Buffer.from`, whose first call costs the Bun executable
 * ≈ 0.1–0.2 ms per run (a builtin written in JavaScript; see parse.ts on REQUIRED_ENV).
 */
const encoder = new TextEncoder();

/** UTF-8 bytes of `s`. */
export function utf8Bytes(s: string): Buffer {
  const b = Buffer.alloc(s.length * 3);
  return b.subarray(0, encoder.encodeInto(s, b).written);
}

/** latin1 bytes of `s`: one byte per char, the low 8 bits (as `Buffer.from(s, 'latin1')`). */
export function latin1Bytes(s: string): Buffer {
  const b = Buffer.alloc(s.length);
  for (let i = 0; i < s.length; i++) b[i] = s.charCodeAt(i) & 0xff;
  return b;
}
