/**
 * The one way coil talks to the kernel: iproute2 processes, started with argument arrays (never a
 * shell), on the host or inside a network namespace — and, for the typed rtnetlink requests a
 * pod's wiring is made of (rt-request.ts), an rtnetlink backend (coild's own socket on Bun, the
 * netlink agent on Node) or, without one, the same requests written as `ip -batch` lines.
 *
 * Why processes: a Node process cannot setns() safely (it is multi-threaded) and no npm netlink
 * package can work inside another netns (docs/design.md#netlink-from-node). One `ip -batch -`
 * process per netns costs ≈ 3–5 ms here, against ≈ 30 ms for one process per command
 * (docs/performance.md#pod-wiring); the agent applies the same batch in ≈ 0.3 ms.
 *
 * Concurrency: an IpRunner holds only its options; any number of calls may run in parallel.
 */
import { spawn } from 'node:child_process';
import { NetlinkError, classifyMessage, errnoClass, isTransientErrno, type NetlinkErrno } from './netlink-error.js';
import { formatRequest } from './rt-format.js';
import type { RtBackend, RtBatchResult, RtRequest } from './rt-request.js';

/** One batch line as argv tokens without the leading `ip`, e.g. `['link', 'del', 'veth0']`. */
export type BatchLine = readonly string[];

/** Where and how to run: `netns` is a netns file path (a CNI_NETNS value); undefined = own netns. */
export interface RunTarget {
  /** Path of a network namespace file (`/run/netns/x`, `/proc/<pid>/ns/net`, ...). */
  netns?: string;
  /** Address family for `ip -4` / `ip -6`; iproute2 defaults to IPv4 for route/rule reads. */
  family?: 4 | 6;
}

/** Options of {@link IpRunner.batch}. */
export interface BatchOptions extends RunTarget {
  /**
   * `'stop'` (default): stop at the first failing line, as plain `ip -batch` does, so lines after
   * a failure never run. `'continue'`: `ip -force -batch`, run every line and report all failures.
   */
  onError?: 'stop' | 'continue';
}

/** One step of {@link IpRunner.batchSequence}: lines for `ip -batch` and where to run them. */
export interface BatchStep {
  lines: readonly BatchLine[];
  options?: BatchOptions;
}

/** One step of {@link IpRunner.applySequence}: typed requests and where to apply them. */
export interface ApplyStep {
  requests: readonly RtRequest[];
  options?: { netns?: string | undefined; onError?: 'stop' | 'continue' };
}

/** How {@link IpRunner.batchSequence} ended: every step applied, or the first that failed. */
export type SequenceOutcome = { ok: true } | { ok: false; step: number; error: unknown };

/** Backoff for transient kernel failures (EBUSY, EAGAIN, ENOBUFS, interrupted dumps). */
export interface RetryPolicy {
  /** Total tries including the first; 1 disables retrying. */
  attempts: number;
  /** Delay before the second try; doubled for each further try. */
  initialDelayMs: number;
  /** Upper bound of one delay. */
  maxDelayMs: number;
}

/**
 * Default retry: 5 tries from 1 ms doubling, like Coil's dump retry (5 tries from 200 µs), rounded
 * up to Node's timer resolution. @see docs/compatibility.md#pod-network-setup (last point)
 */
export const DEFAULT_RETRY_POLICY: Readonly<RetryPolicy> = { attempts: 5, initialDelayMs: 1, maxDelayMs: 100 };

