/**
 * `coil`, the CNI executable kubelet/containerd run once per pod attachment. It reads the
 * `CNI_*` environment and the netconf on stdin, makes one gRPC call to coild over its UNIX
 * socket, and prints the result in the requested `cniVersion` or a CNI error (exit 1).
 * coild compensates for a failed ADD and treats DEL of unknown state as success; the shim only
 * reports what coild says.
 *
 * Startup is the cost here, so this program imports nothing but `node:` modules and its own
 * files (docs/performance.md#the-cni-executables-start has the measurements). It exports nothing
 * either: the entry module's exports cost the executable a CommonJS export object built at every
 * start.
 *
 * @see CNI spec SPEC.md "CNI operations"; docs/compatibility.md#the-cni-executable
 */
import { CNI_METHODS, decodeAddResponse, encodeCniArgs } from './cnirpc.js';
import { unaryCall, unaryCallSync, type UnaryCallOptions } from './grpc-client.js';
import { type Libc, libc } from './libc.js';
import { utf8Bytes } from './bytes.js';
import { type CallCommand, parseRequest, peekCniVersion, SUPPORTED_VERSIONS, type ShimRequest } from './parse.js';
import { ErrorCode, PluginError } from './plugin-error.js';
import { asResult, convertResult, decodeResult } from './result.js';
import { readStdin, writeFd } from './stdio.js';

/**
 * One gRPC call per invocation; Coil's shim waits 1 minute too
 * (docs/compatibility.md#the-cni-executable).
 */
const DEFAULT_TIMEOUT_MS = 60_000;

/** The version this build speaks best: VERSION output and errors that precede the netconf. */
const LATEST_VERSION = '1.1.0';

/** What an invocation prints and its exit code: 0 on success, 1 after printing a CNI error. */
interface Outcome {
  stdout?: string;
  stderr?: string;
  code: number;
}

type Env = Readonly<Record<string, string | undefined>>;
/** A request that becomes a gRPC call (all but VERSION). */
type CallRequest = Extract<ShimRequest, { command: CallCommand }>;

/**
 * The part of an invocation before the call to coild: the usage text for a human at a shell,
 * VERSION, or the parsed request (or the CNI error of a bad one).
 */
function plan(env: Env, stdin: Uint8Array): Outcome | CallRequest {
  if ((env.CNI_COMMAND ?? '') === '') {
    // skel's behaviour for a human at a shell: say what this is instead of a JSON error.
    return { stderr: `coil: CNI plugin of Coil (TypeScript)\nCNI protocol versions supported: ${SUPPORTED_VERSIONS.join(', ')}\n`, code: 0 };
  }
  try {
    const req = parseRequest(env, stdin);
    if (req.command === 'VERSION') {
      return { stdout: `${JSON.stringify({ cniVersion: LATEST_VERSION, supportedVersions: SUPPORTED_VERSIONS })}\n`, code: 0 };
    }
    return req;
  } catch (err) {
    return failure(err, env, stdin);
  }
}

/** The gRPC call a request makes. */
function callOf(req: CallRequest): UnaryCallOptions {
  return { socketPath: req.socketPath, method: CNI_METHODS[req.command], request: () => encodeCniArgs(req.args), timeoutMs: DEFAULT_TIMEOUT_MS };
}

/** What coild's answer means for the runtime: ADD prints the result, the others nothing. */
function answer(req: CallRequest, response: Uint8Array, env: Env, stdin: Uint8Array): Outcome {
  try {
    if (req.command !== 'ADD') return { code: 0 };
    // Coil re-emits a chained plugin's prevResult (egress-only mode returns an empty result).
    const result = req.prevResult ? asResult(req.prevResult) : decodeResult(decodeAddResponse(response));
    return { stdout: `${JSON.stringify(convertResult(result, req.cniVersion))}\n`, code: 0 };
  } catch (err) {
    return failure(err, env, stdin);
  }
}

/** The CNI error JSON for `err`, in the netconf's cniVersion. */
function failure(err: unknown, env: Env, stdin: Uint8Array): Outcome {
  let e = err instanceof PluginError ? err : new PluginError(ErrorCode.INTERNAL, err instanceof Error ? err.message : String(err));
  if (env.CNI_COMMAND === 'STATUS' && e.code === ErrorCode.TRY_AGAIN_LATER) {
    // STATUS has its own vocabulary (CNI 1.1 "STATUS"): an unreachable coild means ADD cannot work.
    e = new PluginError(ErrorCode.PLUGIN_NOT_AVAILABLE, e.message, e.details, { cause: e });
  }
  return { stdout: `${JSON.stringify(e.toCniJson(peekCniVersion(stdin)))}\n`, code: 1 };
}

/**
 * The Bun executable's invocation: blocking libc calls from stdin to exit, with no promise,
 * timer or event-loop turn (each costs a one-shot process tens of µs;
 * docs/performance.md#the-cni-executables-start).
 */
function runWithLibc(c: Libc): never {
  const env = c.env;
  let stdin: Uint8Array;
  try {
    stdin = c.readAll(0);
  } catch {
    stdin = new Uint8Array(0); // a closed or absent stdin reads as empty (VERSION needs none)
  }
  const planned = plan(env, stdin);
  let out: Outcome;
  if ('code' in planned) out = planned;
  else {
    try {
      out = answer(planned, unaryCallSync(c, callOf(planned)), env, stdin);
    } catch (err) {
      out = failure(err, env, stdin);
    }
  }
  try {
    if (out.stdout !== undefined) c.writeAll(1, utf8Bytes(out.stdout));
    if (out.stderr !== undefined) c.writeAll(2, utf8Bytes(out.stderr));
  } catch {
    // Nobody reads the output any more (EPIPE…): nothing is left to tell.
  }
  // kubelet waits for the exit, not for the runtime's teardown. Neither `process.env` nor
  // `process.exit`: naming `process` makes the runtime build it on first use (≈ 0.03–0.1 ms here).
  c.exit(out.code);
}

/** The same invocation through the runtime's event loop (Bun without FFI, or Node). */
async function runWithEventLoop(): Promise<never> {
  const env = process.env;
  const stdin = await readStdin();
  const planned = plan(env, stdin);
  let out: Outcome;
  if ('code' in planned) out = planned;
  else {
    try {
      out = answer(planned, await unaryCall(callOf(planned)), env, stdin);
    } catch (err) {
      out = failure(err, env, stdin);
    }
  }
  if (out.stdout !== undefined) await writeFd(1, out.stdout);
  if (out.stderr !== undefined) await writeFd(2, out.stderr);
  process.exit(out.code);
}

// No top-level await, so the bundle may be CommonJS (Bun --bytecode).
const c = libc();
if (c) runWithLibc(c);
else void runWithEventLoop();
