/**
 * A child process of the test control plane: started with its output in a log file, stopped
 * with SIGTERM and, after a grace period, SIGKILL — as controller-runtime's envtest
 * (`pkg/internal/testing/process/process.go`) does.
 *
 * Every child is started under `setpriv --pdeathsig SIGKILL`, so the kernel kills it when the
 * test process dies, even by SIGKILL or a crash: a failed test never leaves an etcd or
 * kube-apiserver behind.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, type WriteStream } from 'node:fs';
import { once } from 'node:events';
import { readFile } from 'node:fs/promises';

/** Options of {@link ManagedProcess.start}. */
export interface ProcessOptions {
  /** Name for messages, e.g. `etcd`. */
  readonly name: string;
  readonly command: string;
  readonly args: readonly string[];
  /** File receiving stdout and stderr (appended: a restarted process keeps its history). */
  readonly logFile: string;
  readonly env?: NodeJS.ProcessEnv;
}

/** A running child process. Not reusable after {@link stop}: start a new one. */
export class ManagedProcess {
  private exited = false;
  private exitCode: number | null = null;

  private constructor(
    readonly options: ProcessOptions,
    private readonly child: ChildProcess,
    private readonly log: WriteStream,
  ) {
    child.once('exit', (code) => {
      this.exited = true;
      this.exitCode = code;
    });
  }

  /** Spawns the process; resolves once it has been spawned (not once it is ready). */
  static async start(options: ProcessOptions): Promise<ManagedProcess> {
    const log = createWriteStream(options.logFile, { flags: 'a' });
    await once(log, 'open');
    const child = spawn('setpriv', ['--pdeathsig', 'SIGKILL', '--', options.command, ...options.args], {
      stdio: ['ignore', log, log],
      env: options.env ?? process.env,
    });
    await once(child, 'spawn');
    return new ManagedProcess(options, child, log);
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  /** Sends `signal` (e.g. SIGHUP) to the process; nothing when it has exited. */
  signal(signal: NodeJS.Signals): void {
    if (!this.exited) this.child.kill(signal);
  }

  /** True while the process has not exited. */
  get running(): boolean {
    return !this.exited;
  }

  /**
   * Throws with the tail of the log when the process has exited: used while waiting for
   * readiness, so a crash is reported at once with its reason instead of as a timeout.
   */
  async assertRunning(): Promise<void> {
    if (!this.exited) return;
    throw new Error(`${this.options.name} exited with code ${this.exitCode}:\n${await this.logTail()}`);
  }

  /** The last `lines` lines of the process log. */
  async logTail(lines = 30): Promise<string> {
    const text = await readFile(this.options.logFile, 'utf8').catch(() => '');
    return text.split('\n').slice(-lines).join('\n');
  }

  /**
   * SIGTERM, then SIGKILL after `graceMs` (default 10000); resolves when the process is gone.
   * `signal: 'SIGKILL'` simulates a crash (no graceful shutdown).
   */
  async stop(options: { graceMs?: number; signal?: NodeJS.Signals } = {}): Promise<void> {
    if (!this.exited) {
      const exit = once(this.child, 'exit');
      this.child.kill(options.signal ?? 'SIGTERM');
      const timer = setTimeout(() => this.child.kill('SIGKILL'), options.graceMs ?? 10_000);
      await exit;
      clearTimeout(timer);
    }
    this.log.end();
  }
}

/**
 * Polls `probe` every `intervalMs` (default 100) until it resolves true, or throws after
 * `timeoutMs` (default 60000). `process` is checked between polls so a crashed child fails fast.
 * @throws Error naming `what` on timeout or on the child's exit.
 */
export async function waitFor(
  what: string,
  probe: () => Promise<boolean>,
  options: { timeoutMs?: number; intervalMs?: number; process?: ManagedProcess } = {},
): Promise<void> {
  const deadline = Date.now() + (options.timeoutMs ?? 60_000);
  for (;;) {
    await options.process?.assertRunning();
    if (await probe().catch(() => false)) return;
    if (Date.now() > deadline) {
      const tail = options.process ? `\n${await options.process.logTail()}` : '';
      throw new Error(`timed out waiting for ${what}${tail}`);
    }
    await new Promise((r) => setTimeout(r, options.intervalMs ?? 100));
  }
}