/** Constructor options of {@link IpRunner}. */
export interface IpRunnerOptions {
  /** iproute2 `ip` binary. Default `'ip'` (looked up in PATH). */
  ipPath?: string;
  /** util-linux `nsenter` binary, used for netns paths outside /run/netns. Default `'nsenter'`. */
  nsenterPath?: string;
  /** Kill a process still running after this long. Default 10 000 ms. */
  timeoutMs?: number;
  /** Retry policy for transient failures. Default {@link DEFAULT_RETRY_POLICY}. */
  retry?: RetryPolicy;
  /**
   * Starts one process and collects its output. Default: `child_process.spawn` in this process.
   * A large process (coild, ≈ 150 MB RSS) pays for fork() in proportion to its memory: measured
   * here 14–16 ms per spawn against 3–7 ms from a bare Node process under the same load, so
   * coild hands its spawns to a small helper process (node-agent/podnet/spawn-helper.ts).
   */
  spawner?: ProcessSpawner;
  /**
   * Applies typed requests ({@link IpRunner.apply}) through rtnetlink (≈ 0.3 ms against ≈ 5 ms
   * per `ip` batch here). Without one, or when it is not usable in this build or runtime, the
   * requests run as `ip -batch` lines (rt-format.ts). Text batches, reads and programs always run
   * as processes.
   */
  rtnetlink?: RtBackend;
}

/** What one spawned process produced; `spawnError` when it could not be started. */
export interface SpawnedProcess extends ProcessOutput {
  exitCode: number | null;
  /** Set when a signal ended the process (e.g. the timeout's SIGTERM). */
  signal?: string | null;
  spawnError?: NodeJS.ErrnoException;
}

/** Runs `argv` (no shell) with `input` on stdin, killing it after `timeoutMs`; never rejects. */
export type ProcessSpawner = (argv: readonly string[], input: string, timeoutMs: number) => Promise<SpawnedProcess>;

/** Output of one finished process. */
export interface ProcessOutput {
  stdout: string;
  stderr: string;
}

interface Exit extends ProcessOutput {
  /** argv of the process that produced this result. */
  argv: readonly string[];
  exitCode: number | null;
  spawnError?: NodeJS.ErrnoException;
  /** An rtnetlink backend's typed failures (numbered within the batch it was given). */
  failures?: LineFailure[];
}

/** One failed line of an `ip -batch` run. */
export interface LineFailure {
  /** 1-based line number within the batch as run. */
  line: number;
  /** The kernel's/iproute2's message for that line. */
  message: string;
  errno: NetlinkErrno | undefined;
}

