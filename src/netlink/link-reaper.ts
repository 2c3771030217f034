/**
 * Deferred, batched deletion of links. Deleting one veth costs ≈ 17–20 ms here, nearly all of it a
 * kernel RCU wait per unregister taken under the RTNL lock, whether sent alone or in a batch;
 * `ip link del group G` unregisters every link of the group with one wait (≈ 0.6–1.2 ms per link;
 * docs/performance.md#link-teardown). So a caller retires a link (down + move to the group: ≈ 2 ms,
 * and the kernel flushes its routes at once) and the reaper deletes the group shortly after,
 * coalescing bursts of DELs.
 */
import type { Link } from './link.js';
import { isNetlinkErrno } from './netlink-error.js';
import { rt, type RtApplier, type RtRequest } from './rt-request.js';

/** Default link group of retired links: "COIL" in ASCII, unlikely to be anyone else's. */
export const DEFAULT_RETIRED_LINK_GROUP = 0x434f494c;

/**
 * Default gathering delay: 500 ms. Every group delete holds the RTNL lock for its RCU wait
 * (≈ 20 ms, plus ≈ 1 ms per link), and every ADD and DEL of the node queues behind it. At 50 ms, a
 * burst of DELs (one per ≈ 15 ms) met a group delete almost every third call: DEL p95 ≈ 40 ms
 * against p50 ≈ 14 ms (hack/bench/cni-add.ts). Gathering longer holds the lock once per burst
 * instead; a retired veth is down and routeless meanwhile, and most go with their pod's netns.
 */
export const DEFAULT_REAP_DELAY_MS = 500;

/** Constructor options of {@link LinkReaper}. */
export interface LinkReaperOptions {
  /** Applies the group delete (a NetlinkExecutor; an IpRunner in tests). */
  kernel: RtApplier;
  /** netns file path of the links; undefined = own netns. */
  netns?: string;
  /** Link group of retired links, > 0 (group 0 holds every ordinary link). Default {@link DEFAULT_RETIRED_LINK_GROUP}. */
  group?: number;
  /**
   * Wait after the first retirement before deleting, to gather a burst. Default
   * {@link DEFAULT_REAP_DELAY_MS}.
   */
  delayMs?: number;
  /** Told about failed background deletions (the links stay retired and go with the next one). */
  onError?: (err: unknown) => void;
}

/**
 * Retires links and deletes them in the background, one group delete at a time.
 * State: one debounce timer and the chain of running deletions.
 */
export class LinkReaper {
  private readonly kernel: RtApplier;
  private readonly netns: string | undefined;
  private readonly group: number;
  private readonly delayMs: number;
  private readonly onError: ((err: unknown) => void) | undefined;
  private timer: NodeJS.Timeout | undefined;
  private chain: Promise<void> = Promise.resolve();

  /** @throws RangeError when `group` is not a positive 32-bit integer */
  constructor(options: LinkReaperOptions) {
    this.kernel = options.kernel;
    this.netns = options.netns;
    this.group = options.group ?? DEFAULT_RETIRED_LINK_GROUP;
    if (!Number.isInteger(this.group) || this.group <= 0 || this.group > 0xffffffff) {
      throw new RangeError(`retired link group must be 1..2^32-1, got ${this.group}`);
    }
    this.delayMs = options.delayMs ?? DEFAULT_REAP_DELAY_MS;
    this.onError = options.onError;
  }

  /** Request retiring `name` (`link set dev <name> down group <G>`); apply it, then {@link schedule}. */
  retire(name: string): RtRequest {
    return rt.linkSet(name, { up: false, group: this.group });
  }

  /** True when `l` (from readLinks) is retired and awaiting deletion. */
  isRetired(l: Link): boolean {
    return l.group === String(this.group);
  }

  /** Arranges a group delete after `delayMs` unless one is already pending. Never throws. */
  schedule(): void {
    if (this.timer !== undefined) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.enqueue().catch((err: unknown) => this.onError?.(err));
    }, this.delayMs);
    // A process exiting with retired links leaves them for the next start's reap().
    this.timer.unref();
  }

  /**
   * Deletes every retired link now and waits for it (shutdown, start-up leftovers, tests).
   * @throws NetlinkError when the kernel refuses (an empty group is success)
   */
  reap(): Promise<void> {
    if (this.timer !== undefined) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    return this.enqueue();
  }

  private enqueue(): Promise<void> {
    const run = this.chain.then(() => this.deleteGroup());
    this.chain = run.catch(() => undefined);
    return run;
  }

  private async deleteGroup(): Promise<void> {
    try {
      await this.kernel.apply([rt.linkDelGroup(this.group)], { netns: this.netns });
    } catch (err) {
      if (!isNetlinkErrno(err, 'ENODEV')) throw err;
    }
  }
}
