/**
 * Blocking libc I/O for the Bun executable: read(2), write(2), a UNIX socket connect(2) and
 * poll(2), called through the runtime's FFI (bound by src/runtime/bun-libc.ts, coil's one libc binding).
 *
 * Why: in the executable, Bun's own I/O costs more than the work (a thread pool to read a
 * 100-byte netconf, a slow connect), while binding these calls costs a fraction of a millisecond
 * once and each call microseconds after, with no thread started; measured A/B, ADD gets over a
 * millisecond faster (docs/performance.md#the-cni-executables-start). A shim has nothing to do
 * while it waits, so blocking calls lose nothing; Go's plugins use the same system calls.
 *
 * {@link libc} answers undefined under Node (unit tests), when the FFI cannot bind libc (a
 * runtime without it, or executable memory denied to its trampolines), or when
 * `COIL_SHIM_NO_FFI=1`; callers then use the runtime's own I/O.
 *
 * @see https://bun.sh/docs/api/ffi; docs/performance.md#method (how the shim's start is measured)
 */

import { bindLibc } from '../runtime/bun-libc.js';
import { concatBytes, utf8Bytes } from './bytes.js';

/** An error of a libc call, with Node's `code` convention (ENOENT, ECONNREFUSED…). */
export class SyscallError extends Error {
  /** The errno's name, or `errno N` for one not in the table below. */
  readonly code: string;
  constructor(readonly syscall: string, readonly errno: number) {
    const [code, text] = ERRNOS[errno] ?? [`errno ${errno}`, ''];
    super(`${syscall}: ${code}${text === '' ? '' : ` (${text})`}`);
    this.code = code;
  }
}

/** Linux errno numbers (x86-64 and arm64 share them) the shim can meet: name, strerror(3) text. */
const ERRNOS: Record<number, [string, string]> = {
  2: ['ENOENT', 'no such file or directory'], 4: ['EINTR', 'interrupted system call'], 9: ['EBADF', 'bad file descriptor'],
  11: ['EAGAIN', 'resource temporarily unavailable'], 13: ['EACCES', 'permission denied'], 20: ['ENOTDIR', 'not a directory'],
  32: ['EPIPE', 'broken pipe'], 36: ['ENAMETOOLONG', 'file name too long'], 88: ['ENOTSOCK', 'socket operation on non-socket'],
  91: ['EPROTOTYPE', 'protocol wrong type for socket'], 104: ['ECONNRESET', 'connection reset by peer'],
  110: ['ETIMEDOUT', 'connection timed out'], 111: ['ECONNREFUSED', 'connection refused'],
};
const EINTR = 4;
const EAGAIN = 11;
const EISCONN = 106;

const AF_UNIX = 1;
const SOCK_STREAM = 1;
const SOCK_NONBLOCK = 0o4000;
const SOCK_CLOEXEC = 0o2000000;
const POLLIN = 0x1;
const POLLOUT = 0x4;
/** sizeof(struct sockaddr_un): sun_family (2 bytes) + sun_path (108 bytes, NUL-terminated). */
const SOCKADDR_UN_BYTES = 110;
const READ_CHUNK_BYTES = 65_536;

/** The calls the shim makes; every method retries EINTR itself. */
export interface Libc {
  /**
   * Reads `fd` to end of file. Waits for data on a non-blocking descriptor.
   * @throws SyscallError when read(2) fails (EBADF for a closed stdin).
   */
  readAll(fd: number): Uint8Array;
  /**
   * Reads what is available, waiting at most `waitMs` (ms) for something to arrive.
   * @returns the bytes (empty at end of stream), or undefined when nothing arrived in time.
   * @throws SyscallError when poll(2) or read(2) fails (ECONNRESET…).
   */
  readSome(fd: number, waitMs: number): Uint8Array | undefined;
  /**
   * Writes all of `data`, waiting for room on a non-blocking descriptor.
   * @throws SyscallError when write(2) fails (EPIPE when the reader is gone).
   */
  writeAll(fd: number, data: Uint8Array): void;
  /**
   * Opens a non-blocking, close-on-exec UNIX stream socket connected to `path`.
   * @returns the descriptor.
   * @throws SyscallError ENOENT or ECONNREFUSED when nobody listens there, EAGAIN when the
   *   listener's backlog is full, ENAMETOOLONG for a path over 107 bytes, and the like.
   */
  connectUnix(path: string): number;
  close(fd: number): void;
  /**
   * Ends the process with `code` at once (_exit(2)): all output has been written with write(2),
   * and nothing else needs the runtime's teardown.
   */
  exit(code: number): never;
  /** The process environment (`Bun.env`). */
  readonly env: Readonly<Record<string, string | undefined>>;
}

