/**
 * The drain of a NAT pod being deleted: after SIGTERM coil-egress keeps everything running — the
 * FoU port, the NAT rules, the peer links, the client watcher, `/readyz` — and returns only when
 * the established client flows through this pod are done or the drain timeout passed, whichever
 * comes first. Its data path is kernel state that lives as long as the pod's netns, i.e. as long
 * as a container of the pod runs: coil-egress exiting at SIGTERM (Coil's behaviour) took the NAT
 * state of every established connection with it 0.25 s after `kubectl delete`, unused grace period
 * and all (docs/egress-failover.md#draining).
 *
 * Meanwhile the pod's EndpointSlice endpoint is `serving: true, terminating: true` (KEP-1672:
 * `serving` follows the readiness probe whatever the pod's deletion state, `ready` is serving and
 * not terminating): coild gives it no new clients and keeps the flows already there.
 *
 * "Established client flows" are read from the pod's conntrack table ({@link countClientFlows}).
 * @see docs/egress-failover.md#draining, docs/compatibility.md#coil-egress-flags
 */
import type Logger from 'bunyan';
import { readConntrack, type ConntrackEntry } from '../netlink/netfilter/conntrack.js';
import type { IpRunner } from '../netlink/iproute2/ip-runner.js';
import { readSysctl } from '../netlink/sysctl.js';
import { sleep } from '../runtime/clock.js';

/** A UDP (or ICMP) flow that carried no packet for this long counts as done. */
export const IDLE_FLOW_S = 5;
/**
 * The drain ends only after no client flow was seen for this long, so that flows starting while
 * the clients learn of the deletion (coild: the slice event within 0.02–0.1 s plus its tunnel
 * move; kube-proxy on Coil's path: the rules 0.1–1.2 s after the delete, measured in the real-node
 * lab, docs/egress-failover.md#measured) still find the NAT pod, and are counted once answered.
 */
export const DRAIN_QUIET_MS = 2_000;
/**
 * Period of the conntrack reads while draining, stretched so that reading takes at most a fifth
 * of the time: a read of 10 000 entries took ~100 ms here (`conntrack -L` 50 ms, parsing 40–50 ms;
 * 2026-11-27), and a NAT pod holds one entry per client flow plus one per probing node.
 */
export const DRAIN_POLL_MS = 500;

/** Full conntrack timeouts (seconds) of the protocols whose flows end by going idle. */
export interface IdleTimeouts {
  /** `net.netfilter.nf_conntrack_udp_timeout` (kernel default 30): a UDP flow not assured. */
  readonly udpS: number;
  /** `net.netfilter.nf_conntrack_udp_timeout_stream` (default 120; 180 before Linux 5.x): an assured UDP flow. */
  readonly udpStreamS: number;
  /** `net.netfilter.nf_conntrack_icmp_timeout` (default 30). */
  readonly icmpS: number;
  /** `net.netfilter.nf_conntrack_icmpv6_timeout` (default 30). */
  readonly icmpv6S: number;
}

/** The kernel's defaults, used for a sysctl that cannot be read. */
export const DEFAULT_IDLE_TIMEOUTS: IdleTimeouts = { udpS: 30, udpStreamS: 120, icmpS: 30, icmpv6S: 30 };

/** TCP states of a connection that has ended (what is left is the kernel waiting out late segments). */
const TCP_ENDED = new Set(['TIME_WAIT', 'CLOSE']);

/**
 * Whether `e` is an established client flow through this NAT pod. Pure. It is when
 * - it was answered (`[UNREPLIED]` flows never got going), and
 * - it was source-NATed (the reply goes to another address than the original source: what the
 *   MASQUERADE rule did to it — so not the pod's own connections, e.g. to the apiserver, and not
 *   the FoU packets addressed to the pod itself), and
 * - it is not coild's probe (docs/egress-failover.md#the-probe: an inner packet from an address and
 *   port to the same address and port, which no client flow is), and
 * - TCP: not `TIME_WAIT` or `CLOSE`; UDP, ICMP: it carried a packet within the last
 *   {@link IDLE_FLOW_S} s (its full timeout minus the time left); other protocols: while the
 *   kernel keeps the entry.
 */
export function isEstablishedClientFlow(e: ConntrackEntry, t: IdleTimeouts = DEFAULT_IDLE_TIMEOUTS): boolean {
  if (e.isUnreplied) return false;
  if (e.reply.dst === e.original.src) return false;
  if (e.original.src === e.original.dst && e.original.sport === e.original.dport) return false;
  const full = e.protocol === 'udp' ? (e.isAssured ? t.udpStreamS : t.udpS) : e.protocol === 'icmp' ? t.icmpS : e.protocol === 'icmpv6' ? t.icmpv6S : undefined;
  if (e.protocol === 'tcp') return !TCP_ENDED.has(e.state ?? '');
  if (full !== undefined) return full - e.timeoutS < IDLE_FLOW_S;
  return true;
}

