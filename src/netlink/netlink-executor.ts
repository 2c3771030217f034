/**
 * NetlinkExecutor: where coild's typed kernel calls go — the requests of a pod's wiring
 * (rt-request.ts) and the reads of links, addresses, routes and rules (dumps) that pod wiring,
 * start-up recovery, GC and route export make. Each goes through an rtnetlink backend when one is
 * usable (coild's own socket on Bun, rtnetlink-inprocess.ts; the netlink agent on Node,
 * netlink-agent.ts), else through iproute2 (ip-runner.ts: the same requests as `ip -batch` lines,
 * the same dumps as `ip -json` commands). Both answer in one shape, so callers, errors and retries
 * do not depend on the path.
 *
 * Why: one `ip` process costs ≈ 3–5 ms here (≈ 14–16 ms from a large process without the spawn
 * helper); an rtnetlink batch or dump ≈ 0.1–0.3 ms (docs/performance.md#pod-wiring,
 * docs/performance.md#recovery-and-gc-reads).
 *
 * Concurrency: holds only its options; any number of calls may run in parallel.
 * @see docs/design.md#netlink-from-node, docs/design.md#all-kernel-io-in-one-layer
 */
import { DEFAULT_RETRY_POLICY, retryDelayMs, sleep, type ApplyStep, type RetryPolicy, type SequenceOutcome } from './apply-step.js';
import { IpRunner, batchError, batchTail, type BatchOptions, type LineFailure, type RunResult } from './iproute2/ip-runner.js';
import { NetlinkError, errnoClass, isTransientErrno } from './netlink-error.js';
import { formatDump, formatRequest } from './iproute2/rt-format.js';
import type { RtBackend, RtBatchResult, RtDump, RtDumpResult, RtRequest } from './rt-request.js';

/** Constructor options of {@link NetlinkExecutor}. */
export interface NetlinkExecutorOptions {
  /**
   * The iproute2 backend: used when no rtnetlink backend is usable, and for what only processes
   * do (text batches, programs). Default: a new IpRunner.
   */
  ip?: IpRunner;
  /**
   * Applies requests and reads dumps through rtnetlink. Without one, or when it is not usable in
   * this build or runtime, everything goes to {@link ip}; a backend without `dumps` leaves reads
   * to it.
   */
  rtnetlink?: RtBackend;
  /** Retry policy for transient failures on the rtnetlink path. Default {@link DEFAULT_RETRY_POLICY}. */
  retry?: RetryPolicy;
}

/** Target of a request or read: a netns file path; undefined = the executor's own netns. */
export interface NetnsTarget {
  netns?: string | undefined;
}

/** Applies typed requests and reads dumps, through rtnetlink or iproute2. */
export class NetlinkExecutor {
  /** The iproute2 backend (also what callers use for programs: sysctl, nft, iptables). */
  readonly ip: IpRunner;
  private readonly rtnetlink: RtBackend | undefined;
  private readonly retry: RetryPolicy;

  constructor(options: NetlinkExecutorOptions = {}) {
    this.ip = options.ip ?? new IpRunner();
    this.rtnetlink = options.rtnetlink;
    this.retry = options.retry ?? DEFAULT_RETRY_POLICY;
  }

  /** The rtnetlink backend, when it is usable now. */
  private backend(): RtBackend | undefined {
    return this.rtnetlink?.isUsable ? this.rtnetlink : undefined;
  }

  /**
   * Applies typed requests in `options.netns`, stopping at the first failure (or, with
   * `onError: 'continue'`, applying every one and reporting all), with retries of transient
   * failures.
   * @throws NetlinkError for the first permanent failure (`failedRequest` = 1-based request index)
   * @throws TypeError when a request's field would not fit an `ip -batch` token (iproute2 path only)
   */
  async apply(requests: readonly RtRequest[], options: { netns?: string | undefined; onError?: 'stop' | 'continue' } = {}): Promise<void> {
    const outcome = await this.applySequence([{ requests, options }]);
    if (!outcome.ok) throw outcome.error;
  }

  /**
   * Applies the steps in order and stops at the first that fails. With an rtnetlink backend all
   * steps go to it in one call (a pod's host side and pod side: one round trip to the agent); a
   * step that failed there is then retried or reported by {@link apply}'s rules, and the steps
   * after it run one by one.
   * @returns `{ ok: false, step, error }` for the first failed step
   */
  async applySequence(steps: readonly ApplyStep[]): Promise<SequenceOutcome> {
    const backend = this.backend();
    if (!backend) return this.ip.applySequence(steps);
    const results = await backend.batches(steps.map((st) => ({
      requests: st.requests, force: st.options?.onError === 'continue', ...(st.options?.netns !== undefined ? { netns: st.options.netns } : {}),
    })));
    const shipped = results === undefined ? [] : results.map((r, i) => backendRun(stepOptions(steps[i]!), r));
    for (const [i, st] of steps.entries()) {
      try {
        await this.applyFrom(backend, st, shipped[i]);
      } catch (error) {
        return { ok: false, step: i, error };
      }
    }
    return { ok: true };
  }

