/**
 * What a client pod of the failover bench (egress-failover-bench.ts) saw: its probes and streams,
 * judged over a window, and when its record may be read.
 *
 * A probe still unanswered when the record is read is counted lost, so the record is read only
 * once the client's path has drained ({@link drained}): a probe sent after the window's end has
 * been answered. The tunnel is one path, first in first out, so what of the window is unanswered
 * then was lost, not late. The former read came a fixed 300 ms after the window: when the VM
 * stalled at the window's end (probe round trips of 828 ms in the run of
 * docs/egress-failover.md#measured that "never recovered"), the probes in flight counted lost — 48
 * on the other clients — and the lost NAT pod's client, which had been answered again since the
 * move, got an outage without end.
 */

/** When the former read came, ms after the window's end (kept to count what it miscounted: `lateAnswers`). */
export const FORMER_SETTLE_MS = 300;
/** How long after the window's end a record waits for its path to drain before it is read anyway (a path that never recovered). */
export const DRAIN_TIMEOUT_MS = 3_000;

/** A client sends a probe every 10 ms (its program's timer). */
export const PROBE_INTERVAL_MS = 10;
/**
 * A run where a client sent less than this share of the probes due in the window is starved: its
 * VM got too little CPU for what the run measures (coild's timers, the clients' probes) to mean
 * anything. On 2026-12-07, with the machine at a load average of 14–21 on its 2 cores, clients sent
 * 8–30 % of their probes and coild took 2–5 s to notice a loss its timers bound to 0.3 s.
 */
export const STARVED_SHARE = 0.5;

/** The record of one client (its program's `dump`). */
export interface Dump {
  sent: Array<[number, number]>; got: Record<string, number>; streams: Array<{ echo: number[]; err: string; errAt: number; closedAt: number }>;
  /** Streams opened on `open` (to 7009, which names the NAT pod's address first): `via`. */
  late: Array<{ echo: number[]; err: string; errAt: number; closedAt: number; via: string; openedAt: number }>;
}

/** What one client saw in [t0, t0 + windowMs]. */
export interface Seen {
  outageMs: number; lost: number; sent: number; streams: string[]; disturbed: number;
  /** The client program's own longest pause between two probe sends: a CPU stall of the VM, not the network. */
  stallMs: number;
  /**
   * The longest round trip of an answered probe in the window: a probe held up, not lost, means
   * a process or the VM stalled (a blocked path drops packets, it does not queue them for long).
   */
  maxRttMs: number;
  /** Probes answered in the 2 s before the loss (0: the path never worked). */
  answeredBefore: number;
  /** The probes sent in the window as a share of those due (one every {@link PROBE_INTERVAL_MS}): below {@link STARVED_SHARE} the run was starved. */
  sentOfDue: number;
  /** Streams opened during the window: `new +N ms via <NAT pod>: kept | reset +M ms (…) | closed +M ms | hung`. */
  late: string[];
  /**
   * Probes of the window answered more than {@link FORMER_SETTLE_MS} after its end: the former read
   * (at that moment) counted each as lost, and a trailing run of them as an outage without end.
   */
  lateAnswers: number;
}

/**
 * The outage is the longest run of unanswered probes, from the send time of the last answered
 * probe before it to that of the first answered after it (nothing got through in between), 0 when
 * every probe was answered. A run still unanswered at the window's end ends at the first answered
 * probe sent after the window, Infinity when none was answered by the read: on a machine loaded
 * enough to starve the VM a move came 4.8 s after the loss (2026-12-07, load average 14), after
 * the 4 s window, and read as "no answer" although the client was answered again. A stream is `kept` (echoes
 * never paused over 300 ms plus the longest stall seen), `reset +N ms` (an error N ms after t0,
 * also one after the window's end that came before the read), `closed +N ms`, `paused N ms from
 * +M ms` (the longest echo gap and when it began) or
 * `hung (last echo +N ms)` (no echo from the window's last second on).
 *
 * A stream's echoes are read past the window's end, up to the read: the record is read once the
 * path drained ({@link drained}), so the echoes a VM stall at the window's end held up have come
 * by then. Judged on the window's echoes alone, such a stall made a stream of a client that lost
 * nothing `hung` (the runs of docs/egress-failover.md#measured where the other clients' streams
 * were judged disturbed); the gap it leaves before the first echo after the end is judged as any
 * other, against the stall the probes saw.
 */
