/**
 * The iproute2 side of coil's kernel I/O: `ip` and helper programs started as processes with
 * argument arrays (never a shell), on the host or inside a network namespace. It runs text batches
 * (`ip -batch`), `ip -json` reads and programs (sysctl, nft, iptables); and it is the fallback
 * backend of the NetlinkExecutor (netlink-executor.ts): typed requests written as `ip -batch`
 * lines and dumps as `ip -json` commands (rt-format.ts), when no rtnetlink backend is usable, and
 * the oracle the rtnetlink path is tested against.
 *
 * Why processes: a Node process cannot setns() safely (it is multi-threaded) and no npm netlink
 * package can work inside another netns (docs/design.md#netlink-from-node). One `ip -batch -`
 * process per netns costs ≈ 3–5 ms here, against ≈ 30 ms for one process per command
 * (docs/performance.md#pod-wiring); the rtnetlink backends apply the same batch in ≈ 0.3 ms.
 *
 * Concurrency: an IpRunner holds only its options; any number of calls may run in parallel.
 */
import { spawn } from 'node:child_process';
import { NetlinkError, classifyMessage, errnoClass, isTransientErrno, type NetlinkErrno } from '../netlink-error.js';
import { batchFamily, formatDump, formatRequest } from './rt-format.js';
import { DEFAULT_RETRY_POLICY, retryDelayMs, sleep, type ApplyStep, type RetryPolicy, type SequenceOutcome } from '../apply-step.js';
import type { RtDump, RtRequest } from '../rt-request.js';

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

/** How one `ip` run (or an rtnetlink backend's batch, in the same shape) ended. */
export interface RunResult extends ProcessOutput {
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

