/**
 * How typed requests are applied, whichever backend applies them (the NetlinkExecutor's rtnetlink
 * backends, or its iproute2 fallback's IpRunner.applySequence): the steps of a sequence, how a
 * sequence ends, and the backoff for transient kernel failures.
 */
import type { RtRequest } from './rt-request.js';

/** One step of an `applySequence` (IpRunner's, NetlinkExecutor's): typed requests and where to apply them. */
export interface ApplyStep {
  requests: readonly RtRequest[];
  options?: { netns?: string | undefined; onError?: 'stop' | 'continue' };
}

/** How a sequence of steps ended (an applySequence, IpRunner.batchSequence): every step applied, or the first that failed. */
export type SequenceOutcome = { ok: true } | { ok: false; step: number; error: unknown };

/** Backoff for transient kernel failures (EBUSY, EAGAIN, ENOBUFS, interrupted dumps). */
export interface RetryPolicy {
  /** Total tries including the first; 1 disables retrying. */
  attempts: number;
  /** Delay before the second try; doubled for each further try. */
  initialDelayMs: number;
  /** Upper bound of one delay. */
  maxDelayMs: number;
}

/**
 * Default retry: 5 tries from 1 ms doubling, like Coil's dump retry (5 tries from 200 µs), rounded
 * up to Node's timer resolution. @see docs/compatibility.md#pod-network-setup (last point)
 */
export const DEFAULT_RETRY_POLICY: Readonly<RetryPolicy> = { attempts: 5, initialDelayMs: 1, maxDelayMs: 100 };

/** Delay before try `attempt + 1` under `retry`: doubling from its initial delay, capped. */
export function retryDelayMs(retry: RetryPolicy, attempt: number): number {
  return Math.min(retry.maxDelayMs, retry.initialDelayMs * 2 ** (attempt - 1));
}

/** Resolves after `ms` milliseconds (retry backoff). */
export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