export function measure(d: Dump, t0: number, windowMs: number): Seen {
  const end = t0 + windowMs;
  const inWindow = d.sent.filter(([, t]) => t >= t0 && t <= end);
  const lost = inWindow.filter(([s]) => !(s in d.got)).length;
  let outageMs = 0;
  let lastOk: number | undefined = [...d.sent].reverse().find(([s, t]) => t < t0 && s in d.got)?.[1];
  let gap = false;
  for (const [s, t] of inWindow) {
    if (!(s in d.got)) { gap = true; continue; }
    if (gap && lastOk !== undefined) outageMs = Math.max(outageMs, t - lastOk);
    gap = false;
    lastOk = t;
  }
  if (gap) {
    // The outage does not end with the window: its end is the first answered probe sent after it
    // (the record is read once the path drained, so that answer is in it when the path recovered).
    const next = d.sent.find(([s, t]) => t > end && s in d.got);
    outageMs = next && lastOk !== undefined ? Math.max(outageMs, next[1] - lastOk) : Infinity;
  }
  let stallMs = 0;
  for (let i = 1; i < inWindow.length; i++) stallMs = Math.max(stallMs, inWindow[i]![1] - inWindow[i - 1]![1]);
  const maxRttMs = Math.max(0, ...inWindow.filter(([s]) => s in d.got).map(([s, t]) => d.got[s]! - t));
  const answeredBefore = d.sent.filter(([s, t]) => t >= t0 - 2_000 && t < t0 && s in d.got).length;
  const streams = d.streams.map((st) => {
    if (st.errAt && st.errAt >= t0) return `reset +${st.errAt - t0} ms (${st.err})`;
    if (st.closedAt && st.closedAt >= t0) return `closed +${st.closedAt - t0} ms`;
    if (st.errAt || st.closedAt) return 'failed before the loss';
    const after = st.echo.find((t) => t > end);
    const echoes = [t0, ...st.echo.filter((t) => t >= t0 && t <= end), ...(after !== undefined ? [after] : [])];
    if (echoes[echoes.length - 1]! < end - 1_000) return hung(st.echo, t0);
    let maxGap = 0;
    let gapFrom = t0;
    for (let i = 1; i < echoes.length; i++) {
      if (echoes[i]! - echoes[i - 1]! > maxGap) { maxGap = echoes[i]! - echoes[i - 1]!; gapFrom = echoes[i - 1]!; }
    }
    // An echo gap that a stall of the client, of X or of the VM explains (seen as the client's
    // own pause between sends, or as a probe answered late) is not the network's.
    // When the pause began tells whether it follows an event of the run (a restart, a move).
    return maxGap > 300 + Math.max(stallMs, maxRttMs) ? `paused ${maxGap} ms from +${gapFrom - t0} ms` : 'kept';
  });
  const late = (d.late ?? []).map((st) => {
    const what = st.errAt ? `reset +${st.errAt - t0} ms (${st.err})` : st.closedAt ? `closed +${st.closedAt - t0} ms`
      : (st.echo[st.echo.length - 1] ?? 0) < end - 1_000 ? hung(st.echo, t0) : 'kept';
    return `new +${st.openedAt - t0} ms via ${st.via || '?'}: ${what}`;
  });
  const lateAnswers = inWindow.filter(([s]) => (d.got[s] ?? 0) > end + FORMER_SETTLE_MS).length;
  const sentOfDue = inWindow.length / (Math.floor(windowMs / PROBE_INTERVAL_MS) + 1);
  return { outageMs, lost, sent: inWindow.length, streams, disturbed: streams.filter((x) => x !== 'kept').length, stallMs, maxRttMs, answeredBefore, sentOfDue, late, lateAnswers };
}

/**
 * A stream that stopped echoing: `hung (last echo +N ms)`, N after t0 (negative: before it), or
 * `hung (no echo)`. When it stopped tells a stream cut before its NAT pod ended from one that went
 * on until then and whose reset had not come by the read (the graceful kind: coild deletes the
 * drained link only once the pod stopped serving, and TCP's retransmission back-off delays the
 * packet that meets the new NAT pod and brings the reset; under TCG beyond the window).
 */
function hung(echo: readonly number[], t0: number): string {
  const last = echo[echo.length - 1];
  return last === undefined ? 'hung (no echo)' : `hung (last echo +${last - t0} ms)`;
}

/**
 * True once `d` may be read for a window ending at `end` (ms since the epoch): a probe sent after
 * `end` has been answered, so every probe of the window that will ever be answered has been.
 */
export function drained(d: Pick<Dump, 'sent' | 'got'>, end: number): boolean {
  for (let i = d.sent.length - 1; i >= 0 && d.sent[i]![1] > end; i--) if (d.sent[i]![0] in d.got) return true;
  return false;
}