  constructor(options: IpRunnerOptions = {}) {
    this.spawner = options.spawner ?? spawnProcess;
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
    return this.runLines(lines, options);
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
        await this.runLines(st.lines, st.options ?? {});
      } catch (error) {
        return { ok: false, step: i, error };
      }
    }
    return { ok: true };
  }

  /**
   * Applies typed requests in `options.netns` as their `ip -batch` lines (rt-format.ts), with
   * {@link batch}'s semantics, retries and errors: the iproute2 backend of the NetlinkExecutor.
   * @throws NetlinkError for the first permanent failure (`failedRequest` = 1-based request index)
   * @throws TypeError when a request's field would not fit an `ip -batch` token
   */
  async apply(requests: readonly RtRequest[], options: { netns?: string | undefined; onError?: 'stop' | 'continue' } = {}): Promise<void> {
    const family = batchFamily(requests);
    await this.runLines(requests.map(formatRequest), { ...applyOptions(options), ...(family !== undefined ? { family } : {}) });
  }

  /**
   * Applies the steps as {@link apply} would, in order, and stops at the first that fails.
   * @returns `{ ok: false, step, error }` for the first failed step
   */
  async applySequence(steps: readonly ApplyStep[]): Promise<SequenceOutcome> {
    for (const [i, st] of steps.entries()) {
      try {
        await this.apply(st.requests, st.options);
      } catch (error) {
        return { ok: false, step: i, error };
      }
    }
    return { ok: true };
  }

  /**
   * Reads `d` with its `ip -json` command (rt-format.ts): the iproute2 backend of the
   * NetlinkExecutor's reads, and the oracle of the rtnetlink ones.
   * @returns the entries `ip -json` prints; `[]` for the routes of a table never created
   * @throws NetlinkError (errno ENODEV for a `dev` that does not exist)
   */
  async dump<T>(d: RtDump, target: { netns?: string | undefined } = {}): Promise<T[]> {
    const { args, family } = formatDump(d);
    try {
      return await this.json<T[]>(args, { ...(target.netns !== undefined ? { netns: target.netns } : {}), ...(family !== undefined ? { family } : {}) });
    } catch (err) {
      // A table nobody added a route to does not exist yet: it has no routes.
      if (d.kind === 'routes' && err instanceof NetlinkError && /FIB table does not exist/.test(err.stderr)) return [];
      throw err;
    }
  }

  /** {@link batch}: the lines in `ip -batch` processes, with its retries. */
  private async runLines(lines: readonly BatchLine[], options: BatchOptions): Promise<string> {
    const text = lines.map(formatBatchLine);
    const isContinue = options.onError === 'continue';
    const tail = batchTail(options);
    let pending = text.map((_, i) => i + 1);
    for (let attempt = 1; ; attempt++) {
      const res = await this.spawnIp(options, tail, pending.map((n) => text[n - 1]).join('\n') + '\n');
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

  /**
   * Runs `ip [-4|-6] <tail>` in `target.netns`. A path in /run/netns (or /var/run/netns) runs as
   * `ip -n <name>`, one exec instead of nsenter's two; iproute2 resolves the name in its own
   * compiled-in directory, so if that fails to open the netns the call is re-run through nsenter.
   */
  private async spawnIp(target: RunTarget, tail: readonly string[], input: string | undefined): Promise<RunResult> {
    const family = target.family === undefined ? [] : [`-${target.family}`];
    if (target.netns === undefined) return this.spawn([this.ipPath, ...family, ...tail], input);
    const viaNsenter = [this.nsenterPath, `--net=${target.netns}`, '--', this.ipPath, ...family, ...tail];
    const name = RUN_NETNS.exec(target.netns)?.[1];
    if (name === undefined) return this.spawn(viaNsenter, input);
    const res = await this.spawn([this.ipPath, '-n', name, ...family, ...tail], input);
    return res.exitCode !== 0 && /Cannot open network namespace/.test(res.stderr) ? this.spawn(viaNsenter, input) : res;
  }

  private async withRetry(run: () => Promise<RunResult>): Promise<RunResult> {
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

  private batchError(argv: readonly string[], text: readonly string[], res: RunResult, failures: LineFailure[]): NetlinkError {
    return batchError(argv, text, res, failures);
  }

  private delayMs(attempt: number): number {
    return retryDelayMs(this.retry, attempt);
  }

  private async spawn(argv: readonly string[], input: string | undefined): Promise<RunResult> {
    const r = await this.spawner(argv, input ?? '', this.timeoutMs);
    const stderr = r.stderr + (r.signal ? `\nkilled by ${r.signal} (timeout ${this.timeoutMs} ms?)` : '');
    return { argv, stdout: r.stdout, stderr, exitCode: r.spawnError ? null : r.exitCode, ...(r.spawnError ? { spawnError: r.spawnError } : {}) };
  }
}

/**
 * The NetlinkError of a failed batch: the first failed line's command and every failure's message.
 * @param text the batch's lines as text (numbered from 1 by `failures`)
 */
export function batchError(argv: readonly string[], text: readonly string[], res: RunResult, failures: LineFailure[]): NetlinkError {
  const head = argv.slice(0, argv.indexOf('-batch')).join(' ');
  const first = failures[0];
  // Without a "Command failed" line ip exited on its own (argument parse error): line unknown.
  const command = first ? `${head} ${text[first.line - 1] ?? ''}` : `${head} -batch (${text.length} lines)`;
  const detail = first ? failures.map((f) => `line ${f.line}: ${f.message}`).join('; ') : describe(res);
  return new NetlinkError(`${command}: ${detail}`, {
    argv, command, stderr: res.stderr, exitCode: res.exitCode,
    ...(first ? { failedRequest: first.line } : {}),
    errno: first?.errno ?? classifyMessage(res.stderr),
    ...(res.spawnError ? { cause: res.spawnError } : {}),
  });
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

function describe(res: RunResult): string {
  if (res.spawnError) return `cannot run: ${res.spawnError.message}`;
  return res.stderr.trim() || `exit status ${res.exitCode}`;
}

/** `ip`'s arguments for a batch on stdin: `[-force] -batch -` (rtnetlink messages name the same). */
export function batchTail(options: BatchOptions): string[] {
  return [...(options.onError === 'continue' ? ['-force'] : []), '-batch', '-'];
}

/** {@link BatchOptions} of an {@link ApplyStep}'s options. */
function applyOptions(o: ApplyStep['options'] = {}): BatchOptions {
  return { ...(o.netns !== undefined ? { netns: o.netns } : {}), ...(o.onError ? { onError: o.onError } : {}) };
}
