/**
 * The one error type of the netlink layer, and the classification of iproute2's messages.
 *
 * iproute2 reports failures only as text on stderr (`RTNETLINK answers: File exists`,
 * `Cannot find device "x"`), so the kernel errno is recovered here, once, from those messages
 * instead of every caller matching strings of its own.
 */

/**
 * Kernel error classes recognised in iproute2 output. `EEXIST`: the object is already there;
 * `ENODEV`: no such link; `ESRCH`: no such route or rule; `ENOENT`: no such file/table/netns;
 * `EOPNOTSUPP`: a link kind this kernel lacks (`Unknown device type`: no ipip/ip6tnl module);
 * `EBUSY`, `EAGAIN`, `ENOBUFS`, `EINTR` (interrupted dump): transient.
 */
export type NetlinkErrno = 'EEXIST' | 'ENODEV' | 'ESRCH' | 'ENOENT' | 'EOPNOTSUPP' | 'EBUSY' | 'EAGAIN' | 'ENOBUFS' | 'EINTR';

const ERRNO_PATTERNS: ReadonlyArray<readonly [RegExp, NetlinkErrno]> = [
  [/File exists/i, 'EEXIST'],
  [/Cannot find device|Device ".*" does not exist|No such device/i, 'ENODEV'],
  [/No such process/i, 'ESRCH'],
  [/No such file or directory|FIB table does not exist/i, 'ENOENT'],
  [/Unknown device type|Operation not supported/i, 'EOPNOTSUPP'],
  [/Device or resource busy/i, 'EBUSY'],
  [/Resource temporarily unavailable/i, 'EAGAIN'],
  [/No buffer space available/i, 'ENOBUFS'],
  [/Dump was interrupted/i, 'EINTR'],
];

const TRANSIENT: ReadonlySet<NetlinkErrno> = new Set(['EBUSY', 'EAGAIN', 'ENOBUFS', 'EINTR']);

/** Linux errno numbers of the classes (asm-generic/errno-base.h, errno.h). */
const ERRNO_NUMBERS: ReadonlyMap<number, NetlinkErrno> = new Map([
  [17, 'EEXIST'], [19, 'ENODEV'], [3, 'ESRCH'], [2, 'ENOENT'], [95, 'EOPNOTSUPP'], [16, 'EBUSY'], [11, 'EAGAIN'], [105, 'ENOBUFS'], [4, 'EINTR'],
]);

/**
 * Maps a kernel errno number (an rtnetlink NLMSG_ERROR, a failed syscall) to its class: what the
 * rtnetlink backends report, so no message text is matched for them.
 * @param errno positive errno, e.g. 17
 * @returns undefined for an errno outside the classes (treated as permanent)
 */
export function errnoClass(errno: number): NetlinkErrno | undefined {
  return ERRNO_NUMBERS.get(errno);
}

/**
 * Maps an iproute2 message to its errno class.
 * @param message one failure's stderr text
 * @returns undefined when the message matches no known class (treated as permanent)
 */
export function classifyMessage(message: string): NetlinkErrno | undefined {
  for (const [pattern, errno] of ERRNO_PATTERNS) {
    if (pattern.test(message)) return errno;
  }
  return undefined;
}

/** True for errno classes worth retrying: the kernel did not apply the request and may on retry. */
export function isTransientErrno(errno: NetlinkErrno | undefined): boolean {
  return errno !== undefined && TRANSIENT.has(errno);
}

/** What {@link NetlinkError} is built from. */
export interface NetlinkErrorDetails {
  /** argv of the process that failed, e.g. `['ip', '-n', 'pod', '-batch', '-']`. */
  argv: readonly string[];
  /** The failing command as one readable line (a batch line prefixed with the argv head). */
  command: string;
  /** Complete stderr of the process ('' when it could not start). */
  stderr: string;
  /** Exit status; null when killed by a signal or never started. */
  exitCode: number | null;
  /** 1-based index of the request that failed (a batch line on the iproute2 path); undefined for a single command. */
  failedRequest?: number;
  /** Errno class of the failure, if recognised. */
  errno?: NetlinkErrno;
  /** Underlying cause; defaults to an Error holding `stderr`. */
  cause?: unknown;
}

/**
 * A failed iproute2 (or nsenter/sysctl/unshare) invocation. `cause` holds stderr as an Error
 * (or the spawn error when the program could not start), so logging `err.cause` shows the kernel's
 * own words.
 */
export class NetlinkError extends Error {
  /** argv of the failing process. */
  readonly argv: readonly string[];
  /** The failing command as one readable line. */
  readonly command: string;
  /** Complete stderr of the process. */
  readonly stderr: string;
  /** Exit status (null: signal, timeout or spawn failure). */
  readonly exitCode: number | null;
  /** 1-based index of the failing request of a batch (its line on the iproute2 path), if any. */
  readonly failedRequest: number | undefined;
  /** Recognised errno class, if any. */
  readonly errno: NetlinkErrno | undefined;

  constructor(message: string, d: NetlinkErrorDetails) {
    super(message, { cause: d.cause ?? new Error(d.stderr.trim() || '(no stderr)') });
    this.name = 'NetlinkError';
    this.argv = d.argv;
    this.command = d.command;
    this.stderr = d.stderr;
    this.exitCode = d.exitCode;
    this.failedRequest = d.failedRequest;
    this.errno = d.errno;
  }

  /** True when retrying the same command may succeed (EBUSY, EAGAIN, ENOBUFS, interrupted dump). */
  get isTransient(): boolean {
    return isTransientErrno(this.errno);
  }
}

/** True when `err` is a {@link NetlinkError} of the given errno class(es). */
export function isNetlinkErrno(err: unknown, ...errnos: NetlinkErrno[]): err is NetlinkError {
  return err instanceof NetlinkError && err.errno !== undefined && errnos.includes(err.errno);
}
