/**
 * coil's own rtnetlink socket, for the Bun runtime: applies typed requests (rt-request.ts) with
 * the messages rtnetlink.ts builds, and reads links, addresses, routes and rules with the dumps of
 * rtnetlink-dump.ts, in any network namespace. Used in-process by coild on Bun
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
 * `Command failed -:N`), so the executor reports, retries and numbers failures the same way on every path.
 */
import { ptr } from 'bun:ffi';
import { requireLibc } from '../../runtime/bun-libc.js';
import { buildRequest, kernelMessage, parseAcks, RequestError, strerror, type Ack } from './rtnetlink.js';
import { DumpError, readDump, requestMessage, type RawMessage } from './rtnetlink-dump.js';
import { buildFouPortRequest, decodeFouPort, fouDumpBody, getFamilyBody, parseFamilyId } from './genetlink.js';
import { FOU_GENL_NAME, GENL_ID_CTRL, NETLINK_GENERIC, NLMSG_DONE, NLMSG_ERROR, NLMSG_HDRLEN, NLM_F_DUMP_INTR, NLM_F_MULTI } from './rtnetlink-uapi.js';
import type { FouPortEntry, RtBatch, RtBatchResult, RtDumpCall, RtDumpResult, RtFailure, RtRequest } from '../rt-request.js';

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
const NETLINK_GET_STRICT_CHK = 12;
/** A kernel that has not answered a request within this long is not going to. */
const RECV_TIMEOUT_S = 5;

const { calls: libc, errno } = requireLibc(['socket', 'setsockopt', 'send', 'recv', 'open', 'close', 'setns', 'if_nametoindex', 'ioctl']);

function cString(s: string): Uint8Array {
  return new TextEncoder().encode(`${s}\0`);
}

/** A netlink call failed at the socket level (not a kernel refusal of the request). */
class SyscallError extends Error {
  constructor(what: string, readonly errno: number) {
    super(`${what}: ${strerror(errno)}`);
  }
}

/** A netlink socket of `protocol` (NETLINK_ROUTE, or NETLINK_GENERIC for FoU ports) in the calling thread's netns. */
function openNetlink(protocol = NETLINK_ROUTE): number {
  const fd = Number(libc.socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, protocol));
  if (fd < 0) throw new SyscallError('socket(AF_NETLINK)', errno());
  const tv = new BigInt64Array([BigInt(RECV_TIMEOUT_S), 0n]); // struct timeval
  libc.setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, ptr(tv), 16);
  // The kernel's own words for a refusal ("ipv4: Address already assigned"), as ip prints them.
  libc.setsockopt(fd, SOL_NETLINK, NETLINK_EXT_ACK, ptr(new Int32Array([1])), 4);
  // Dumps filtered by the kernel (a route dump by table and device), as ip asks; a kernel before
  // 4.20 refuses the option and dumps everything, which rtnetlink-dump.ts filters itself.
  libc.setsockopt(fd, SOL_NETLINK, NETLINK_GET_STRICT_CHK, ptr(new Int32Array([1])), 4);
  return fd;
}

const OWN_NETNS = Number(libc.open(ptr(cString('/proc/thread-self/ns/net')), O_RDONLY | O_CLOEXEC));
if (OWN_NETNS < 0) throw new SyscallError('open /proc/thread-self/ns/net', errno());
const hostSocket = openNetlink();
const recvBuf = new Uint8Array(65536);
let lastSeq = 0;

/** Sends one netlink message. @throws SyscallError when send(2) fails */
function send(fd: number, request: Uint8Array): void {
  if (Number(libc.send(fd, ptr(request), request.length, 0)) < 0) throw new SyscallError('send', errno());
}

/**
 * Receives the next datagram into `recvBuf` (retried on EINTR).
 * @returns its length in bytes
 * @throws SyscallError when recv(2) fails (EAGAIN after SO_RCVTIMEO)
 */
function receive(fd: number): number {
  for (;;) {
    const n = Number(libc.recv(fd, ptr(recvBuf), recvBuf.length, 0));
    if (n >= 0) return n;
    const e = errno();
    if (e !== 4) throw new SyscallError('recv', e); // 4: EINTR
  }
}

/** Sends request number `seq` and waits for its ACK: the kernel's errno (0 = applied) and message. */
function transact(fd: number, request: Uint8Array, seq: number): Ack {
  send(fd, request);
  for (;;) {
    const n = receive(fd);
    for (const ack of parseAcks(recvBuf, n)) if (ack.seq === seq) return ack;
  }
}

