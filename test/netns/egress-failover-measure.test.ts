/**
 * The failover bench's reading of its clients' records (egress-failover-measure.ts), on records
 * built as the run that "never recovered" (docs/egress-failover.md#measured) produced them: the
 * lost NAT pod's client answered again after the move, then the VM stalled at the window's end and
 * every answer took 828 ms. Pure: no netns, no VM.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { drained, FORMER_SETTLE_MS, measure, STARVED_SHARE, type Dump } from './egress-failover-measure.js';

const T0 = 1_000_000;
const WINDOW_MS = 4_000;
const END = T0 + WINDOW_MS;

/**
 * A client's record as read at `readAt`: a probe every 10 ms from 2 s before t0 on, each answered
 * after `rtt(t)` ms (undefined: lost), and only answers that arrived by `readAt` are in it.
 */
function record(readAt: number, rtt: (t: number) => number | undefined): Dump {
  const sent: Array<[number, number]> = [];
  const got: Record<string, number> = {};
  let seq = 0;
  for (let t = T0 - 2_000; t <= readAt; t += 10) {
    sent.push([++seq, t]);
    const r = rtt(t);
    if (r !== undefined && t + r <= readAt) got[seq] = t + r;
  }
  return { sent, got, streams: [], late: [] };
}

/** The stall at the window's end: answers of probes sent from +3.4 s on take 828 ms. */
const stalled = (t: number) => (t >= T0 + 3_400 ? 828 : 5);
/** The lost NAT pod's client: nothing answered from the loss to the move at +1133 ms, then as `stalled`. */
const lostClient = (t: number) => (t >= T0 && t < T0 + 1_140 ? undefined : stalled(t));

describe('the failover bench reads a client once its path drained', () => {
  it('read 300 ms after the window (the former read), the stall makes in-flight probes lost and the recovered client an outage without end; the path has not drained then', () => {
    const former = END + FORMER_SETTLE_MS;
    const other = measure(record(former, stalled), T0, WINDOW_MS);
    assert.ok(other.lost > 0, 'the former read counts the in-flight probes of a client that lost none');
    assert.equal(measure(record(former, lostClient), T0, WINDOW_MS).outageMs, Infinity);
    assert.equal(drained(record(former, stalled), END), false);
    assert.equal(drained(record(former, lostClient), END), false);
  });

  it('read once a probe sent after the window is answered: the other client lost nothing, the lost NAT pod\'s client had a finite outage', () => {
    // A probe sent 10 ms after the end is answered 828 ms later.
    const readAt = END + 10 + 828;
    assert.equal(drained(record(readAt - 1, stalled), END), false);
    assert.equal(drained(record(readAt, stalled), END), true);
    const other = measure(record(readAt, stalled), T0, WINDOW_MS);
    assert.equal(other.lost, 0);
    assert.equal(other.outageMs, 0);
    assert.ok(other.lateAnswers > 0, 'the late answers are counted as such');
    const lost = measure(record(readAt, lostClient), T0, WINDOW_MS);
    assert.equal(lost.outageMs, 1_140 + 10, 'from the last answered probe before the loss to the first after the move');
    assert.equal(lost.lost, 114);
  });

  it('a stream whose echoes a stall at the window\'s end held up is kept, judged with its echoes up to the read: on the window\'s echoes alone it was "hung"', () => {
    // From 1.3 s before the end on, every answer and echo takes 1.35 s: none comes back before the end.
    const rtt = (t: number) => (t >= END - 1_300 ? 1_350 : 5);
    const readAt = END + 10 + 1_350;
    const d = record(readAt, rtt);
    // Written every 50 ms, echoed as the probes are answered.
    const echo: number[] = [];
    for (let t = T0 - 2_000; t <= readAt; t += 50) if (t + rtt(t) <= readAt) echo.push(t + rtt(t));
    d.streams = [{ echo: echo.sort((a, b) => a - b), err: '', errAt: 0, closedAt: 0 }];
    assert.equal(drained(d, END), true);
    assert.deepEqual(measure(d, T0, WINDOW_MS).streams, ['kept']);
    const windowOnly = { ...d, streams: [{ ...d.streams[0]!, echo: echo.filter((t) => t <= END) }] };
    assert.match(measure(windowOnly, T0, WINDOW_MS).streams[0]!, /^hung/, 'the window\'s echoes alone end more than 1 s before the end');
  });

  it('a stream through a drained NAT pod that went on until the pod stopped and whose reset had not come by the read is "hung" with its last echo', () => {
    const d = record(END + 20, () => 5);
    const echo: number[] = [];
    for (let t = T0 - 2_000; t <= T0 + 1_150; t += 50) echo.push(t + 5);
    d.streams = [{ echo, err: '', errAt: 0, closedAt: 0 }];
    assert.deepEqual(measure(d, T0, WINDOW_MS).streams, ['hung (last echo +1155 ms)']);
    d.late = [{ echo: [], err: '', errAt: 0, closedAt: 0, via: '10.2.3.2', openedAt: T0 + 500 }];
    assert.deepEqual(measure(d, T0, WINDOW_MS).late, ['new +500 ms via 10.2.3.2: hung (no echo)']);
  });

  it('an outage that outlasts the window ends at the first answer after it (a move after the window is not "no answer")', () => {
    const moveAfter = (t: number) => (t >= T0 && t < END + 800 ? undefined : 5);
    const d = record(END + 2_000, moveAfter);
    assert.equal(drained(d, END), true);
    const seen = measure(d, T0, WINDOW_MS);
    assert.equal(seen.outageMs, WINDOW_MS + 800 + 10, 'from the last answered probe before the loss to the first answered after the move');
    assert.equal(seen.lost, 401, 'every probe of the window (t0 to its end, 10 ms apart) is lost');
  });

  it('a pause of a stream says how long and from when', () => {
    const d = record(END + 20, () => 5);
    const echo: number[] = [];
    for (let t = T0 - 2_000; t <= END; t += 50) if (t < T0 + 1_000 || t >= T0 + 2_500) echo.push(t + 5);
    d.streams = [{ echo, err: '', errAt: 0, closedAt: 0 }];
    assert.deepEqual(measure(d, T0, WINDOW_MS).streams, ['paused 1550 ms from +955 ms']);
  });

  it('a client that sent few of its probes (a starved VM) says so', () => {
    const full = measure(record(END + 20, () => 5), T0, WINDOW_MS);
    assert.equal(full.sentOfDue, 1);
    const sparse = record(END + 20, () => 5);
    sparse.sent = sparse.sent.filter((_, i) => i % 10 === 0);
    assert.ok(measure(sparse, T0, WINDOW_MS).sentOfDue < STARVED_SHARE);
  });

  it('a path that never recovered never drains (the bench reads it at its deadline) and its outage has no end', () => {
    const dead = (t: number) => (t >= T0 ? undefined : 5);
    assert.equal(drained(record(END + 3_000, dead), END), false);
    assert.equal(measure(record(END + 3_000, dead), T0, WINDOW_MS).outageMs, Infinity);
  });
});
