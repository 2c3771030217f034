/**
 * SpawnHelper: coild starts its `ip` processes through a small long-lived helper process.
 *
 * Why: Node starts children with fork(), whose cost grows with the parent's memory. coild
 * (≈ 150 MB RSS with grpc-js, client-node and its caches) measured 14–16 ms per spawn against
 * 3–7 ms for a bare Node process under the same load, and every ADD spawns twice (host and pod
 * side of PodNetwork.setup). The helper (spawn-helper-child.ts) loads nothing else, so its forks
 * stay cheap; one JSON line each way costs well under a millisecond.
 *
 * Failure: if the helper dies, calls in flight end as spawn errors (EAGAIN, which IpRunner retries)
 * and the next call starts a new helper. Calls run in parallel; replies are matched by id.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { createInterface } from 'node:readline';
import type { ProcessSpawner, SpawnedProcess } from '../netlink/ip-runner.js';

/** Constructor options of {@link SpawnHelper}. */
export interface SpawnHelperOptions {
  /** Node binary for the helper. Default: this process's (`process.execPath`). */
  readonly nodePath?: string;
  /** Told when the helper exits unexpectedly (coild logs it). */
  readonly onExit?: (code: number | null, signal: string | null) => void;
}

interface Reply { id: number; stdout: string; stderr: string; exitCode: number | null; signal: string | null; spawnError?: { message: string; code?: string } }

/** A {@link ProcessSpawner} backed by one helper process, started on first use. */
export class SpawnHelper {
  private child: ChildProcess | undefined;
  /** id → the answer's receiver and the helper the request went to. */
  private readonly pending = new Map<number, { resolve: (r: SpawnedProcess) => void; child: ChildProcess }>();
  private nextId = 1;
  private stopped = false;

  constructor(private readonly o: SpawnHelperOptions = {}) {}

  /** The spawner to pass as `IpRunnerOptions.spawner`. */
  readonly spawner: ProcessSpawner = (argv, input, timeoutMs) =>
    new Promise((resolve) => {
      const child = this.ensure();
      const id = this.nextId++;
      this.pending.set(id, { resolve, child });
      child.stdin!.write(`${JSON.stringify({ id, argv, input, timeoutMs })}\n`);
    });

  /** Ends the helper; later calls start a new one unless stopped. */
  stop(): void {
    this.stopped = true;
    this.child?.stdin?.end();
    this.child = undefined;
  }

  private ensure(): ChildProcess {
    if (this.child && this.child.exitCode === null && !this.stopped) return this.child;
    this.stopped = false;
    const script = fileURLToPath(new URL('./spawn-helper-child.js', import.meta.url));
    const child = spawn(this.o.nodePath ?? process.execPath, ['--max-semi-space-size=1', script], { stdio: ['pipe', 'pipe', 'inherit'] });
    child.stdin!.on('error', () => undefined);
    createInterface({ input: child.stdout! }).on('line', (line) => {
      const r = JSON.parse(line) as Reply;
      const p = this.pending.get(r.id);
      this.pending.delete(r.id);
      p?.resolve({
        stdout: r.stdout, stderr: r.stderr, exitCode: r.exitCode, signal: r.signal,
        ...(r.spawnError && { spawnError: Object.assign(new Error(r.spawnError.message), { code: r.spawnError.code }) as NodeJS.ErrnoException }),
      });
    });
    child.on('exit', (code, signal) => {
      if (this.child === child) this.child = undefined;
      if (!this.stopped) this.o.onExit?.(code, signal);
      // Calls in flight lose their answer: report a transient spawn failure, which IpRunner retries.
      for (const [id, p] of this.pending) {
        if (p.child !== child) continue;
        this.pending.delete(id);
        p.resolve({ stdout: '', stderr: 'spawn helper exited', exitCode: null, spawnError: Object.assign(new Error('spawn helper exited'), { code: 'EAGAIN' }) });
      }
    });
    this.child = child;
    return child;
  }
}