const UNSAFE_TOKEN = /[\s"'\\#]/;
const RUN_NETNS = /^\/(?:var\/)?run\/netns\/([^/]+)$/;

/**
 * Runs iproute2 and helper programs with one retry policy and one error type.
 * @see docs/design.md#netlink-from-node, docs/design.md#all-kernel-io-in-one-layer
 */
export class IpRunner {
  /** The `ip` binary this runner starts. */
  readonly ipPath: string;
  /** The `nsenter` binary this runner starts. */
  readonly nsenterPath: string;
  private readonly timeoutMs: number;
  private readonly retry: RetryPolicy;
  private readonly spawner: ProcessSpawner;
  private readonly rtnetlink: RtBackend | undefined;

  constructor(options: IpRunnerOptions = {}) {
    this.spawner = options.spawner ?? spawnProcess;
    this.rtnetlink = options.rtnetlink;
    this.ipPath = options.ipPath ?? 'ip';
    this.nsenterPath = options.nsenterPath ?? 'nsenter';
    this.timeoutMs = options.timeoutMs ?? 10_000;
    this.retry = options.retry ?? DEFAULT_RETRY_POLICY;
  }

  /**
   * Runs `lines` in one `ip -batch -` process. With `onError: 'stop'`, a transient failure at
   * line k re-runs lines k… (lines before k were applied, ip stops at k); with `'continue'`, the
   * transiently failed lines are re-run.
   * @returns stdout of the successful process
   * @throws NetlinkError for the first permanent failure, or when retries are exhausted
   * @throws TypeError when a token is empty or contains whitespace, quotes, `\` or `#`, which
   *   `ip -batch` would split or treat as a comment
   */
  async batch(lines: readonly BatchLine[], options: BatchOptions = {}): Promise<string> {
    return this.batchFrom(lines, options, undefined);
  }

  /**
   * Runs the steps' batches one after another, each exactly as {@link batch} would (retries
   * included), and stops at the first that fails.
   * @returns `{ ok: false, step, error }` with {@link batch}'s error for the first failed step
   *   (a TypeError for an unsafe token, see {@link batch}: then nothing has run)
   */
  async batchSequence(steps: readonly BatchStep[]): Promise<SequenceOutcome> {
    for (const [i, st] of steps.entries()) {
      try {
        st.lines.forEach(formatBatchLine);
      } catch (error) {
        return { ok: false, step: i, error };
      }
    }
    for (const [i, st] of steps.entries()) {
      try {
        await this.batchFrom(st.lines, st.options ?? {}, undefined);
      } catch (error) {
        return { ok: false, step: i, error };
      }
    }
    return { ok: true };
  }

  /**
   * Applies typed requests in `options.netns`, with {@link batch}'s semantics (stop at the first
   * failure, or `onError: 'continue'`), retries and errors: through the rtnetlink backend when it
   * is usable, else as the `ip -batch` lines of rt-format.ts.
   * @throws NetlinkError for the first permanent failure (`failedLine` = 1-based request index)
   * @throws TypeError when a request's field would not fit an `ip -batch` token (fallback only)
   */
  async apply(requests: readonly RtRequest[], options: { netns?: string | undefined; onError?: 'stop' | 'continue' } = {}): Promise<void> {
    const outcome = await this.applySequence([{ requests, options }]);
    if (!outcome.ok) throw outcome.error;
  }

  /**
   * Applies the steps in order and stops at the first that fails. With an rtnetlink backend all
   * steps go to it in one call (a pod's host side and pod side: one round trip to the agent); a
   * step that failed there is then retried or reported by {@link batch}'s rules, and the steps
   * after it run one by one.
   * @returns `{ ok: false, step, error }` for the first failed step
   */
  async applySequence(steps: readonly ApplyStep[]): Promise<SequenceOutcome> {
    const backend = this.rtnetlink?.isUsable ? this.rtnetlink : undefined;
    const opts = (st: ApplyStep): BatchOptions => ({ ...(st.options?.netns !== undefined ? { netns: st.options.netns } : {}), ...(st.options?.onError ? { onError: st.options.onError } : {}) });
    let shipped: (Exit | undefined)[] = [];
    if (backend) {
      const results = await backend.batches(steps.map((st) => ({
        requests: st.requests, force: st.options?.onError === 'continue', ...(st.options?.netns !== undefined ? { netns: st.options.netns } : {}),
      })));
      shipped = results === undefined ? [] : results.map((r, i) => this.backendExit(opts(steps[i]!), r));
    }
    for (const [i, st] of steps.entries()) {
      try {
        const lines = st.requests.map(formatRequest);
        if (backend) await this.applyFrom(backend, st, lines, opts(st), shipped[i]);
        else await this.batchFrom(lines, opts(st), undefined);
      } catch (error) {
        return { ok: false, step: i, error };
      }
    }
    return { ok: true };
  }

  /**
   * {@link batchFrom} for the rtnetlink backend: the first attempt may have run already
   * (`firstRun`); retries go to the backend again with the pending requests. `lines` (the same
   * requests as iproute2 text) only name the failed request in messages.
   */
  private async applyFrom(backend: RtBackend, st: ApplyStep, lines: readonly BatchLine[], options: BatchOptions, firstRun: Exit | undefined): Promise<void> {
    const isContinue = options.onError === 'continue';
    const text = lines.map((l) => l.join(' '));
    let pending = st.requests.map((_, i) => i + 1);
    for (let attempt = 1; ; attempt++) {
      let res = attempt === 1 ? firstRun : undefined;
      if (res === undefined) {
        const batch = { requests: pending.map((n) => st.requests[n - 1]!), force: isContinue, ...(options.netns !== undefined ? { netns: options.netns } : {}) };
        const r = await backend.batches([batch]);
        res = this.backendExit(options, r?.[0]);
      }
      if (res.exitCode === 0) return;
      const failures = (res.failures ?? []).map((f) => ({ ...f, line: pending[f.line - 1] ?? f.line }));
      const first = failures[0];
      const isRetryable = res.spawnError !== undefined || (failures.length > 0 && (isContinue
        ? failures.every((f) => isTransientErrno(f.errno))
        : isTransientErrno(first?.errno)));
      if (!isRetryable || attempt >= this.retry.attempts) throw this.batchError(res.argv, text, res, failures);
      // A backend that died answered nothing: every pending request is tried again.
      if (res.spawnError === undefined) pending = isContinue ? failures.map((f) => f.line) : pending.slice(pending.indexOf(first!.line));
      await sleep(this.delayMs(attempt));
    }
  }

  /** A backend's answer in the shape of an `ip` run (its argv names the path, for messages). */
  private backendExit(options: BatchOptions, r: RtBatchResult | undefined): Exit {
    const argv = ['rtnetlink', ...(options.netns !== undefined ? ['--netns', options.netns] : []), ...batchTail(options)];
    if (r === undefined) {
      return { argv, stdout: '', stderr: 'rtnetlink backend exited', exitCode: null, spawnError: Object.assign(new Error('rtnetlink backend exited'), { code: 'EAGAIN' }) };
    }
    const failures = r.failures.map((f) => ({ line: f.line, message: f.message, errno: errnoClass(f.errno) }));
    return { argv, stdout: '', stderr: r.stderr, exitCode: r.exitCode, failures };
  }

  /** {@link batch}, whose first attempt may have run already (`firstRun`, in the agent). */
  private async batchFrom(lines: readonly BatchLine[], options: BatchOptions, firstRun: Exit | undefined): Promise<string> {
    const text = lines.map(formatBatchLine);
    const isContinue = options.onError === 'continue';
    const tail = batchTail(options);
    let pending = text.map((_, i) => i + 1);
    for (let attempt = 1; ; attempt++) {
      const res = attempt === 1 && firstRun !== undefined
        ? firstRun
        : await this.runBatch(options, tail, pending.map((n) => lines[n - 1]!), pending.map((n) => text[n - 1]).join('\n') + '\n');
      if (res.exitCode === 0) return res.stdout;
      const failures = parseBatchFailures(res.stderr).map((f) => ({ ...f, line: pending[f.line - 1] ?? f.line }));
      const first = failures[0];
      const isRetryable = res.spawnError === undefined && failures.length > 0 && (isContinue
        ? failures.every((f) => isTransientErrno(f.errno))
        : isTransientErrno(first?.errno));
      if (!isRetryable || attempt >= this.retry.attempts) {
        throw this.batchError(res.argv, text, res, failures);
      }
      pending = isContinue ? failures.map((f) => f.line) : pending.slice(pending.indexOf(first!.line));
      await sleep(this.delayMs(attempt));
    }
  }

  /**
   * Runs `ip -json <args>` and parses its output, retrying transient failures (reads are
   * idempotent).
   * @param args e.g. `['route', 'show', 'table', '116']`
   * @returns the parsed JSON (an array for every `show`/`get` command); `[]` for empty output
   * @throws NetlinkError on failure (e.g. errno ENODEV for `link show dev <missing>`)
   */
  async json<T>(args: readonly string[], target: RunTarget = {}): Promise<T> {
    const { stdout, argv } = await this.withRetry(() => this.spawnIp(target, ['-json', ...args], undefined));
    const trimmed = stdout.trim();
    if (trimmed === '') return [] as T;
    try {
      return JSON.parse(trimmed) as T;
    } catch (err) {
      throw new NetlinkError(`unparsable output of ${argv.join(' ')}`, {
        argv, command: argv.join(' '), stderr: '', exitCode: 0, cause: err,
      });
    }
  }

  /**
   * Runs any program (sysctl, unshare, ...) with argument array `argv`, inside `netns` through
   * nsenter when given, retrying transient failures.
   * @param input written to stdin, if given
   * @throws NetlinkError when the program cannot start, times out or exits non-zero
   */
  async exec(argv: readonly string[], options: { netns?: string; input?: string } = {}): Promise<ProcessOutput> {
    const full = options.netns === undefined ? [...argv] : [this.nsenterPath, `--net=${options.netns}`, '--', ...argv];
    const { stdout, stderr } = await this.withRetry(() => this.spawn(full, options.input));
    return { stdout, stderr };
  }

  /** One `ip -batch` run of `lines` (`input` is their text). */
  private async runBatch(options: BatchOptions, tail: readonly string[], _lines: readonly BatchLine[], input: string): Promise<Exit> {
    return this.spawnIp(options, tail, input);
  }

  /**
   * Runs `ip [-4|-6] <tail>` in `target.netns`. A path in /run/netns (or /var/run/netns) runs as
   * `ip -n <name>`, one exec instead of nsenter's two; iproute2 resolves the name in its own
   * compiled-in directory, so if that fails to open the netns the call is re-run through nsenter.
   */
  private async spawnIp(target: RunTarget, tail: readonly string[], input: string | undefined): Promise<Exit> {
    const family = target.family === undefined ? [] : [`-${target.family}`];
    if (target.netns === undefined) return this.spawn([this.ipPath, ...family, ...tail], input);
    const viaNsenter = [this.nsenterPath, `--net=${target.netns}`, '--', this.ipPath, ...family, ...tail];
    const name = RUN_NETNS.exec(target.netns)?.[1];
    if (name === undefined) return this.spawn(viaNsenter, input);
    const res = await this.spawn([this.ipPath, '-n', name, ...family, ...tail], input);
    return res.exitCode !== 0 && /Cannot open network namespace/.test(res.stderr) ? this.spawn(viaNsenter, input) : res;
  }

  private async withRetry(run: () => Promise<Exit>): Promise<Exit> {
    for (let attempt = 1; ; attempt++) {
      const res = await run();
      const argv = res.argv;
      // Some iproute2 versions exit 0 after an interrupted (inconsistent) dump; only stderr tells.
      const isInterrupted = /Dump was interrupted/.test(res.stderr);
      if (res.exitCode === 0 && !isInterrupted) return res;
      const errno = res.spawnError?.code === 'EAGAIN' ? 'EAGAIN' : classifyMessage(res.stderr);
      if (!isTransientErrno(errno) || attempt >= this.retry.attempts) {
        throw new NetlinkError(`${argv.join(' ')}: ${describe(res)}`, {
          argv, command: argv.join(' '), stderr: res.stderr, exitCode: res.exitCode, errno,
          ...(res.spawnError ? { cause: res.spawnError } : {}),
        });
      }
      await sleep(this.delayMs(attempt));
    }
  }

  private batchError(argv: readonly string[], text: readonly string[], res: Exit, failures: LineFailure[]): NetlinkError {
    const head = argv.slice(0, argv.indexOf('-batch')).join(' ');
    const first = failures[0];
    // Without a "Command failed" line ip exited on its own (argument parse error): line unknown.
    const command = first ? `${head} ${text[first.line - 1] ?? ''}` : `${head} -batch (${text.length} lines)`;
    const detail = first ? failures.map((f) => `line ${f.line}: ${f.message}`).join('; ') : describe(res);
    return new NetlinkError(`${command}: ${detail}`, {
      argv, command, stderr: res.stderr, exitCode: res.exitCode,
      ...(first ? { failedLine: first.line } : {}),
      errno: first?.errno ?? classifyMessage(res.stderr),
      ...(res.spawnError ? { cause: res.spawnError } : {}),
    });
  }

  private delayMs(attempt: number): number {
    return Math.min(this.retry.maxDelayMs, this.retry.initialDelayMs * 2 ** (attempt - 1));
  }

  private async spawn(argv: readonly string[], input: string | undefined): Promise<Exit> {
    const r = await this.spawner(argv, input ?? '', this.timeoutMs);
    const stderr = r.stderr + (r.signal ? `\nkilled by ${r.signal} (timeout ${this.timeoutMs} ms?)` : '');
    return { argv, stdout: r.stdout, stderr, exitCode: r.spawnError ? null : r.exitCode, ...(r.spawnError ? { spawnError: r.spawnError } : {}) };
  }
}

/**
 * The default {@link ProcessSpawner}: `child_process.spawn` in this process. `signal` kills the
 * process (SIGKILL) when it aborts: the spawn helper's way of taking its children down with coild.
 */
export function spawnProcess(argv: readonly string[], input: string, timeoutMs: number, signal?: AbortSignal): Promise<SpawnedProcess> {
  return new Promise((resolve) => {
    const [file, ...args] = argv;
    const child = spawn(file ?? '', args, { stdio: ['pipe', 'pipe', 'pipe'] });
    const kill = (): void => void child.kill('SIGKILL');
    if (signal?.aborted) kill();
    else signal?.addEventListener('abort', kill, { once: true });
    child.once('close', () => signal?.removeEventListener('abort', kill));
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let spawnError: NodeJS.ErrnoException | undefined;
    // Own timer rather than spawn's `timeout`, whose timer outlives a child that never started.
    const timer = setTimeout(() => child.kill('SIGTERM'), timeoutMs);
    child.stdout.on('data', (b: Buffer) => out.push(b));
    child.stderr.on('data', (b: Buffer) => err.push(b));
    child.stdin.on('error', () => { /* EPIPE when the process exits early; its exit status tells */ });
    child.on('error', (e: NodeJS.ErrnoException) => { spawnError = e; });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ stdout: Buffer.concat(out).toString(), stderr: Buffer.concat(err).toString(), exitCode: spawnError ? null : code, signal, ...(spawnError ? { spawnError } : {}) });
    });
    child.stdin.end(input);
  });
}