let loaded: Libc | null | undefined;

/** The libc calls, loaded on first use; undefined when they are not available (see above). */
export function libc(): Libc | undefined {
  if (loaded === undefined) loaded = load();
  return loaded ?? undefined;
}

function load(): Libc | null {
  const env = (globalThis as { Bun?: { env: Record<string, string | undefined> } }).Bun?.env;
  if (env === undefined || env.COIL_SHIM_NO_FFI === '1') return null;
  const lib = bindLibc(['read', 'write', 'socket', 'connect', 'poll', 'close', '_exit']);
  if (lib === undefined) return null;
  const { calls: s, errno } = lib;
  // struct pollfd { int fd; short events; short revents; }, little-endian on both our targets
  const pollFd = new Int32Array(2);
  /** Waits until `fd` is ready for `events` or `ms` pass (-1 = no limit). @returns false on timeout. */
  const wait = (fd: number, events: number, ms: number): boolean => {
    pollFd[0] = fd;
    pollFd[1] = events; // events in the low half, revents (high half) zeroed
    for (;;) {
      const n = Number(s.poll(pollFd, 1, ms));
      if (n >= 0) return n > 0;
      const e = errno();
      if (e !== EINTR) throw new SyscallError('poll', e);
    }
  };
  // One read buffer for every read(2), and each chunk copied out at its size: a fresh 64 KiB
  // buffer per read cost the one-shot process ≈ 16 page faults each (≈ 100 more per ADD).
  let scratch: Uint8Array | undefined;
  /** One read(2): the bytes (empty at end of file), or undefined for EAGAIN. */
  const readOnce = (fd: number): Uint8Array | undefined => {
    scratch ??= new Uint8Array(READ_CHUNK_BYTES);
    for (;;) {
      const n = Number(s.read(fd, scratch, scratch.length));
      if (n >= 0) return scratch.slice(0, n);
      const e = errno();
      if (e === EAGAIN) return undefined;
      if (e !== EINTR) throw new SyscallError('read', e);
    }
  };
  return {
    readAll(fd) {
      const chunks: Uint8Array[] = [];
      for (;;) {
        const chunk = readOnce(fd);
        if (chunk === undefined) wait(fd, POLLIN, -1);
        else if (chunk.length === 0) return chunks.length === 1 ? (chunks[0] as Uint8Array) : concatBytes(chunks);
        else chunks.push(chunk);
      }
    },
    readSome(fd, waitMs) {
      if (!wait(fd, POLLIN, waitMs)) return undefined;
      return readOnce(fd); // undefined: a spurious wake-up
    },
    writeAll(fd, data) {
      for (let off = 0; off < data.length;) {
        const n = Number(s.write(fd, data.subarray(off), data.length - off));
        if (n >= 0) {
          off += n;
          continue;
        }
        const e = errno();
        if (e === EAGAIN) wait(fd, POLLOUT, -1);
        else if (e !== EINTR) throw new SyscallError('write', e);
      }
    },
    connectUnix(path) {
      const address = new Uint8Array(SOCKADDR_UN_BYTES);
      address[0] = AF_UNIX; // sun_family, little-endian u16 on both our targets
      const pathBytes = utf8Bytes(path);
      if (pathBytes.length >= SOCKADDR_UN_BYTES - 2) throw new SyscallError('connect', 36);
      address.set(pathBytes, 2);
      const fd = Number(s.socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
      if (fd < 0) throw new SyscallError('socket', errno());
      for (;;) {
        if (Number(s.connect(fd, address, 2 + pathBytes.length + 1)) === 0) return fd;
        const e = errno();
        if (e === EINTR) continue;
        if (e === EISCONN) return fd; // an interrupted connect that completed meanwhile
        s.close(fd);
        throw new SyscallError('connect', e);
      }
    },
    close(fd) {
      s.close(fd);
    },
    exit(code) {
      s._exit(code);
      throw new Error('_exit returned');
    },
    env,
  };
}
