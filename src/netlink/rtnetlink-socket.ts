/**
 * coil's own rtnetlink socket, for the Bun runtime: applies typed requests (rt-request.ts) with
 * the messages rtnetlink.ts builds, in any network namespace. Used in-process by coild on Bun
 * (rtnetlink-inprocess.ts) and by the netlink agent process that serves coild on Node
 * (netlink-agent-main.ts). Never imported under Node (it needs `bun:ffi`).
 *
 * Why: a pod ADD is two batches of requests (host side, pod side); two `ip` processes cost
 * ≈ 10 ms of the ADD here, the requests themselves ≈ 0.3 ms. Node cannot open a netlink socket,
 * and no npm package can enter another netns (docs/design.md#netlink-from-node); Bun calls libc
 * through `bun:ffi`. A socket belongs to the netns it was created in, so for a pod the calling
 * thread enters the netns with setns(2), creates the socket, applies the requests and returns to
 * its own netns before doing anything else (vishvananda/netlink's NewHandleAt does the same; Bun's
 * other threads never create sockets while this synchronous code runs).
 *
 * Results are shaped as `ip [-force] -batch -` answers (each failed request's kernel message and
 * `Command failed -:N`), so the runner reports, retries and numbers failures the same way on every path.
 */
import { dlopen, FFIType, ptr, read } from 'bun:ffi';
import { buildRequest, kernelMessage, parseAcks, RequestError, strerror, type Ack } from './rtnetlink.js';
import type { RtBatch, RtBatchResult, RtFailure, RtRequest } from './rt-request.js';

const AF_NETLINK = 16;
const SOCK_RAW = 3;
const SOCK_CLOEXEC = 0o2000000;
const NETLINK_ROUTE = 0;
const O_RDONLY = 0;
const O_CLOEXEC = 0o2000000;
const CLONE_NEWNET = 0x40000000;
const SOL_SOCKET = 1;
const SO_RCVTIMEO = 20;
const SOL_NETLINK = 270;
const NETLINK_EXT_ACK = 11;
/** A kernel that has not answered a request within this long is not going to. */
const RECV_TIMEOUT_S = 5;

const libc = dlopen('libc.so.6', {
  socket: { args: [FFIType.i32, FFIType.i32, FFIType.i32], returns: FFIType.i32 },
  setsockopt: { args: [FFIType.i32, FFIType.i32, FFIType.i32, FFIType.ptr, FFIType.i32], returns: FFIType.i32 },
  send: { args: [FFIType.i32, FFIType.ptr, FFIType.u64, FFIType.i32], returns: FFIType.i64 },
  recv: { args: [FFIType.i32, FFIType.ptr, FFIType.u64, FFIType.i32], returns: FFIType.i64 },
  open: { args: [FFIType.ptr, FFIType.i32], returns: FFIType.i32 },
  close: { args: [FFIType.i32], returns: FFIType.i32 },
  setns: { args: [FFIType.i32, FFIType.i32], returns: FFIType.i32 },
  if_nametoindex: { args: [FFIType.ptr], returns: FFIType.i32 },
  read: { args: [FFIType.i32, FFIType.ptr, FFIType.u64], returns: FFIType.i64 },
  write: { args: [FFIType.i32, FFIType.ptr, FFIType.u64], returns: FFIType.i64 },
  __errno_location: { args: [], returns: FFIType.ptr },
}).symbols;

function errno(): number {
  return read.i32(libc.__errno_location() as never);
}

function cString(s: string): Uint8Array {
  return new TextEncoder().encode(`${s}\0`);
}

/** A netlink call failed at the socket level (not a kernel refusal of the request). */
class SyscallError extends Error {
  constructor(what: string, readonly errno: number) {
    super(`${what}: ${strerror(errno)}`);
  }
}

function openNetlink(): number {
  const fd = Number(libc.socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
  if (fd < 0) throw new SyscallError('socket(AF_NETLINK)', errno());
  const tv = new BigInt64Array([BigInt(RECV_TIMEOUT_S), 0n]); // struct timeval
  libc.setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, ptr(tv), 16);
  // The kernel's own words for a refusal ("ipv4: Address already assigned"), as ip prints them.
  libc.setsockopt(fd, SOL_NETLINK, NETLINK_EXT_ACK, ptr(new Int32Array([1])), 4);
  return fd;
}

const OWN_NETNS = Number(libc.open(ptr(cString('/proc/thread-self/ns/net')), O_RDONLY | O_CLOEXEC));
if (OWN_NETNS < 0) throw new SyscallError('open /proc/thread-self/ns/net', errno());
const hostSocket = openNetlink();
const recvBuf = new Uint8Array(65536);
let lastSeq = 0;

