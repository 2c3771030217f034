/**
 * The part of Bun's `bun:ffi` the netlink agent uses (this project has no @types/bun; the agent
 * is the one program that runs on Bun as a long-lived process). @see https://bun.sh/docs/api/ffi
 */
declare module 'bun:ffi' {
  /** Argument/return types of a foreign function. */
  export const FFIType: { readonly i32: number; readonly i64: number; readonly u64: number; readonly ptr: number; readonly cstring: number };
  /** An opaque native pointer. */
  export type Pointer = number & { readonly __pointer: unique symbol };
  /** Loads `path` and binds `symbols` (name → signature). */
  export function dlopen<S extends Record<string, { args: readonly number[]; returns: number }>>(
    path: string,
    symbols: S,
  ): { symbols: { [K in keyof S]: (...args: Array<number | bigint | Pointer | null>) => number | bigint | Pointer }; close(): void };
  /** The address of a typed array's bytes (valid while the array is alive and not resized). */
  export function ptr(view: ArrayBufferView): Pointer;
  /** Reads native memory. */
  export const read: { i32(p: Pointer, offset?: number): number };
}
