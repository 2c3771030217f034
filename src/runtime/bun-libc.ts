/**
 * The one libc binding of coil's Bun code: the signatures of the libc calls coil makes through
 * Bun's FFI (`Bun.FFI`, the native object `bun:ffi` wraps), bound by name on demand. The CNI
 * executable (src/cni-shim/libc.ts), the netlink agent (src/netlink/socket/netlink-agent-main.ts) and the
 * rtnetlink socket (src/netlink/socket/rtnetlink-socket.ts) each bind the calls they use, no more: Bun
 * compiles a trampoline per bound symbol, which the one-shot CNI executable pays on every run.
 *
 * Imports nothing, so the CNI shim may import it (docs/design.md#imports-point-inward; held by
 * test/imports.test.ts).
 * @see https://bun.sh/docs/api/ffi
 */

/** A bound libc function: numbers, bigints, pointers or typed arrays (passed as pointers) in; a number or bigint out. */
export type LibcCall = (...args: unknown[]) => number | bigint;

/** Argument and return types by name, as `bun:ffi` accepts them. */
const SIGNATURES = {
  read: { args: ['i32', 'ptr', 'u64'], returns: 'i64' },
  write: { args: ['i32', 'ptr', 'u64'], returns: 'i64' },
  open: { args: ['ptr', 'i32'], returns: 'i32' },
  close: { args: ['i32'], returns: 'i32' },
  socket: { args: ['i32', 'i32', 'i32'], returns: 'i32' },
  connect: { args: ['i32', 'ptr', 'u32'], returns: 'i32' },
  setsockopt: { args: ['i32', 'i32', 'i32', 'ptr', 'i32'], returns: 'i32' },
  send: { args: ['i32', 'ptr', 'u64', 'i32'], returns: 'i64' },
  recv: { args: ['i32', 'ptr', 'u64', 'i32'], returns: 'i64' },
  poll: { args: ['ptr', 'u64', 'i32'], returns: 'i32' },
  ioctl: { args: ['i32', 'i64', 'ptr'], returns: 'i32' },
  setns: { args: ['i32', 'i32'], returns: 'i32' },
  if_nametoindex: { args: ['ptr'], returns: 'i32' },
  _exit: { args: ['i32'], returns: 'void' },
  __errno_location: { args: [], returns: 'ptr' },
} as const satisfies Record<string, { args: readonly string[]; returns: string }>;

/** The name of a libc function coil binds. */
export type LibcName = keyof typeof SIGNATURES;

/** Some bound libc functions, and the calling thread's errno. */
export interface LibcBinding<K extends LibcName> {
  readonly calls: { readonly [P in K]: LibcCall };
  /** errno(3) of the calling thread, as the last failed call left it. */
  errno(): number;
}

/** What `bun:ffi` exports and `Bun.FFI` holds. */
interface BunFfi {
  dlopen(path: string, symbols: Record<string, { args: readonly string[]; returns: string }>): { symbols: Record<string, LibcCall> } | Error;
  read: { i32(pointer: number | bigint): number };
}

/** `require` of the runtime; absent under Node's ESM, where bindLibc never calls it. */
declare const require: ((id: string) => unknown) | undefined;

/**
 * Binds `names` of libc.so.6 (plus `__errno_location`, for {@link LibcBinding.errno}).
 * @returns undefined under Node, or when the FFI cannot bind libc (a runtime without it, or
 *   executable memory denied to its trampolines)
 */
export function bindLibc<K extends LibcName>(names: readonly K[]): LibcBinding<K> | undefined {
  const g = globalThis as { Bun?: { FFI?: BunFfi } };
  if (g.Bun === undefined) return undefined;
  try {
    // `bun:ffi` is a thin JavaScript layer over the native `Bun.FFI` (its dlopen only adds path
    // normalization and turns a returned Error into a throw); loading that layer took ≈ 0.3 ms of
    // each CNI run, so the native object is used when present.
    const ffi = g.Bun.FFI ?? (require!('bun:ffi') as BunFfi);
    const wanted = Object.fromEntries([...new Set<LibcName>([...names, '__errno_location'])].map((n) => [n, SIGNATURES[n]]));
    const lib = ffi.dlopen('libc.so.6', wanted);
    if (lib instanceof Error) return undefined;
    const s = lib.symbols;
    const errnoLocation = s.__errno_location!;
    return { calls: s as LibcBinding<K>['calls'], errno: () => ffi.read.i32(errnoLocation() as number) };
  } catch {
    return undefined;
  }
}

/**
 * {@link bindLibc} for code that runs only on Bun.
 * @throws Error when libc cannot be bound
 */
export function requireLibc<K extends LibcName>(names: readonly K[]): LibcBinding<K> {
  const b = bindLibc(names);
  if (b === undefined) throw new Error('libc cannot be bound: this code needs the Bun runtime and its FFI');
  return b;
}
