/**
 * `coil`, the CNI executable kubelet/containerd run once per pod attachment. It reads the
 * `CNI_*` environment and the netconf on stdin, makes one gRPC call to coild over its UNIX
 * socket, and prints the result in the requested `cniVersion` or a CNI error (exit 1).
 * coild compensates for a failed ADD and treats DEL of unknown state as success; the shim only
 * reports what coild says.
 *
 * Startup is the cost here, so this program imports nothing but `node:` modules and its own
 * files (hack/build-cni.sh has the measurements). It exports nothing either: the entry module's
 * exports cost the executable a CommonJS export object built at every start.
 *
 * @see CNI spec SPEC.md "CNI operations"; ../shared/reference/coil-behaviour.md §6
 */
import { CNI_METHODS, decodeAddResponse, encodeCniArgs } from './cnirpc.js';
import { unaryCall } from './grpc-client.js';
import { parseRequest, peekCniVersion, SUPPORTED_VERSIONS } from './parse.js';
import { ErrorCode, PluginError } from './plugin-error.js';
import { asResult, convertResult, decodeResult } from './result.js';
import { readStdin, writeFd } from './stdio.js';

/** One gRPC call per invocation; Coil's shim waits 1 minute too (coil-behaviour.md §6). */
const DEFAULT_TIMEOUT_MS = 60_000;

/** The version this build speaks best: VERSION output and errors that precede the netconf. */
const LATEST_VERSION = '1.1.0';

/** What one invocation reads and writes: injectable so that `run` has no ambient state. */
interface ShimIo {
  env: Readonly<Record<string, string | undefined>>;
  stdin: Buffer;
  /** Receives the complete stdout text (one JSON document and a newline, or nothing). */
  writeStdout: (text: string) => Promise<void>;
  writeStderr: (text: string) => Promise<void>;
  /** Deadline of the gRPC call. Default {@link DEFAULT_TIMEOUT_MS}. */
  timeoutMs?: number;
}

/**
 * Runs one CNI invocation.
 * @returns the process exit code: 0 on success, 1 after printing a CNI error.
 */
async function run(io: ShimIo): Promise<number> {
  if ((io.env.CNI_COMMAND ?? '') === '') {
    // skel's behaviour for a human at a shell: say what this is instead of a JSON error.
    await io.writeStderr(`coil: CNI plugin of Coil (TypeScript)\nCNI protocol versions supported: ${SUPPORTED_VERSIONS.join(', ')}\n`);
    return 0;
  }
  try {
    const req = parseRequest(io.env, io.stdin);
    if (req.command === 'VERSION') {
      await io.writeStdout(`${JSON.stringify({ cniVersion: LATEST_VERSION, supportedVersions: SUPPORTED_VERSIONS })}\n`);
      return 0;
    }
    const response = await unaryCall({
      socketPath: req.socketPath,
      method: CNI_METHODS[req.command],
      request: () => encodeCniArgs(req.args),
      timeoutMs: io.timeoutMs ?? DEFAULT_TIMEOUT_MS,
    });
    if (req.command === 'ADD') {
      // Coil re-emits a chained plugin's prevResult (egress-only mode returns an empty result).
      const result = req.prevResult ? asResult(req.prevResult) : decodeResult(decodeAddResponse(response));
      await io.writeStdout(`${JSON.stringify(convertResult(result, req.cniVersion))}\n`);
    }
    return 0;
  } catch (err) {
    let e = err instanceof PluginError ? err : new PluginError(ErrorCode.INTERNAL, err instanceof Error ? err.message : String(err));
    if (io.env.CNI_COMMAND === 'STATUS' && e.code === ErrorCode.TRY_AGAIN_LATER) {
      // STATUS has its own vocabulary (CNI 1.1 "STATUS"): an unreachable coild means ADD cannot work.
      e = new PluginError(ErrorCode.PLUGIN_NOT_AVAILABLE, e.message, e.details, { cause: e });
    }
    await io.writeStdout(`${JSON.stringify(e.toCniJson(peekCniVersion(io.stdin)))}\n`);
    return 1;
  }
}

// A promise chain rather than top-level await, so the bundle may be CommonJS (Bun --bytecode).
void readStdin()
  .then((stdin) => run({ env: process.env, stdin, writeStdout: (text) => writeFd(1, text), writeStderr: (text) => writeFd(2, text) }))
  .then((code) => {
    // Output is written: exit now rather than after the runtime has closed the socket and timers
    // (kubelet waits for the exit, not for the output).
    process.exit(code);
  });