/**
 * A generic netlink socket of the calling thread's netns and the message type of the family `fou`
 * in it, opened on first use by {@link apply}.
 * @throws RequestError (ENOENT) when the kernel has no `fou` family (FoU not loaded or not built)
 */
function openFou(): { fd: number; familyId: number } {
  const fd = openNetlink(NETLINK_GENERIC);
  try {
    return { fd, familyId: fouFamilyId(fd) };
  } catch (err) {
    libc.close(fd);
    throw err;
  }
}

/** Resolves the family `fou` on generic netlink socket `fd`. @throws RequestError (ENOENT) when absent */
function fouFamilyId(fd: number): number {
  let answer: RawMessage[];
  try {
    answer = query(fd, GENL_ID_CTRL, false, getFamilyBody(FOU_GENL_NAME));
  } catch (err) {
    if (!(err instanceof DumpError)) throw err;
    // What `ip fou` fails with on a kernel without FoU ("Error talking to the kernel"), and why.
    throw new RequestError(`Error talking to the kernel: generic netlink family "${FOU_GENL_NAME}": ${strerror(err.errno)}`, err.errno);
  }
  const id = answer.length > 0 ? parseFamilyId(answer[0]!.payload) : undefined;
  if (id === undefined) throw new RequestError(`Error talking to the kernel: no id for generic netlink family "${FOU_GENL_NAME}"`, 2);
  return id;
}

/** Applies `ops` with `fd`, in the netns the calling thread is in now (for if_nametoindex). */
function apply(fd: number, ops: readonly RtRequest[], force: boolean): { stderr: string; failures: RtFailure[] } {
  const opened: number[] = [];
  let fou: { fd: number; familyId: number } | undefined;
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
        const op = ops[i]!;
        let ack: Ack;
        if (op.kind === 'fou-port') {
          fou ??= openFou();
          let message: Uint8Array;
          try {
            message = buildFouPortRequest(op, seq, fou.familyId);
          } catch (err) {
            throw err instanceof RangeError ? new RequestError(err.message, 22) : err;
          }
          ack = transact(fou.fd, message, seq);
        } else {
          ack = transact(fd, buildRequest(op, seq, ctx), seq);
        }
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
    if (fou !== undefined) libc.close(fou.fd);
  }
  return { stderr, failures };
}

/**
 * Runs `fn` with a netlink socket of the netns at `path` (the host socket when undefined).
 * @returns fn's answer, or the failure `ip -n` would print when the netns cannot be entered
 */
