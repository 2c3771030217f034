/**
 * LeakReleaseRequests: acts on the release requests annotated on this node's AddressBlocks
 * (src/api/v2/leak-release-request.ts; docs/ipam-recovery.md#releasing-a-leak) and answers each
 * in its annotation.
 *
 * coild caches its node's AddressBlocks anyway, so a request reaches it through the watch it
 * already has: a request costs coild one live list of its node's Pods (LeakReleaser's check) and
 * one patch of the answer, and nothing reaches coild that the API server did not authorize (a
 * `patch` of the AddressBlock) and record in its audit log. Those two calls are metered by a token
 * bucket ({@link LEAK_RELEASE_RATE}), so that even an admin's flood of requests costs the API server
 * a bounded rate of coild's own calls. Requests are handled one at a time, each once: an answered one (`outcome` set) is left alone until its author removes it. Requests
 * seen before the allocations were recovered from the host wait for {@link scanAll}, which coild
 * calls once it has recovered.
 */
import type Logger from 'bunyan';
import type { AddressBlock } from '../../api/v2/addressblock.js';
import { Kinds } from '../../api/v2/kinds.js';
import { leakReleaseAnnotations, parseLeakReleaseRequest, type LeakReleaseOutcome } from '../../api/v2/leak-release-request.js';
import type { Cache } from '../../runtime/cache.js';
import type { Client } from '../../runtime/client.js';
import { type Clock } from '../../runtime/clock.js';
import { ApiError } from '../../runtime/errors.js';
import { kindRule } from '../../runtime/rbac.js';
import type { RbacRule } from '../../runtime/registry.js';
import { TokenBucket, type BucketRate } from '../../runtime/token-bucket.js';
import type { LeakReleaser } from './leak-release.js';

/** Constructor options of {@link LeakReleaseRequests}. */
export interface LeakReleaseRequestsOptions {
  /** This node's AddressBlocks (coild's cache holds only those). */
  readonly cache: Pick<Cache, 'onEvent' | 'list'>;
  /** Writes the answer. */
  readonly client: Pick<Client, 'mergePatch'>;
  readonly releaser: LeakReleaser;
  readonly nodeName: string;
  readonly logger: Logger;
  /** False until the allocations are recovered from the host. */
  readonly ready: () => boolean;
  /** RFC 3339 time of an answer; default now. */
  readonly now?: () => string;
  /** How fast requests are handled; default {@link LEAK_RELEASE_RATE}. */
  readonly rate?: BucketRate;
  /** The rate's clock; default the process clock. */
  readonly clock?: Clock;
}

/**
 * Burst 5, then 1 request a second: a handled request costs coild one list of its node's Pods
 * and one patch, so a node spends at most 10 + 2 API calls a second on them. A release is an
 * operator's repair of a leak, a few at a time: the bucket never slows one.
 */
export const LEAK_RELEASE_RATE: BucketRate = Object.freeze({ burst: 5, perSecond: 1 });

export class LeakReleaseRequests {
  /** The answer written into the request's annotation; the Pods' live list is the cache's rule. */
  static readonly rbac: readonly RbacRule[] = [kindRule(Kinds.AddressBlock, ['patch'])];
  /** `<block>/<annotation key>` of the requests queued or being handled. */
  private readonly pending = new Set<string>();
  private chain: Promise<void> = Promise.resolve();
  private unsubscribe: (() => void) | undefined;
  private readonly bucket: TokenBucket;
  private stopped = false;

  constructor(private readonly o: LeakReleaseRequestsOptions) {
    this.bucket = new TokenBucket(o.rate ?? LEAK_RELEASE_RATE, o.clock);
  }

  /** Follows the AddressBlock events of the cache. */
  start(): void {
    this.unsubscribe ??= this.o.cache.onEvent(Kinds.AddressBlock, (e) => {
      if (e.type !== 'DELETED') this.scan(e.object);
    });
  }

  stop(): void {
    this.stopped = true;
    this.unsubscribe?.();
    this.unsubscribe = undefined;
  }

  /** Queues the unanswered requests of every cached block (after recovery). */
  scanAll(): void {
    for (const b of this.o.cache.list(Kinds.AddressBlock)) this.scan(b);
  }

  /** Resolves once every queued request is answered (tests). */
  idle(): Promise<void> {
    return this.chain;
  }

  private scan(block: Readonly<AddressBlock>): void {
    if (!this.o.ready()) return;
    const name = block.metadata?.name;
    if (!name) return;
    for (const [key, value] of leakReleaseAnnotations(block.metadata?.annotations)) {
      const request = parseLeakReleaseRequest(value);
      if (request?.outcome) continue;
      const id = `${name}/${key}`;
      if (this.pending.has(id)) continue;
      this.pending.add(id);
      this.chain = this.chain.then(async () => {
        await this.bucket.take();
        // A request still queued at shutdown waits for the next coild, which finds it unanswered.
        if (!this.stopped) await this.handle(name, key, value);
      }).finally(() => this.pending.delete(id));
    }
  }

  private async handle(block: string, key: string, value: string): Promise<void> {
    const request = parseLeakReleaseRequest(value);
    let answer: { released: boolean; reason: string };
    if (!request) answer = { released: false, reason: 'not a release request: expected JSON {"containerId", "ifname", "ipv4" and/or "ipv6"}' };
    else {
      try {
        answer = await this.o.releaser.release(request, block);
      } catch (e) {
        answer = { released: false, reason: `failed: ${(e as Error).message}` };
      }
    }
    const outcome: LeakReleaseOutcome = { ...answer, node: this.o.nodeName, time: this.o.now?.() ?? new Date().toISOString() };
    let body: object = { outcome };
    try {
      body = { ...(JSON.parse(value) as object), outcome };
    } catch {
      // not JSON: the answer alone
    }
    try {
      await this.o.client.mergePatch(Kinds.AddressBlock, { name: block }, { metadata: { annotations: { [key]: JSON.stringify(body) } } });
      this.o.logger.info({ block, key, ...answer }, 'answered a leak release request');
    } catch (e) {
      // A block deleted meanwhile takes its request with it; anything else is logged (the author times out).
      if (!(e instanceof ApiError && e.code === 404)) this.o.logger.warn({ err: e, block, key }, 'could not write the answer to a leak release request');
    }
  }
}
