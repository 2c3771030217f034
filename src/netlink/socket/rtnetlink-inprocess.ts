/**
 * The {@link RtBackend} of coild on Bun: typed requests applied, and dumps read, through coil's
 * own rtnetlink socket in this very process (rtnetlink-socket.ts), with no second process and no round trip.
 * Usable only on the Bun runtime (`bun:ffi`); under Node it reports itself unusable and the
 * runner uses the netlink agent or `ip` instead.
 */
import type { RtBackend, RtBatch, RtBatchResult, RtDumpCall, RtDumpResult } from '../rt-request.js';

type Socket = typeof import('./rtnetlink-socket.js');

/** Whether this process runs on Bun. */
export const isBun = typeof (globalThis as { Bun?: unknown }).Bun !== 'undefined';

export class InProcessRtnetlink implements RtBackend {
  private socket: Socket | undefined;

  get isUsable(): boolean {
    return isBun;
  }

  async batches(list: readonly RtBatch[]): Promise<RtBatchResult[] | undefined> {
    return (await this.load()).applyBatches(list);
  }

  async dumps(list: readonly RtDumpCall[]): Promise<RtDumpResult[] | undefined> {
    return (await this.load()).readDumps(list);
  }

  /** Loaded on first use: it opens the host socket at import. */
  private async load(): Promise<Socket> {
    this.socket ??= await import('./rtnetlink-socket.js');
    return this.socket;
  }
}
