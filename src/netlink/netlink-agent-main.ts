/**
 * The netlink agent: a long-lived process that applies coild's `ip -batch` lines with rtnetlink
 * requests of its own, in any network namespace, instead of starting `ip` for every batch.
 *
 * Why a separate process on Bun: a pod ADD needs two batches (host side, pod side); two `ip`
 * processes cost ≈ 10 ms of the ADD here, the requests themselves ≈ 0.3 ms. Node cannot open a
 * netlink socket, and no npm package can enter another netns (npm-ecosystem.md §7). Bun can call
 * libc through `bun:ffi`, so this program opens NETLINK_ROUTE sockets itself. It runs on the Bun
 * runtime embedded in the `coil` executable (`BUN_BE_BUN=1 coil netlink-agent.js`), so the image
 * ships no second runtime. A socket belongs to the netns it was created in, so for a pod the
 * agent enters the netns with setns(2) on its main thread, creates the socket, applies the lines
 * and returns to its own netns before doing anything else (vishvananda/netlink's NewHandleAt
 * does the same; Bun's other threads never touch the network).
 *
 * Protocol (NetlinkAgent in netlink-agent.ts is the other side): one JSON request per line on
 * stdin `{id, batches: [{netns?, lines, force}, …]}`, one reply per line on stdout `{id,
 * results: [{stdout, stderr, exitCode}, …]}`. The batches run in order and the first that fails
 * is the last run, so a pod's host side and pod side cost one round trip. Each result is shaped
 * as `ip [-force] -batch -` would answer, so IpRunner parses both alike: each failed line as the
 * kernel's message and `Command failed -:N`. A batch with a line outside rtnetlink.ts's subset is
 * refused whole with exit code 2 and AGENT_REFUSAL, before any of it runs; IpRunner then runs it with
 * `ip` (it checks only the kinds of lines first). Exits when stdin closes; if it cannot return to its own
 * netns it exits at once (coild starts a new one).
 */
import { dlopen, FFIType, ptr, read } from 'bun:ffi';
import { AGENT_REFUSAL, buildRequest, kernelMessage, parseAcks, RequestError, strerror, translateBatch, type Ack, type RtOp } from './rtnetlink.js';
import type { BatchLine } from './ip-runner.js';

interface Batch { netns?: string; lines: BatchLine[]; force: boolean }
interface Request { id: number; batches: Batch[] }
interface Result { stdout: string; stderr: string; exitCode: number }
interface Reply { id: number; results: Result[] }

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

// The `coil` executable starts JavaScriptCore with its tier-up thresholds raised 100× (its
// one-shot runs interpret rather than compile; hack/build-cni.sh), and this agent runs inside it.
// A long-lived agent wants normal tiering: without it, a hot loop here ran ≈ 2.8× slower after
// warm-up (Bun 1.4.5, 2026-11-22).
(globalThis as { Bun?: { unsafe?: { setJITPolicy?: (scale: number) => void } } }).Bun?.unsafe?.setJITPolicy?.(1);

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
function apply(fd: number, ops: readonly RtOp[], force: boolean): { stderr: string; failed: boolean } {
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
  let failed = false;
  try {
    for (let i = 0; i < ops.length; i++) {
      let message: string | undefined;
      try {
        const seq = (lastSeq = (lastSeq + 1) >>> 0);
        const ack = transact(fd, buildRequest(ops[i]!, seq, ctx), seq);
        if (ack.errno !== 0) message = kernelMessage(ack.errno, ack.message);
      } catch (err) {
        if (!(err instanceof RequestError)) throw err;
        message = err.message;
      }
      if (message === undefined) continue;
      stderr += `${message}\nCommand failed -:${i + 1}\n`;
      failed = true;
      if (!force) break;
    }
  } finally {
    for (const nsFd of opened) libc.close(nsFd);
  }
  return { stderr, failed };
}