/** Sends request number `seq` and waits for its ACK: the kernel's errno (0 = applied) and message. */
function transact(fd: number, request: Uint8Array, seq: number): Ack {
  if (Number(libc.send(fd, ptr(request), request.length, 0)) < 0) throw new SyscallError('send', errno());
  for (;;) {
    const n = Number(libc.recv(fd, ptr(recvBuf), recvBuf.length, 0));
    if (n < 0) {
      const e = errno();
      if (e === 4) continue; // EINTR
      throw new SyscallError('recv', e);
    }
    for (const ack of parseAcks(recvBuf, n)) if (ack.seq === seq) return ack;
  }
}

/** Applies `ops` with `fd`, in the netns the calling thread is in now (for if_nametoindex). */
function apply(fd: number, ops: readonly RtRequest[], force: boolean): { stderr: string; failures: RtFailure[] } {
  const opened: number[] = [];
  const ctx = {
    ifindex: (name: string) => Number(libc.if_nametoindex(ptr(cString(name)))),
    netnsFd: (path: string) => {
      const nsFd = Number(libc.open(ptr(cString(path)), O_RDONLY | O_CLOEXEC));
      if (nsFd < 0) {
        const e = errno();
        throw new RequestError(`Cannot open network namespace "${path}": ${strerror(e)}`, e);
      }
      opened.push(nsFd);
      return nsFd;
    },
  };
  let stderr = '';
  const failures: RtFailure[] = [];
  try {
    for (let i = 0; i < ops.length; i++) {
      let failure: RtFailure | undefined;
      try {
        const seq = (lastSeq = (lastSeq + 1) >>> 0);
        const ack = transact(fd, buildRequest(ops[i]!, seq, ctx), seq);
        if (ack.errno !== 0) failure = { line: i + 1, errno: ack.errno, message: kernelMessage(ack.errno, ack.message) };
      } catch (err) {
        if (!(err instanceof RequestError)) throw err;
        failure = { line: i + 1, errno: err.errno, message: err.message };
      }
      if (failure === undefined) continue;
      stderr += `${failure.message}\nCommand failed -:${failure.line}\n`;
      failures.push(failure);
      if (!force) break;
    }
  } finally {
    for (const nsFd of opened) libc.close(nsFd);
  }
  return { stderr, failures };
}

/** Applies one batch, in its netns if it names one. */
function runBatch(req: RtBatch): RtBatchResult {
  const ops = req.requests;
  if (req.netns === undefined) {
    const r = apply(hostSocket, ops, req.force);
    return { ...r, exitCode: r.failures.length > 0 ? 1 : 0 };
  }
  const nsFd = Number(libc.open(ptr(cString(req.netns)), O_RDONLY | O_CLOEXEC));
  if (nsFd < 0) {
    // iproute2's wording for `ip -n`; "No such file or directory" classifies as ENOENT.
    return { stderr: `Cannot open network namespace "${req.netns}": ${strerror(errno())}\n`, exitCode: 255, failures: [] };
  }
  let fd = -1;
  try {
    if (Number(libc.setns(nsFd, CLONE_NEWNET)) !== 0) {
      return { stderr: `setting the network namespace "${req.netns}" failed: ${strerror(errno())}\n`, exitCode: 255, failures: [] };
    }
    fd = openNetlink();
    const r = apply(fd, ops, req.force);
    return { ...r, exitCode: r.failures.length > 0 ? 1 : 0 };
  } finally {
    if (fd >= 0) libc.close(fd);
    libc.close(nsFd);
    // Staying in a pod's netns would send every later host request there: never continue.
    if (Number(libc.setns(OWN_NETNS, CLONE_NEWNET)) !== 0) {
      process.stderr.write(`rtnetlink: cannot return to its own netns (errno ${errno()}); exiting\n`);
      process.exit(70);
    }
  }
}

/**
 * Applies the batches in order, up to and including the first that fails, each in its netns.
 * Synchronous: the calling thread enters a pod's netns and is back in its own before it returns,
 * so no other JavaScript of this process runs meanwhile. Exits the process (code 70) if it cannot
 * return to its own netns, since every later request would go to the pod's.
 */
export function applyBatches(list: readonly RtBatch[]): RtBatchResult[] {
  const results: RtBatchResult[] = [];
  for (const batch of list) {
    let r: RtBatchResult;
    try {
      r = runBatch(batch);
    } catch (err) {
      r = { stderr: `rtnetlink: ${err instanceof Error ? err.message : String(err)}\n`, exitCode: 1, failures: [] };
    }
    results.push(r);
    if (r.exitCode !== 0) break;
  }
  return results;
}

