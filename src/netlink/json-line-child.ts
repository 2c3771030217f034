/**
 * JsonLineChild: one long-lived child process spoken to in JSON lines, started on first use — the
 * shared plumbing of coild's spawn helper (node-agent/podnet/spawn-helper.ts) and netlink agent
 * (netlink-agent.ts). Each request goes out as `{id, ...request}` on the child's stdin; each
 * reply comes back as one line carrying the same `id`, in any order.
 *
 * Failure: when the child goes away (its stdout closed), every call still waiting on it resolves
 * to `undefined` and the next call starts a new child. Calls never reject.
 */
import type { ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';

/** Constructor options of {@link JsonLineChild}. */
export interface JsonLineChildOptions {
  /** Starts the child with stdin and stdout as pipes (stderr as the caller likes). */
  readonly start: () => ChildProcess;
  /** Told when the child exits without {@link JsonLineChild.stop} (coild logs it). */
  readonly onExit?: (code: number | null, signal: string | null) => void;
}

/** A request/reply channel to one child process; `R` is the reply line's shape. */
export class JsonLineChild<R extends { id: number }> {
  private child: ChildProcess | undefined;
  /** id → the answer's receiver and the child the request went to. */
  private readonly pending = new Map<number, { resolve: (r: R | undefined) => void; child: ChildProcess }>();
  private nextId = 1;
  private stopped = false;

  constructor(private readonly o: JsonLineChildOptions) {}

  /** PID of the running child, if any (tests kill it to show the restart). */
  get pid(): number | undefined {
    return this.child?.pid;
  }

  /**
   * Sends `request` with a fresh id.
   * @returns the reply line, or undefined when the child went away before answering
   */
  call(request: object): Promise<R | undefined> {
    return new Promise((resolve) => {
      const child = this.ensure();
      const id = this.nextId++;
      this.pending.set(id, { resolve, child });
      child.stdin!.write(`${JSON.stringify({ id, ...request })}\n`);
    });
  }

  /** Ends the child (its stdin closes); a later call starts a new one. */
  stop(): void {
    this.stopped = true;
    this.child?.stdin?.end();
    this.child = undefined;
  }

  private ensure(): ChildProcess {
    if (this.child && this.child.exitCode === null && !this.stopped) return this.child;
    this.stopped = false;
    const child = this.o.start();
    child.stdin!.on('error', () => undefined);
    child.on('error', () => undefined); // a child that cannot start ends in 'close' as well
    createInterface({ input: child.stdout! }).on('line', (line) => {
      const r = JSON.parse(line) as R;
      const p = this.pending.get(r.id);
      this.pending.delete(r.id);
      p?.resolve(r);
    });
    // 'close', not 'exit': replies written just before exiting are read first.
    child.on('close', (code, signal) => {
      if (this.child === child) this.child = undefined;
      if (!this.stopped) this.o.onExit?.(code, signal);
      for (const [id, p] of this.pending) {
        if (p.child !== child) continue;
        this.pending.delete(id);
        p.resolve(undefined);
      }
    });
    this.child = child;
    return child;
  }
}