/** The number of established client flows among `entries` ({@link isEstablishedClientFlow}). Pure. */
export function countClientFlows(entries: readonly ConntrackEntry[], t: IdleTimeouts = DEFAULT_IDLE_TIMEOUTS): number {
  return entries.filter((e) => isEstablishedClientFlow(e, t)).length;
}

/** How a drain ended. */
export interface DrainOutcome {
  readonly reason: 'disabled' | 'flows-done' | 'deadline' | 'aborted';
  readonly elapsedMs: number;
  /** Established client flows at the last read; undefined when the table could not be read. */
  readonly flows: number | undefined;
}

/** Constructor options of {@link NatDrain}. */
export interface NatDrainOptions {
  readonly ip: IpRunner;
  readonly log: Logger;
  /** Families the pod has addresses of (the tables read). */
  readonly families: ReadonlyArray<4 | 6>;
  /** `--drain-timeout` in ms; 0 = no drain (Coil's behaviour). */
  readonly timeoutMs: number;
  /** netns path (tests); undefined = own netns. */
  readonly netns?: string;
  readonly pollMs?: number;
  readonly quietMs?: number;
}

/** Waits for this NAT pod's established client flows to end, within the drain timeout. */
export class NatDrain {
  constructor(private readonly o: NatDrainOptions) {}

  /**
   * Reads the conntrack table every {@link DRAIN_POLL_MS} ms (or 5 × the read's time) until it held no established client
   * flow for {@link DRAIN_QUIET_MS} ms, or the timeout passed, or `signal` aborts. A table that
   * cannot be read (no `conntrack`, no ctnetlink) counts as holding flows, so the drain then lasts
   * the whole timeout: never shorter than asked because of a tool missing. Never throws.
   */
  async run(signal?: AbortSignal): Promise<DrainOutcome> {
    const { timeoutMs, log } = this.o;
    const start = Date.now();
    if (timeoutMs <= 0) return { reason: 'disabled', elapsedMs: 0, flows: undefined };
    const pollMs = this.o.pollMs ?? DRAIN_POLL_MS;
    const quietMs = this.o.quietMs ?? DRAIN_QUIET_MS;
    const timeouts = await this.idleTimeouts();
    let quietSince: number | undefined;
    let flows: number | undefined;
    let warned = false;
    log.info({ timeoutMs }, 'draining: the data path stays until the established client flows end or the drain timeout passes');
    for (;;) {
      const readStart = Date.now();
      try {
        flows = 0;
        for (const family of this.o.families) flows += countClientFlows(await readConntrack(this.o.ip, family, this.target()), timeouts);
      } catch (err) {
        flows = undefined;
        if (!warned) log.warn({ err }, 'cannot read the conntrack table: draining for the whole drain timeout');
        warned = true;
      }
      const now = Date.now();
      if (flows === 0) quietSince ??= now;
      else quietSince = undefined;
      if (quietSince !== undefined && now - quietSince >= quietMs) return this.done({ reason: 'flows-done', elapsedMs: now - start, flows });
      if (now - start >= timeoutMs) return this.done({ reason: 'deadline', elapsedMs: now - start, flows });
      if (signal?.aborted) return this.done({ reason: 'aborted', elapsedMs: now - start, flows });
      await sleep(Math.min(Math.max(pollMs, 4 * (now - readStart)), timeoutMs - (now - start)), signal);
    }
  }

  private done(outcome: DrainOutcome): DrainOutcome {
    this.o.log.info(outcome, outcome.reason === 'flows-done' ? 'drained: no established client flow left' : 'drain ended with client flows left');
    return outcome;
  }

  private target(): { netns?: string } {
    return this.o.netns !== undefined ? { netns: this.o.netns } : {};
  }

  /** This netns's timeouts (they are per netns); the kernel defaults for any not readable. */
  private async idleTimeouts(): Promise<IdleTimeouts> {
    const read = async (key: string, fallback: number): Promise<number> => {
      const v = Number(await readSysctl(this.o.ip, `net.netfilter.${key}`, this.target()).catch(() => ''));
      return v > 0 ? v : fallback;
    };
    const d = DEFAULT_IDLE_TIMEOUTS;
    return {
      udpS: await read('nf_conntrack_udp_timeout', d.udpS),
      udpStreamS: await read('nf_conntrack_udp_timeout_stream', d.udpStreamS),
      icmpS: await read('nf_conntrack_icmp_timeout', d.icmpS),
      icmpv6S: await read('nf_conntrack_icmpv6_timeout', d.icmpv6S),
    };
  }
}
