/**
 * NetlinkAgent: the {@link RtBackend} of coild on Node — a handle on the netlink agent process
 * (netlink-agent-main.ts, on the Bun runtime inside `coil`), which applies typed rtnetlink requests
 * and reads dumps instead of an `ip` process per batch or read. (coild on Bun applies them in-process: rtnetlink-inprocess.ts.)
 *
 * The agent answers as `ip -batch` would, so errors, retries and line numbers are the same on
 * every path. If the agent cannot be started (no Bun runtime in this build), it is not usable and
 * the NetlinkExecutor uses `ip`; if it dies, calls in flight answer undefined and the next call starts a new one.
 */
import { spawn } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { JsonLineChild } from './json-line-child.js';
import type { RtBackend, RtBatch, RtBatchResult, RtDumpCall, RtDumpResult } from './rt-request.js';

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

const DEFAULT_RUNTIME = fileURLToPath(new URL('../../bin/coil', import.meta.url));
const DEFAULT_SCRIPT = fileURLToPath(new URL('../../bin/netlink-agent.js', import.meta.url));

/** A client of one agent process, started on first use; calls run in order of arrival. */
export class NetlinkAgent implements RtBackend {
  private readonly channel: JsonLineChild<{ id: number; results?: RtBatchResult[]; dumps?: RtDumpResult[] }>;
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

  /** Applies the batches in order in one round trip, up to and including the first that fails. */
  async batches(list: readonly RtBatch[]): Promise<RtBatchResult[] | undefined> {
    return (await this.channel.call({ batches: list }))?.results;
  }

  /** Reads the dumps in one round trip. */
  async dumps(list: readonly RtDumpCall[]): Promise<RtDumpResult[] | undefined> {
    return (await this.channel.call({ dumps: list }))?.dumps;
  }

  /** Ends the agent (its stdin closes); a later call starts a new one. */
  stop(): void {
    this.channel.stop();
  }
}
