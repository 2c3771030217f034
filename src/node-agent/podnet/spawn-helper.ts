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
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { ProcessSpawner } from '../../netlink/iproute2/ip-runner.js';
import { JsonLineChild } from '../../netlink/json-line-child.js';
import { isBun } from '../../netlink/socket/rtnetlink-inprocess.js';

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
  private readonly channel: JsonLineChild<Reply>;

  constructor(o: SpawnHelperOptions = {}) {
    const script = fileURLToPath(new URL('./spawn-helper-child.js', import.meta.url));
    this.channel = new JsonLineChild({
      // Under Bun (`coil` with BUN_BE_BUN=1) the helper runs on the same runtime, as a script.
      start: () => (isBun
        ? spawn(o.nodePath ?? process.execPath, ['--no-install', script], { stdio: ['pipe', 'pipe', 'inherit'], env: { ...process.env, BUN_BE_BUN: '1' } })
        : spawn(o.nodePath ?? process.execPath, ['--max-semi-space-size=1', script], { stdio: ['pipe', 'pipe', 'inherit'] })),
      ...(o.onExit ? { onExit: o.onExit } : {}),
    });
  }

  /** PID of the running helper, if any. */
  get pid(): number | undefined {
    return this.channel.pid;
  }

  /** The spawner to pass as `IpRunnerOptions.spawner`. */
  readonly spawner: ProcessSpawner = async (argv, input, timeoutMs) => {
    const r = await this.channel.call({ argv, input, timeoutMs });
    // Calls in flight lose their answer with the helper: a transient spawn failure, which IpRunner retries.
    if (r === undefined) {
      return { stdout: '', stderr: 'spawn helper exited', exitCode: null, spawnError: Object.assign(new Error('spawn helper exited'), { code: 'EAGAIN' }) };
    }
    return {
      stdout: r.stdout, stderr: r.stderr, exitCode: r.exitCode, signal: r.signal,
      ...(r.spawnError && { spawnError: Object.assign(new Error(r.spawnError.message), { code: r.spawnError.code }) as NodeJS.ErrnoException }),
    };
  };

  /** Ends the helper; later calls start a new one. */
  stop(): void {
    this.channel.stop();
  }
}
