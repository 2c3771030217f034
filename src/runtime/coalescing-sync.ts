/**
 * A level-triggered sync loop that never overlaps itself: every {@link CoalescingSync.trigger}
 * asks for one full sync of the desired state; triggers that arrive while a sync runs collapse
 * into one more sync after it, so a burst of changes costs at most two syncs (the work-queue rule
 * of client-go's controllers, for one key). Used by coild's export-table sync (BlockExport), its
 * shared-SNAT routes (SnatRouter) and coil-egress's client tunnels (ClientWatcher).
 *
 * After {@link CoalescingSync.stop} nothing starts again: triggers are ignored, a pending retry is
 * dropped and a running loop ends after its current sync.
 */

/** Constructor options of {@link CoalescingSync}. */
export interface CoalescingSyncOptions {
  /** One full sync; it reads the desired state itself each time. */
  readonly sync: () => Promise<void>;
  /**
   * A sync started by {@link CoalescingSync.trigger} failed (a direct {@link CoalescingSync.sync}
   * call throws to its caller instead). `retryInMs`: when it is tried again, or undefined when only
   * the next trigger retries.
   */
  readonly onError: (err: unknown, retryInMs: number | undefined) => void;
  /**
   * Retry a failed triggered sync after this many ms, doubled per consecutive failure up to
   * {@link retryMaxMs}. Default: no retry timer (the next trigger retries).
   */
  readonly retryDelayMs?: number;
  /** Upper bound of the retry delay, ms. Default 30 000. */
  readonly retryMaxMs?: number;
}

/** The loop; see the module comment. */
export class CoalescingSync {
  private running: Promise<void> | undefined;
  private dirty = false;
  private stopped = false;
  private failures = 0;
  private retry: ReturnType<typeof setTimeout> | undefined;

  constructor(private readonly o: CoalescingSyncOptions) {}

  /** True after {@link stop}. */
  get isStopped(): boolean {
    return this.stopped;
  }

  /** Requests a sync soon: now when none runs, else once more after the running one. Errors go to `onError`. */
  trigger(): void {
    if (this.stopped) return;
    if (this.running) {
      this.dirty = true;
      return;
    }
    this.sync().then(
      () => {
        this.failures = 0;
      },
      (err: unknown) => {
        let retryInMs: number | undefined;
        if (this.o.retryDelayMs !== undefined && !this.stopped) {
          retryInMs = Math.min(this.o.retryMaxMs ?? 30_000, this.o.retryDelayMs * 2 ** this.failures++);
          clearTimeout(this.retry);
          this.retry = setTimeout(() => {
            this.retry = undefined;
            this.trigger();
          }, retryInMs);
        }
        this.o.onError(err, retryInMs);
      },
    );
  }

  /**
   * Syncs now, after the sync already running (if any), and again while triggers arrived meanwhile.
   * @throws what `sync` throws (then the triggers that arrived meanwhile wait for the next trigger)
   */
  async sync(): Promise<void> {
    while (this.running) await this.running.catch(() => undefined);
    let done = false;
    const run = (async () => {
      try {
        do {
          this.dirty = false;
          await this.o.sync();
        } while (this.dirty && !this.stopped);
      } finally {
        // In the same turn as the last look at `dirty`: a trigger after it starts a sync of its own
        // rather than marking one that has ended (the change would wait for the next trigger).
        done = true;
        this.running = undefined;
      }
    })();
    if (!done) this.running = run;
    await run;
  }

  /** Resolves when no sync runs (its outcome is not reported here). */
  async idle(): Promise<void> {
    while (this.running) await this.running.catch(() => undefined);
  }

  /** Starts nothing more (triggers ignored, a pending retry dropped) and waits for the running sync. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.retry);
    this.retry = undefined;
    await this.idle();
  }
}
