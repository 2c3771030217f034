/**
 * The protobuf wire format, just enough for proto/cnirpc.proto's few messages. The `coil`
 * executable runs once per pod, and loading protobufjs plus parsing a descriptor costs tens of
 * milliseconds per run (docs/performance.md#process-start-costs), so the shim encodes and decodes
 * by hand.
 *
 * @see https://protobuf.dev/programming-guides/encoding/
 */

import { utf8Into, utf8MaxBytes } from './bytes.js';

/** Wire types used by our messages. 1 (I64) and 5 (I32) are only skipped when decoding. */
const VARINT = 0;
const I64 = 1;
const LEN = 2;
const I32 = 5;

/**
 * A message being encoded: one buffer, written front to back, grown when a field needs more room.
 * Plain functions over it rather than a writer class with a writer per embedded message: in the
 * shim's one-shot process, the first instance of a class and every extra buffer cost tens of µs,
 * and a CNIArgs took ≈ 0.15 ms to encode that way against ≈ 0.09 ms now (cold, measured in the
 * executable).
 */
export interface ProtoBuffer {
  bytes: Uint8Array;
  /** Bytes written so far. */
  length: number;
}

/** What any key or length costs at most (bytes): a varint of up to 64 bits. */
const MAX_VARINT_BYTES = 10;

/** An empty message with room for `capacityBytes` before it grows. */
export function protoBuffer(capacityBytes: number): ProtoBuffer {
  return { bytes: new Uint8Array(capacityBytes), length: 0 };
}

/** Makes room for `n` more bytes. */
function reserve(b: ProtoBuffer, n: number): void {
  if (b.length + n <= b.bytes.length) return;
  const next = new Uint8Array(Math.max(2 * b.bytes.length, b.length + n));
  next.set(b.bytes.subarray(0, b.length));
  b.bytes = next;
}

/** Unsigned LEB128. */
function putVarint(b: ProtoBuffer, value: number): void {
  reserve(b, MAX_VARINT_BYTES);
  let v = value;
  while (v > 0x7f) {
    b.bytes[b.length++] = (v % 128) | 0x80;
    v = Math.floor(v / 128);
  }
  b.bytes[b.length++] = v;
}

/** Field of type string; omitted when empty, as proto3 does. */
export function putString(b: ProtoBuffer, field: number, value: string): void {
  if (value === '') return;
  const at = beginMessage(b, field);
  reserve(b, utf8MaxBytes(value));
  b.length += utf8Into(value, b.bytes.subarray(b.length));
  endMessage(b, at);
}

/** Field of type bytes; omitted when empty. */
export function putBytes(b: ProtoBuffer, field: number, value: Uint8Array): void {
  if (value.length === 0) return;
  putVarint(b, (field << 3) | LEN);
  putVarint(b, value.length);
  reserve(b, value.length);
  b.bytes.set(value, b.length);
  b.length += value.length;
}

/** Field of type int32/enum/bool (non-negative values only: we have no negative fields); omitted when 0. */
export function putUint(b: ProtoBuffer, field: number, value: number): void {
  if (value === 0) return;
  putVarint(b, (field << 3) | VARINT);
  putVarint(b, value);
}

/**
 * Starts an embedded message (or a string) written in place: the key, then one byte reserved for
 * the length, which {@link endMessage} fills in. Written even when empty, since presence matters
 * for map entries.
 * @returns where the length goes
 */
export function beginMessage(b: ProtoBuffer, field: number): number {
  putVarint(b, (field << 3) | LEN);
  reserve(b, 1);
  return b.length++;
}

/** Ends what {@link beginMessage} started at `at`; a length over 127 takes more bytes, so the content moves. */
export function endMessage(b: ProtoBuffer, at: number): void {
  const n = b.length - at - 1;
  if (n <= 0x7f) {
    b.bytes[at] = n;
    return;
  }
  let width = 1;
  for (let v = n; v > 0x7f; v = Math.floor(v / 128)) width++;
  reserve(b, width - 1);
  b.bytes.copyWithin(at + width, at + 1, b.length);
  b.length = at;
  putVarint(b, n);
  b.length += n;
}

/** The encoded message (a view of the buffer). */
export function finish(b: ProtoBuffer): Uint8Array {
  return b.bytes.subarray(0, b.length);
}

/** One decoded field: a varint as a number, a length-delimited field as its bytes. */
export type ProtoField = { field: number; value: number } | { field: number; value: Uint8Array };

/**
 * Splits an encoded message into its fields, in wire order.
 * @throws Error when the buffer is truncated or uses a group wire type (3, 4).
 */
export function readFields(buf: Uint8Array): ProtoField[] {
  const fields: ProtoField[] = [];
  let pos = 0;
  const readVarint = (): number => {
    let result = 0;
    let scale = 1;
    for (;;) {
      if (pos >= buf.length) throw new Error('protobuf: truncated varint');
      const b = buf[pos++] as number;
      result += (b & 0x7f) * scale;
      if (b < 0x80) return result;
      scale *= 128;
      if (scale > 2 ** 63) throw new Error('protobuf: varint too long');
    }
  };
  while (pos < buf.length) {
    const key = readVarint();
    const field = Math.floor(key / 8);
    const wireType = key & 7;
    if (wireType === VARINT) {
      fields.push({ field, value: readVarint() });
    } else if (wireType === LEN) {
      const len = readVarint();
      if (pos + len > buf.length) throw new Error('protobuf: truncated field');
      fields.push({ field, value: buf.subarray(pos, pos + len) });
      pos += len;
    } else if (wireType === I64 || wireType === I32) {
      pos += wireType === I64 ? 8 : 4;
      if (pos > buf.length) throw new Error('protobuf: truncated fixed field');
    } else {
      throw new Error(`protobuf: unsupported wire type ${wireType}`);
    }
  }
  return fields;
}
