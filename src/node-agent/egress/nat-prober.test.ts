import assert from 'node:assert/strict';
import { createSocket, type Socket } from 'node:dgram';
import { after, describe, test } from 'node:test';
import { silentLogger } from '../../runtime/logging.js';
import { NatProber, type ProbeHealth } from './nat-prober.js';

/**
 * A stand-in for a NAT pod's kernel, which needs FoU (absent on this machine's kernel; the real
 * path runs in the VM, test/netns/egress-failover-scenario.ts): a UDP socket on the FoU port that
 * "decapsulates" each datagram as an IP packet and forwards the inner UDP payload to the inner
 * destination, from its own address — what FoU receive, forwarding and MASQUERADE do.
 */
async function natPodStandIn(address: string, port: number): Promise<{ sock: Socket; port: number; forwarded: () => number }> {
  const sock = createSocket(address.includes(':') ? 'udp6' : 'udp4');
  let n = 0;
  sock.on('message', (pkt) => {
    const v6 = pkt[0]! >> 4 === 6;
    const hdr = v6 ? 40 : (pkt[0]! & 0xf) * 4;
    const dst = v6 ? [0, 1, 2, 3, 4, 5, 6, 7].map((i) => pkt.readUInt16BE(24 + 2 * i).toString(16)).join(':') : [...pkt.subarray(16, 20)].join('.');
    n++;
    sock.send(pkt.subarray(hdr + 8), pkt.readUInt16BE(hdr + 2), dst);
  });
  await new Promise<void>((r) => sock.bind(port, address, () => r()));
  return { sock, port: sock.address().port, forwarded: () => n };
}

async function until(cond: () => boolean, ms = 5_000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond() && Date.now() < end) await new Promise((r) => setTimeout(r, 10));
  assert.ok(cond(), 'condition not reached');
}

describe('NatProber (loopback stand-ins for NAT pods)', () => {
  const ac = new AbortController();
  const socks: Socket[] = [];
  after(() => { ac.abort(); for (const s of socks) try { s.close(); } catch { /* closed */ } });

  test('answered probes make a NAT pod up with an RTT; unanswered ones (2 by default) make it down; answers again make it up; IPv4 and IPv6', async () => {
    const a = await natPodStandIn('127.0.0.2', 0);
    const b = await natPodStandIn('127.0.0.3', a.port);
    const c = await natPodStandIn('::1', a.port);
    socks.push(a.sock, b.sock, c.sock);
    const changes: string[] = [];
    const rtts: number[] = [];
    const prober = new NatProber({
      port: a.port, intervalMs: 20, logger: silentLogger(), bind: { 4: '127.0.0.1', 6: '::1' },
      onHealth: (addr: string, h: ProbeHealth, prev: ProbeHealth) => changes.push(`${addr} ${prev}→${h}`),
      onRtt: (_addr, ms) => rtts.push(ms),
    });
    prober.setTargets(['127.0.0.2', '127.0.0.3', '0:0::1']);
    assert.equal(prober.health('127.0.0.2'), 'unknown');
    const running = prober.run(ac.signal);
    await until(() => ['127.0.0.2', '127.0.0.3', '::1'].every((x) => prober.health(x) === 'up'));
    assert.ok(rtts.length >= 3 && rtts.every((ms) => ms >= 0 && ms < 1_000), JSON.stringify(rtts));

    b.sock.close(); // the NAT pod stops answering
    await until(() => prober.health('127.0.0.3') === 'down');
    assert.equal(prober.health('127.0.0.2'), 'up', 'the other NAT pods stay up');
    const b2 = await natPodStandIn('127.0.0.3', a.port);
    socks.push(b2.sock);
    await until(() => prober.health('127.0.0.3') === 'up');
    assert.deepEqual(changes.filter((x) => x.startsWith('127.0.0.3')), ['127.0.0.3 unknown→up', '127.0.0.3 up→down', '127.0.0.3 down→up']);

    // A target dropped forgets its health and is no longer probed.
    prober.setTargets(['127.0.0.2']);
    assert.equal(prober.health('::1'), 'unknown');
    const sent = c.forwarded();
    await new Promise((r) => setTimeout(r, 100));
    assert.ok(c.forwarded() <= sent + 1, 'the dropped NAT pod is no longer probed');
    ac.abort();
    await running;
  });

  // The rule itself (docs/egress-failover.md#when-a-nat-pod-is-down): at the moment a NAT pod that
  // never answers is declared down, exactly `failAfter` probes reached it (the next is sent after
  // the verdict, in the same tick): 2 by default, 3 when asked.
  for (const [failAfter, probes] of [[undefined, 2], [3, 3]] as const) {
    test(`a NAT pod that never answers is down once ${probes} probes went unanswered (failAfter ${failAfter ?? 'default'})`, async () => {
      const sink = createSocket('udp4');
      let received = 0;
      sink.on('message', () => { received++; });
      await new Promise<void>((r) => sink.bind(0, '127.0.0.4', () => r()));
      const local = new AbortController();
      let atDown: number | undefined;
      const prober = new NatProber({
        port: sink.address().port, intervalMs: 50, logger: silentLogger(), bind: { 4: '127.0.0.1' }, ...(failAfter ? { failAfter } : {}),
        onHealth: (_a, h) => { if (h === 'down' && atDown === undefined) atDown = received; },
      });
      prober.setTargets(['127.0.0.4']);
      const running = prober.run(local.signal);
      try {
        await until(() => atDown !== undefined);
        assert.equal(atDown, probes);
      } finally {
        local.abort();
        await running;
        sink.close();
      }
    });
  }

  test('a NAT pod is not declared down before failAfter probes went unanswered', async () => {
    const local = new AbortController();
    const prober = new NatProber({ port: 9, intervalMs: 1_000, logger: silentLogger(), bind: { 4: '127.0.0.1' } });
    prober.setTargets(['127.0.0.9']);
    const running = prober.run(local.signal);
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(prober.health('127.0.0.9'), 'unknown');
    local.abort();
    await running;
  });
});
