/**
 * The mechanism of the session-keeping prototype (docs/egress-failover.md#sessions-across-the-loss-of-a-nat-pod)
 * on real netns, without FoU (the client routes to its NAT pod directly; in a cluster the tunnel
 * does it, and the FoU VM bench test/netns/egress-session-keeping-bench.ts runs it so): a TCP
 * stream from C through NAT pod A to X survives the loss of A once C's route and X's route for
 * the shared address S move to NAT pod B, when both NAT pods SNAT to S (each backend). The server
 * retransmits into B before C's next segment arrives there (forced here: X's answers are dropped
 * for a moment before the loss, so X has data to retransmit; in the VM bench it is a race): B must not track those packets as a flow of their own, or the port C's flow
 * needs is taken and X resets the stream. With Coil's masquerade the stream is reset.
 * Root only; skipped with the reason otherwise.
 */
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { after, before, describe, test } from 'node:test';
import { IptablesNat } from '../../src/egress-agent/nat-iptables.js';
import { NftablesNat } from '../../src/egress-agent/nat-nftables.js';
import { IpRunner } from '../../src/netlink/iproute2/ip-runner.js';
import { writeSysctl } from '../../src/netlink/sysctl.js';
import { sleep } from '../../src/runtime/clock.js';
import { TestNetnsSet, netnsSkipReason, type TestNetns } from './test-netns.js';
import { wire } from './egress-peer.js';
import { ask, inNetns, quit } from './egress-testbed.js';
import { STREAM_CLIENT, STREAM_SERVER, type ClientDump } from './egress-session-keeping-bench.js';
import { prerequisite } from '../support/prerequisite.js';

const S = '203.0.113.10';
const X = '198.51.100.2';
const C = '10.60.0.2';

const VARIANTS = [
  { name: 'nftables, shared address', backend: 'nftables', shared: true },
  { name: 'iptables (iptables-nft), shared address', backend: 'iptables', shared: true },
  { name: "Coil's masquerade (control)", backend: 'iptables', shared: false },
] as const;

for (const [k, variant] of VARIANTS.entries()) describe(`a stream through a lost NAT pod: ${variant.name}`, { skip: prerequisite(netnsSkipReason()) }, () => {
  const ip = new IpRunner();
  const netns = new TestNetnsSet({ ip });
  let c: TestNetns;
  let a: TestNetns;
  let b: TestNetns;
  let x: TestNetns;
  const procs: ChildProcess[] = [];

  before(async () => {
    [c, a, b, x] = [await netns.create('sk-c'), await netns.create('sk-a'), await netns.create('sk-b'), await netns.create('sk-x')];
    await wire(ip, c, 'to-a', a, 'c0');
    await wire(ip, c, 'to-b', b, 'c0');
    await wire(ip, a, 'eth0', x, 'to-a');
    await wire(ip, b, 'eth0', x, 'to-b');
    // C's address (its pod IP) stays when a link to a NAT pod goes, as the tunnel's does.
    await ip.batch([['addr', 'add', `${C}/32`, 'dev', 'lo'], ['addr', 'add', '10.61.0.2/24', 'dev', 'to-a'], ['addr', 'add', '10.62.0.2/24', 'dev', 'to-b'],
      ['route', 'add', `${X}/32`, 'via', '10.61.0.1', 'src', C]], { netns: c.path });
    await ip.batch([['addr', 'add', '10.61.0.1/24', 'dev', 'c0'], ['addr', 'add', '198.51.101.1/24', 'dev', 'eth0'], ['route', 'add', 'default', 'via', '198.51.101.2'], ['route', 'add', `${C}/32`, 'via', '10.61.0.2']], { netns: a.path });
    await ip.batch([['addr', 'add', '10.62.0.1/24', 'dev', 'c0'], ['addr', 'add', '198.51.102.1/24', 'dev', 'eth0'], ['route', 'add', 'default', 'via', '198.51.102.2'], ['route', 'add', `${C}/32`, 'via', '10.62.0.2']], { netns: b.path });
    await ip.batch([['addr', 'add', `${X}/32`, 'dev', 'lo'], ['addr', 'add', '198.51.101.2/24', 'dev', 'to-a'], ['addr', 'add', '198.51.102.2/24', 'dev', 'to-b'],
      ['route', 'add', `${S}/32`, 'via', '198.51.101.1']], { netns: x.path });
    for (const [i, e] of [a, b].entries()) {
      await writeSysctl(ip, 'net.ipv4.ip_forward', '1', { netns: e.path });
      const o = { ip, podAddresses: [`198.51.10${i + 1}.1`], outInterface: 'eth0', netns: e.path, ...(variant.shared ? { snatAddresses: [S] } : {}) };
      await (variant.backend === 'iptables' ? new IptablesNat({ ...o, commands: { 4: 'iptables-nft', 6: 'ip6tables-nft' } }) : new NftablesNat(o)).init();
    }
  });
  after(async () => {
    for (const p of procs) await quit(p);
    await netns.cleanup();
  });

  test(variant.shared ? 'the stream goes on through B: same 4-tuple at X, every byte echoed once and in order' : 'the stream is reset (X sees another source)', async () => {
    const port = String(7100 + k);
    const server = await inNetns(x, STREAM_SERVER, [port]);
    procs.push(server);
    const client = await inNetns(c, STREAM_CLIENT, [X, '0', port]);
    procs.push(client);
    await sleep(600);
    // X's answers stop first, so that X holds unacknowledged data and retransmits it (in the VM
    // bench that happens by chance, depending on what was in flight at the loss).
    await ip.batch([['route', 'replace', 'blackhole', `${variant.shared ? S : '198.51.101.1'}/32`]], { netns: x.path });
    await sleep(150);
    const t0 = Date.now();
    // A is lost: its links go (both ends), with its conntrack.
    await ip.batch([['link', 'del', 'dev', 'to-a']], { netns: c.path });
    await ip.batch([['link', 'del', 'dev', 'to-a']], { netns: x.path });
    // The network moves S to B first, so X's retransmissions reach B before C's next segment.
    if (variant.shared) await ip.batch([['route', 'replace', `${S}/32`, 'via', '198.51.102.1']], { netns: x.path });
    await sleep(1_200);
    await ip.batch([['route', 'replace', `${X}/32`, 'via', '10.62.0.1', 'src', C]], { netns: c.path });
    const tMove = Date.now();
    await sleep(5_000);
    client.stdin!.write('stop\n');
    await sleep(800);
    const d = await ask<ClientDump>(client, 'dump');
    const conns = await ask<Array<{ peer: string; bytes: number }>>(server, 'dump');
    if (!variant.shared) {
      assert.ok(d.errAt > t0, `reset expected, got ${JSON.stringify({ ...d, echo: d.echo.length })}`);
      assert.equal(d.err, 'ECONNRESET');
      return;
    }
    assert.equal(d.err, '', `the stream failed: ${d.err} at +${d.errAt - t0} ms`);
    assert.ok(d.echo.some((t) => t > tMove), 'echoes after the move');
    assert.equal(d.bad, 0, 'bytes echoed out of order');
    assert.equal(d.echoed, d.sent, 'every byte sent was echoed once');
    assert.deepEqual(conns.map((x) => x.peer), [`::ffff:${S}:${d.local}`], 'one connection at X, from S with the client\'s own port');
  });
});
