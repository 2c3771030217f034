import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { ConntrackEntry } from '../netlink/netfilter/conntrack.js';
import { IpRunner } from '../netlink/iproute2/ip-runner.js';
import { silentLogger } from '../runtime/logging.js';
import { countClientFlows, DEFAULT_IDLE_TIMEOUTS, isEstablishedClientFlow, NatDrain } from './drain.js';

const OWN = '198.51.100.1';
/** A client flow masqueraded to OWN: the reply goes to the NAT pod's address. */
const flow = (protocol: string, timeoutS: number, more: Partial<ConntrackEntry> = {}): ConntrackEntry => ({
  family: 4, protocol, timeoutS, isUnreplied: false, isAssured: false,
  original: { src: '10.1.0.2', dst: '192.0.2.9', sport: 40000, dport: 443 }, reply: { src: '192.0.2.9', dst: OWN, sport: 443, dport: 40000 }, ...more,
});

describe('established client flows', () => {
  test('TCP counts until TIME_WAIT or CLOSE, whatever its idle time', () => {
    for (const state of ['SYN_RECV', 'ESTABLISHED', 'FIN_WAIT', 'CLOSE_WAIT', 'LAST_ACK']) assert.equal(isEstablishedClientFlow(flow('tcp', 10, { state })), true, state);
    for (const state of ['TIME_WAIT', 'CLOSE']) assert.equal(isEstablishedClientFlow(flow('tcp', 100, { state })), false, state);
  });

  test('UDP and ICMP count while they carried a packet in the last 5 s (full timeout minus the time left)', () => {
    const t = DEFAULT_IDLE_TIMEOUTS;
    assert.equal(isEstablishedClientFlow(flow('udp', t.udpS - 4)), true);
    assert.equal(isEstablishedClientFlow(flow('udp', t.udpS - 5)), false);
    assert.equal(isEstablishedClientFlow(flow('udp', t.udpStreamS - 1, { isAssured: true })), true);
    assert.equal(isEstablishedClientFlow(flow('udp', t.udpStreamS - 6, { isAssured: true })), false);
    assert.equal(isEstablishedClientFlow(flow('udp', 20), { ...t, udpS: 22 }), true, 'the netns timeouts are used');
    assert.equal(isEstablishedClientFlow(flow('icmp', t.icmpS)), true);
    assert.equal(isEstablishedClientFlow(flow('sctp', 1)), true, 'others: while the kernel keeps them');
  });

  test("not: unanswered flows, the pod's own connections, packets to the pod itself, coild's probe", () => {
    assert.equal(isEstablishedClientFlow(flow('tcp', 99, { state: 'SYN_SENT', isUnreplied: true })), false);
    // The pod's connection to the apiserver: not NATed, the reply comes back to the original source.
    assert.equal(isEstablishedClientFlow(flow('tcp', 99, { state: 'ESTABLISHED', original: { src: OWN, dst: '10.96.0.1', sport: 5, dport: 443 }, reply: { src: '10.96.0.1', dst: OWN, sport: 443, dport: 5 } })), false);
    // A client's FoU packets to the pod's port 5555.
    assert.equal(isEstablishedClientFlow(flow('udp', 30, { original: { src: '10.1.0.2', dst: OWN, sport: 5555, dport: 5555 }, reply: { src: OWN, dst: '10.1.0.2', sport: 5555, dport: 5555 } })), false);
    // coild's probe: from the node's address and port to the same, masqueraded.
    assert.equal(isEstablishedClientFlow(flow('udp', 30, { original: { src: '10.0.0.7', dst: '10.0.0.7', sport: 3333, dport: 3333 }, reply: { src: '10.0.0.7', dst: OWN, sport: 3333, dport: 3333 } })), false);
    assert.equal(countClientFlows([flow('tcp', 9, { state: 'ESTABLISHED' }), flow('tcp', 9, { state: 'TIME_WAIT' }), flow('udp', 30)]), 2);
  });
});

describe('the drain loop', () => {
  test('--drain-timeout=0: no drain, no read', async () => {
    const outcome = await new NatDrain({ ip: new IpRunner(), log: silentLogger(), families: [4], timeoutMs: 0 }).run();
    assert.deepEqual(outcome, { reason: 'disabled', elapsedMs: 0, flows: undefined });
  });

  test('a table it cannot read counts as holding flows: the drain lasts the whole timeout', async () => {
    const ip = new IpRunner();
    ip.exec = async () => { throw new Error('conntrack: not found'); };
    const start = Date.now();
    const outcome = await new NatDrain({ ip, log: silentLogger(), families: [4], timeoutMs: 300, pollMs: 50, quietMs: 100 }).run();
    assert.equal(outcome.reason, 'deadline');
    assert.equal(outcome.flows, undefined);
    assert.ok(Date.now() - start >= 300);
  });
});
