/**
 * NetlinkAgent: coild's handle on the netlink agent process (netlink-agent-main.ts), which
 * applies `ip -batch` lines with rtnetlink requests instead of an `ip` process per batch.
 *
 * IpRunner hands a batch to the agent when every line is in rtnetlink.ts's subset and runs `ip`
 * otherwise; the agent answers as `ip -batch` would, so errors, retries and line numbers are the
 * same either way. If the agent cannot be started (no Bun runtime in this build), the agent turns
 * itself off and every batch goes to `ip`; if it dies, calls in flight fail as spawn errors and
 * the next call starts a new one.
 */
import { spawn } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { BatchLine, SpawnedProcess } from './ip-runner.js';
import { JsonLineChild } from './json-line-child.js';

/** Constructor options of {@link NetlinkAgent}. */
export interface NetlinkAgentOptions {
  /**
   * An executable embedding the Bun runtime; it runs the agent script as `bun` would
   * (`BUN_BE_BUN=1`). Default: the `coil` executable built beside this module (dist/bin/coil).
   */
  readonly runtimePath?: string;
  /** The bundled agent program. Default: dist/bin/netlink-agent.js beside this module. */
  readonly scriptPath?: string;
  /** Told when the agent exits unexpectedly (coild logs it). */
  readonly onExit?: (code: number | null, signal: string | null) => void;
}

/** What {@link NetlinkAgent.batch} runs. */
export interface AgentBatch {
  /** netns file path; undefined = the agent's own (coild's) netns. */
  netns?: string;
  lines: readonly BatchLine[];
  /** `ip -force`: apply every line and report each failure, instead of stopping at the first. */
  force: boolean;
}

const DEFAULT_RUNTIME = fileURLToPath(new URL('../../bin/coil', import.meta.url));
const DEFAULT_SCRIPT = fileURLToPath(new URL('../../bin/netlink-agent.js', import.meta.url));

/** A client of one agent process, started on first use; calls run in order of arrival. */
export class NetlinkAgent {
  private readonly channel: JsonLineChild<{ id: number; results: { stdout: string; stderr: string; exitCode: number }[] }>;
  private usable: boolean | undefined;
  readonly runtimePath: string;
  readonly scriptPath: string;

  constructor(o: NetlinkAgentOptions = {}) {
    this.runtimePath = o.runtimePath ?? DEFAULT_RUNTIME;
    this.scriptPath = o.scriptPath ?? DEFAULT_SCRIPT;
    this.channel = new JsonLineChild({
      // Started in the script's own directory and without auto-install, so nothing around coild
      // (a bunfig.toml, a package.json) changes what the runtime loads.
      start: () => spawn(this.runtimePath, ['--no-install', this.scriptPath], {
        stdio: ['pipe', 'pipe', 'inherit'],
        cwd: dirname(this.scriptPath),
        env: { ...process.env, BUN_BE_BUN: '1' },
      }),
      ...(o.onExit ? { onExit: o.onExit } : {}),
    });
  }

  /** PID of the running agent, if any. */
  get pid(): number | undefined {
    return this.channel.pid;
  }

  /** False when the runtime or the script is missing, so callers use `ip` instead. Checked once. */
  get isUsable(): boolean {
    if (this.usable === undefined) {
      try {
        accessSync(this.runtimePath, constants.X_OK);
        accessSync(this.scriptPath, constants.R_OK);
        this.usable = true;
      } catch {
        this.usable = false;
      }
    }
    return this.usable;
  }

  /**
   * Applies `b.lines` in the agent. Never rejects: a dead agent answers as a process that could
   * not run (`spawnError`, code EAGAIN), which IpRunner reports without retrying the batch.
   * @returns what `ip [-force] -batch -` would have printed and exited with
   */
  async batch(b: AgentBatch): Promise<SpawnedProcess> {
    return (await this.batches([b]))[0]!;
  }

  /**
   * Applies the batches in order in one round trip, up to and including the first that fails
   * (a pod's host side, then its pod side). Never rejects, as {@link batch}.
   * @returns one answer per batch that ran: all of them, or up to the failed one; a dead agent
   *   gives one `spawnError` answer
   */
  async batches(list: readonly AgentBatch[]): Promise<SpawnedProcess[]> {
    const r = await this.channel.call({ batches: list });
    if (r === undefined) {
      return [{ stdout: '', stderr: 'netlink agent exited', exitCode: null, spawnError: Object.assign(new Error('netlink agent exited'), { code: 'EAGAIN' }) }];
    }
    return r.results.map((x) => ({ stdout: x.stdout, stderr: x.stderr, exitCode: x.exitCode }));
  }

  /** Ends the agent (its stdin closes); a later call starts a new one. */
  stop(): void {
    this.channel.stop();
  }
}