  /**
   * Reads `d` in `target.netns`: a dump through rtnetlink, else its `ip -json` command. Transient
   * failures (an interrupted dump, EBUSY, a backend that died) are retried.
   * @returns the entries in `ip -json`'s shapes (see rt-request.ts's RtDump for which)
   * @throws NetlinkError (errno ENODEV for a `dev` that does not exist, ENOENT for a missing netns)
   */
  async dump<T>(d: RtDump, target: NetnsTarget = {}): Promise<T[]> {
    const backend = this.backend();
    if (!backend?.dumps) return this.ip.dump<T>(d, target.netns !== undefined ? { netns: target.netns } : {});
    const { args, family } = formatDump(d);
    const argv = ['rtnetlink', ...(target.netns !== undefined ? ['--netns', target.netns] : []), ...(family ? [`-${family}`] : []), ...args];
    for (let attempt = 1; ; attempt++) {
      const [r] = (await backend.dumps([{ dump: d, ...(target.netns !== undefined ? { netns: target.netns } : {}) }])) ?? [];
      if (r !== undefined && 'entries' in r) return r.entries as T[];
      const errno = r === undefined ? 'EAGAIN' : errnoClass(r.failure.errno);
      if (!isTransientErrno(errno) || attempt >= this.retry.attempts) throw dumpError(argv, r, errno);
      await sleep(retryDelayMs(this.retry, attempt));
    }
  }

  /**
   * The rtnetlink path of one step: its first attempt may have run already (`firstRun`); retries
   * go to the backend again with the pending requests. The requests' iproute2 lines only name the
   * failed request in messages.
   */
  private async applyFrom(backend: RtBackend, st: ApplyStep, firstRun: RunResult | undefined): Promise<void> {
    const options = stepOptions(st);
    const isContinue = options.onError === 'continue';
    const text = st.requests.map((r) => formatRequest(r).join(' '));
    let pending = st.requests.map((_, i) => i + 1);
    for (let attempt = 1; ; attempt++) {
      let res = attempt === 1 ? firstRun : undefined;
      if (res === undefined) {
        const batch = { requests: pending.map((n) => st.requests[n - 1]!), force: isContinue, ...(options.netns !== undefined ? { netns: options.netns } : {}) };
        const r = await backend.batches([batch]);
        res = backendRun(options, r?.[0]);
      }
      if (res.exitCode === 0) return;
      const failures: LineFailure[] = (res.failures ?? []).map((f) => ({ ...f, line: pending[f.line - 1] ?? f.line }));
      const first = failures[0];
      const isRetryable = res.spawnError !== undefined || (failures.length > 0 && (isContinue
        ? failures.every((f) => isTransientErrno(f.errno))
        : isTransientErrno(first?.errno)));
      if (!isRetryable || attempt >= this.retry.attempts) throw batchError(res.argv, text, res, failures);
      // A backend that died answered nothing: every pending request is tried again.
      if (res.spawnError === undefined) pending = isContinue ? failures.map((f) => f.line) : pending.slice(pending.indexOf(first!.line));
      await sleep(retryDelayMs(this.retry, attempt));
    }
  }
}

function stepOptions(st: ApplyStep): BatchOptions {
  return { ...(st.options?.netns !== undefined ? { netns: st.options.netns } : {}), ...(st.options?.onError ? { onError: st.options.onError } : {}) };
}

/** A backend's answer in the shape of an `ip` run (its argv names the path, for messages). */
function backendRun(options: BatchOptions, r: RtBatchResult | undefined): RunResult {
  const argv = ['rtnetlink', ...(options.netns !== undefined ? ['--netns', options.netns] : []), ...batchTail(options)];
  if (r === undefined) {
    return { argv, stdout: '', stderr: 'rtnetlink backend exited', exitCode: null, spawnError: Object.assign(new Error('rtnetlink backend exited'), { code: 'EAGAIN' }) };
  }
  const failures = r.failures.map((f) => ({ line: f.line, message: f.message, errno: errnoClass(f.errno) }));
  return { argv, stdout: '', stderr: r.stderr, exitCode: r.exitCode, failures };
}

/** The NetlinkError of a failed dump, worded as `ip` would fail the same read. */
function dumpError(argv: readonly string[], r: RtDumpResult | undefined, errno: ReturnType<typeof errnoClass>): NetlinkError {
  const failure = r !== undefined && 'failure' in r ? r : undefined;
  const stderr = failure ? `${failure.failure.message}\n` : 'rtnetlink backend exited\n';
  return new NetlinkError(`${argv.join(' ')}: ${stderr.trim()}`, {
    argv, command: argv.join(' '), stderr, exitCode: failure ? failure.exitCode : null, ...(errno !== undefined ? { errno } : {}),
  });
}
