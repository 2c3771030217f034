/**
 * The part of Bun's `bun:ffi` src/netlink uses besides the libc binding (src/runtime/bun-libc.ts):
 * this project has no @types/bun. @see https://bun.sh/docs/api/ffi
 */
declare module 'bun:ffi' {
  /** An opaque native pointer. */
  export type Pointer = number & { readonly __pointer: unique symbol };
  /** The address of a typed array's bytes (valid while the array is alive and not resized). */
  export function ptr(view: ArrayBufferView): Pointer;
}
