/**
 * The protobuf wire format, just enough for proto/cnirpc.proto's few messages. The `coil`
 * executable runs once per pod, and loading protobufjs plus parsing a descriptor costs tens of
 * milliseconds per run (npm-ecosystem.md §5), so the shim encodes and decodes by hand.
 *
 * @see https://protobuf.dev/programming-guides/encoding/
 */

import { utf8Bytes } from './bytes.js';

/** Wire types used by our messages. 1 (I64) and 5 (I32) are only skipped when decoding. */
const VARINT = 0;
const I64 = 1;
const LEN = 2;
const I32 = 5;

/**
 * Appends proto3 fields; default values (0, '', empty bytes) are omitted as proto3 does. Writes
 * into one growing buffer: in the shim's cold start, small typed-array allocations per varint
 * (`Uint8Array.from`) measured ≈ 0.5 ms per message, this ≈ 0.05 ms.
 */
export class ProtoWriter {
  private buf = new Uint8Array(512);
  private length = 0;

  /** Field of type string. */
  string(field: number, value: string): this {
    return value === '' ? this : this.bytes(field, utf8Bytes(value));
  }

  /** Field of type bytes, or an embedded message's encoding. */
  bytes(field: number, value: Uint8Array): this {
    if (value.length === 0) return this;
    return this.message(field, value);
  }

  /** Embedded message: written even when empty, since presence matters for map entries. */
  message(field: number, value: Uint8Array): this {
    this.room(20 + value.length);
    this.varint((field << 3) | LEN);
    this.varint(value.length);
    this.buf.set(value, this.length);
    this.length += value.length;
    return this;
  }

  /** Field of type int32/enum/bool (non-negative values only: we have no negative fields). */
  uint(field: number, value: number): this {
    if (value === 0) return this;
    this.room(20);
    this.varint((field << 3) | VARINT);
    this.varint(value);
    return this;
  }

  /** The encoded message (a view of this writer's buffer). */
  finish(): Uint8Array {
    return this.buf.subarray(0, this.length);
  }

  private room(n: number): void {
    if (this.length + n <= this.buf.length) return;
    const next = new Uint8Array(Math.max(2 * this.buf.length, this.length + n));
    next.set(this.buf.subarray(0, this.length));
    this.buf = next;
  }

  /** Unsigned LEB128; callers reserve ≥ 10 bytes first. */
  private varint(value: number): void {
    let v = value;
    while (v > 0x7f) {
      this.buf[this.length++] = (v % 128) | 0x80;
      v = Math.floor(v / 128);
    }
    this.buf[this.length++] = v;
  }
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