function inNetns<T>(path: string | undefined, fn: (fd: number) => T): T | { stderr: string; errno: number } {
  if (path === undefined) return fn(hostSocket);
  const nsFd = Number(libc.open(ptr(cString(path)), O_RDONLY | O_CLOEXEC));
  if (nsFd < 0) {
    // iproute2's wording for `ip -n`; "No such file or directory" classifies as ENOENT.
    const e = errno();
    return { stderr: `Cannot open network namespace "${path}": ${strerror(e)}\n`, errno: e };
  }
  let fd = -1;
  try {
    if (Number(libc.setns(nsFd, CLONE_NEWNET)) !== 0) {
      const e = errno();
      return { stderr: `setting the network namespace "${path}" failed: ${strerror(e)}\n`, errno: e };
    }
    fd = openNetlink();
    return fn(fd);
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

/** Applies one batch, in its netns if it names one. */
function runBatch(req: RtBatch): RtBatchResult {
  const r = inNetns(req.netns, (fd) => apply(fd, req.requests, req.force));
  if ('errno' in r) return { stderr: r.stderr, exitCode: 255, failures: [] };
  return { ...r, exitCode: r.failures.length > 0 ? 1 : 0 };
}

const SIOCGIFNAME = 0x8910;
const ifreq = new Uint8Array(40); // struct ifreq: ifr_name[16], then ifr_ifindex
const ifreqView = new DataView(ifreq.buffer);

/**
 * Name of link `index` in the netns of socket `fd` (SIOCGIFNAME on the netlink socket itself:
 * if_indextoname would open and close a socket per call, ≈ 3× the cost over a route dump's links).
 */
function ifnameOf(fd: number, index: number): string | undefined {
  ifreq.fill(0);
  ifreqView.setInt32(16, index, true);
  if (Number(libc.ioctl(fd, SIOCGIFNAME, ptr(ifreq))) !== 0) return undefined;
  const nul = ifreq.indexOf(0);
  return new TextDecoder().decode(ifreq.subarray(0, nul < 0 ? 16 : nul));
}

/**
 * Sends one read request and collects its answer: every message up to NLMSG_DONE for a dump, the
 * one reply otherwise. @throws DumpError for NLMSG_ERROR, or EINTR when the kernel marked the dump
 * interrupted (the table changed meanwhile: the caller reads again, as ip's callers do)
 */
function query(fd: number, type: number, isDump: boolean, body: Uint8Array): RawMessage[] {
  const seq = (lastSeq = (lastSeq + 1) >>> 0);
  send(fd, requestMessage(type, isDump, body, seq));
  const out: RawMessage[] = [];
  let isInterrupted = false;
  for (;;) {
    const n = receive(fd);
    const view = new DataView(recvBuf.buffer, 0, n);
    for (let off = 0; off + NLMSG_HDRLEN <= n;) {
      const len = view.getUint32(off, true);
      if (len < NLMSG_HDRLEN || off + len > n) throw new SyscallError('recv: truncated netlink message', 74); // EBADMSG
      const mtype = view.getUint16(off + 4, true);
      const flags = view.getUint16(off + 6, true);
      if (view.getUint32(off + 8, true) === seq) {
        if (flags & NLM_F_DUMP_INTR) isInterrupted = true;
        if (mtype === NLMSG_ERROR || (mtype === NLMSG_DONE && len >= NLMSG_HDRLEN + 4 && view.getInt32(off + NLMSG_HDRLEN, true) < 0)) {
          const e = Math.abs(view.getInt32(off + NLMSG_HDRLEN, true));
          if (e !== 0) throw new DumpError(kernelMessage(e), e);
        }
        if (mtype === NLMSG_DONE || mtype === NLMSG_ERROR) return finish();
        // Copied: recvBuf is reused by the next recv.
        out.push({ type: mtype, payload: recvBuf.slice(off + NLMSG_HDRLEN, off + len) });
        if (!isDump && !(flags & NLM_F_MULTI)) return finish();
      }
      off += (len + 3) & ~3;
    }
  }
  function finish(): RawMessage[] {
    if (isInterrupted) throw new DumpError('Dump was interrupted and may be inconsistent.', 4);
    return out;
  }
}

/** The FoU receive ports of the calling thread's netns (a FOU_CMD_GET dump). @throws DumpError */
function readFouPorts(): FouPortEntry[] {
  let fou: { fd: number; familyId: number };
  try {
    fou = openFou();
  } catch (err) {
    if (err instanceof RequestError) throw new DumpError(err.message, err.errno);
    throw err;
  }
  try {
    return query(fou.fd, fou.familyId, true, fouDumpBody()).filter((m) => m.type === fou.familyId).map((m) => decodeFouPort(m.payload));
  } finally {
    libc.close(fou.fd);
  }
}

/** Reads one dump, in its netns if it names one. */
function runDump(call: RtDumpCall): RtDumpResult {
  try {
    const d = call.dump;
    const r = inNetns(call.netns, (fd) => (d.kind === 'fou-ports' ? readFouPorts() : readDump(d, {
      query: (type, isDump, body) => query(fd, type, isDump, body),
      ifname: (index) => ifnameOf(fd, index),
    })));
    if ('errno' in r && 'stderr' in r) return { failure: { errno: r.errno, message: r.stderr.trim() }, exitCode: 255 };
    return { entries: r as unknown[] };
  } catch (err) {
    if (err instanceof DumpError) return { failure: { errno: err.errno, message: err.message }, exitCode: 1 };
    if (err instanceof SyscallError) return { failure: { errno: err.errno, message: `rtnetlink: ${err.message}` }, exitCode: 1 };
    throw err;
  }
}

/**
 * Reads the dumps in order, each in its netns; synchronous, like {@link applyBatches}.
 * @returns one result per call
 */
export function readDumps(list: readonly RtDumpCall[]): RtDumpResult[] {
  return list.map((call) => {
    try {
      return runDump(call);
    } catch (err) {
      return { failure: { errno: 22, message: `rtnetlink: ${err instanceof Error ? err.message : String(err)}` }, exitCode: 1 };
    }
  });
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

