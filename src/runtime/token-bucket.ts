/**
 * A token bucket: at most `burst` actions at once, then `perSecond` a second. coil meters with
 * it whatever a caller's request makes it ask of the API server (docs/observability.md#access:
 * the HTTP endpoints' reviews; docs/ipam-recovery.md#releasing-a-leak: the leak releases), so
 * that no caller can turn coil's own credentials into a flood of API requests.
 */
import { sleep, systemClock, type Clock } from './clock.js';

/** A bucket's size and refill rate. */
export interface BucketRate {
  /** Tokens when full: the actions allowed at once after a quiet spell. */
  readonly burst: number;
  /** Tokens refilled per second. */
  readonly perSecond: number;
}

export class TokenBucket {
  private tokens: number;
  private refilledAtMs: number;

  /** @throws RangeError when `burst` < 1 or `perSecond` ≤ 0 (a bucket that never lets anything through) */
  constructor(readonly rate: BucketRate, private readonly clock: Clock = systemClock) {
    if (!(rate.burst >= 1) || !(rate.perSecond > 0)) throw new RangeError(`a token bucket needs burst ≥ 1 and perSecond > 0, got burst ${rate.burst}, perSecond ${rate.perSecond}`);
    this.tokens = rate.burst;
    this.refilledAtMs = clock.now();
  }

  /** Takes a token if one is there. @returns false when the bucket is empty (nothing taken) */
  tryTake(): boolean {
    this.refill();
    if (this.tokens < 1) return false;
    this.tokens -= 1;
    return true;
  }

  /** Takes a token, waiting on the bucket's clock until one is there. */
  async take(): Promise<void> {
    while (!this.tryTake()) await sleep(Math.ceil(((1 - this.tokens) / this.rate.perSecond) * 1000), undefined, this.clock);
  }

  private refill(): void {
    const now = this.clock.now();
    this.tokens = Math.min(this.rate.burst, this.tokens + ((now - this.refilledAtMs) / 1000) * this.rate.perSecond);
    this.refilledAtMs = now;
  }
}