/**
 * Serialises one batch line. iproute2 splits batch lines on whitespace and honours quotes and
 * `#` comments, so such characters are refused rather than escaped.
 * @throws TypeError on an empty or unsafe token
 */
export function formatBatchLine(tokens: BatchLine): string {
  if (tokens.length === 0) throw new TypeError('empty ip batch line');
  for (const t of tokens) {
    if (t === '' || UNSAFE_TOKEN.test(t)) throw new TypeError(`unsafe ip batch token ${JSON.stringify(t)} in "${tokens.join(' ')}"`);
  }
  return tokens.join(' ');
}

/** Splits `ip -batch` stderr into per-line failures: each message ends with "Command failed -:N". */
export function parseBatchFailures(stderr: string): LineFailure[] {
  const failures: LineFailure[] = [];
  let messages: string[] = [];
  for (const raw of stderr.split('\n')) {
    const m = /^Command failed -:(\d+)$/.exec(raw.trim());
    if (m?.[1] !== undefined) {
      const message = messages.join(' ').trim();
      failures.push({ line: Number(m[1]), message, errno: classifyMessage(message) });
      messages = [];
    } else if (raw.trim() !== '') {
      messages.push(raw.trim());
    }
  }
  return failures;
}

function describe(res: Exit): string {
  if (res.spawnError) return `cannot run: ${res.spawnError.message}`;
  return res.stderr.trim() || `exit status ${res.exitCode}`;
}

/** `ip`'s arguments for a batch on stdin: `[-force] -batch -`. */
function batchTail(options: BatchOptions): string[] {
  return [...(options.onError === 'continue' ? ['-force'] : []), '-batch', '-'];
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