/** Applies one batch, in its netns if it names one. */
function runBatch(req: Batch): Result {
  const ops = translateBatch(req.lines);
  if (ops === undefined) return { stdout: '', stderr: `${AGENT_REFUSAL}\n`, exitCode: 2 };
  if (req.netns === undefined) {
    const r = apply(hostSocket, ops, req.force);
    return { stdout: '', stderr: r.stderr, exitCode: r.failed ? 1 : 0 };
  }
  const nsFd = Number(libc.open(ptr(cString(req.netns)), O_RDONLY | O_CLOEXEC));
  if (nsFd < 0) {
    // iproute2's wording for `ip -n`; "No such file or directory" classifies as ENOENT.
    return { stdout: '', stderr: `Cannot open network namespace "${req.netns}": ${strerror(errno())}\n`, exitCode: 255 };
  }
  let fd = -1;
  try {
    if (Number(libc.setns(nsFd, CLONE_NEWNET)) !== 0) {
      return { stdout: '', stderr: `setting the network namespace "${req.netns}" failed: ${strerror(errno())}\n`, exitCode: 255 };
    }
    fd = openNetlink();
    const r = apply(fd, ops, req.force);
    return { stdout: '', stderr: r.stderr, exitCode: r.failed ? 1 : 0 };
  } finally {
    if (fd >= 0) libc.close(fd);
    libc.close(nsFd);
    // Staying in a pod's netns would send every later host request there: never continue.
    if (Number(libc.setns(OWN_NETNS, CLONE_NEWNET)) !== 0) {
      process.stderr.write(`netlink-agent: cannot return to its own netns (errno ${errno()}); exiting\n`);
      process.exit(70);
    }
  }
}

/** Runs the batches in order, up to and including the first that fails. */
function handle(req: Request): Reply {
  const results: Result[] = [];
  for (const batch of req.batches) {
    let r: Result;
    try {
      r = runBatch(batch);
    } catch (err) {
      r = { stdout: '', stderr: `netlink-agent: ${err instanceof Error ? err.message : String(err)}\n`, exitCode: 1 };
    }
    results.push(r);
    if (r.exitCode !== 0) break;
  }
  return { id: req.id, results };
}

/** Answers one request line. */
function serve(line: string): string {
  let req: Request;
  try {
    req = JSON.parse(line) as Request;
  } catch {
    process.stderr.write('netlink-agent: unparsable request line\n');
    return '';
  }
  let reply: Reply;
  try {
    reply = handle(req);
  } catch (err) { // a request of the wrong shape
    reply = { id: req.id, results: [{ stdout: '', stderr: `netlink-agent: ${err instanceof Error ? err.message : String(err)}\n`, exitCode: 1 }] };
  }
  return `${JSON.stringify(reply)}\n`;
}

function writeAll(fd: number, data: Uint8Array): void {
  for (let off = 0; off < data.length;) {
    const n = Number(libc.write(fd, ptr(data.subarray(off)), data.length - off));
    if (n >= 0) off += n;
    else if (errno() !== 4) process.exit(0); // EINTR aside, coild is gone
  }
}

// Blocking reads and writes on the pipes rather than readline and process.stdout: the agent has
// nothing else to do between requests, and skipping Bun's event loop saves ≈ 0.05–0.1 ms of each
// round trip (a JSON echo over the same pipes: p50 0.24–0.29 → 0.16–0.20 ms).
let pending = Buffer.alloc(0);
const chunk = Buffer.allocUnsafe(65536);
for (;;) {
  const n = Number(libc.read(0, ptr(chunk), chunk.length));
  if (n === 0) process.exit(0); // stdin closed: coild stopped the agent or is gone
  if (n < 0) {
    if (errno() === 4) continue; // EINTR
    process.exit(0);
  }
  pending = pending.length === 0 ? Buffer.from(chunk.subarray(0, n)) : Buffer.concat([pending, chunk.subarray(0, n)]);
  let nl: number;
  while ((nl = pending.indexOf(10)) >= 0) {
    const out = serve(pending.toString('utf8', 0, nl));
    pending = pending.subarray(nl + 1);
    if (out !== '') writeAll(1, Buffer.from(out));
  }
}
