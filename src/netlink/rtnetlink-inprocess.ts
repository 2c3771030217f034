/**
 * The {@link RtBackend} of coild on Bun: typed requests applied through coil's own rtnetlink
 * socket in this very process (rtnetlink-socket.ts), with no second process and no round trip.
 * Usable only on the Bun runtime (`bun:ffi`); under Node it reports itself unusable and the
 * runner uses the netlink agent or `ip` instead.
 */
import type { RtBackend, RtBatch, RtBatchResult } from './rt-request.js';

type ApplyBatches = (list: readonly RtBatch[]) => RtBatchResult[];

/** Whether this process runs on Bun. */
export const isBun = typeof (globalThis as { Bun?: unknown }).Bun !== 'undefined';

export class InProcessRtnetlink implements RtBackend {
  private apply: ApplyBatches | undefined;

  get isUsable(): boolean {
    return isBun;
  }

  async batches(list: readonly RtBatch[]): Promise<RtBatchResult[] | undefined> {
    // Loaded on first use: it opens the host socket at import.
    this.apply ??= (await import('./rtnetlink-socket.js')).applyBatches;
    return this.apply(list);
  }
}
