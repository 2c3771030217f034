/**
 * Egress failover on real FoU tunnels, in the stock-kernel VM (hack/fou-vm.sh; this machine's
 * kernel has no FoU): hack/bench/egress-failover.js with one run of each kind of loss. It shows
 * - compatibility both ways: tunnels to the ClusterIP (Coil's coild) work with our NAT pods, and
 *   coild's steered tunnels work with a NAT pod set up with Coil's iptables rules (E2, the first
 *   choice of one client) — the bench fails when a client got no answer before the loss;
 * - coild's probe through the NAT pods' FoU decapsulation, forwarding and MASQUERADE answers, and a
 *   lost NAT pod's clients move within the bound below while the other clients lose no probe and
 *   no stream;
 * - a graceful deletion loses no probe, and drains per flow: the streams through the deleted NAT
 *   pod go on until it ends, a stream opened during the drain goes through another NAT pod and
 *   outlives it; a NAT pod added moves no client; a NAT pod whose coil-egress (the real program)
 *   is SIGKILLed, or SIGSTOPped and then killed by kubelet, and restarted (its endpoint turns not
 *   ready, its kernel data path still works) keeps its clients: no probe lost, its streams and one
 *   opened while it restarted kept, its peer links, FoU port and conntrack entries untouched by
 *   the restart, where Coil's path resets them;
 * - every loss is judged on at least one client of the lost NAT pod, and reads its clients once
 *   their paths drained (egress-failover-measure.ts); a kind whose run was starved (a client sent
 *   under half its probes: the machine's load, not coild) runs again in a new VM, up to twice, and
 *   fails the test as such, naming the load, only when every attempt was starved.
 * Also egress-probe-scenario.js: the probe on real FoU in both families; and
 * hack/bench/egress-session-keeping.js's `option` mode: an Egress with a shared SNAT address keeps
 * its clients' streams across the loss of its active NAT pod, coild's own parts moving the tunnels
 * and routing the address to the next NAT pod.
 * About 4 min here without KVM, plus the real coil-egress's three starts and four restarts (10–18 s each
 * under TCG). Skipped, or failed under CI=true, as test/netns/fou-vm.ts says.
 */
import assert from 'node:assert/strict';
import { dirname, join } from 'node:path';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { inVm, repo, vmSkip } from './fou-vm.js';

const here = dirname(fileURLToPath(import.meta.url));
const skip = vmSkip('egress failover VM test');

/**
 * The bound on coil's outage for a lost NAT pod in this test: the goal's own 1 s (its p50 of
 * 500 ms needs several runs: the bench's). Measured 2026-11-27 in this VM
 * (docs/egress-failover.md#measured): 291–502 ms over 7 runs (IPv4 and IPv6; p50 375 ms), made of
 * the detection (2 unanswered probes: 200–300 ms by the timers) and one rtnetlink round trip to the
 * netlink agent — no process starts on the path any more, which under TCG cost 150–380 ms each.
 * The margin (twice the worst seen) is for what a shared machine does to TCG's timers: the longest
 * stall a client saw in those runs was ~200 ms, and one such stall of coild delays detection by as
 * much. Tighter would flake on a busy CI machine; looser would not show the goal.
 */
const OUTAGE_BOUND_MS = 1_000;

describe('egress failover in a VM with a stock kernel', { skip }, () => {
  test('coild\'s probe answers through a NAT pod\'s FoU decapsulation and NAT, IPv4 and IPv6, and fails when the NAT pod is unreachable', { timeout: 300_000 }, async () => {
    const { code, out, err } = await inVm([process.execPath, join(here, 'egress-probe-scenario.js')], { timeoutS: 280 });
    assert.equal(code, 0, `scenario failed (rc ${code}):\n${out}\n${err.slice(-2000)}`);
    assert.match(out, /ALL OK/);
    assert.equal((out.match(/^ok /gm) ?? []).length, 5);
  });

  test(`coild moves a lost NAT pod's clients (bound ${OUTAGE_BOUND_MS} ms under TCG), others lose nothing; a graceful deletion loses no probe, a scale-up moves nothing; a killed or stopped NAT process moves nobody; both paths work with both kinds of NAT pod`, { timeout: 2_700_000 }, async () => {
    // The readiness delay is shortened: what is measured (nothing moves on coil's path; Coil's
    // resets) does not depend on it, only the run's length does.
    // A hung coil-egress is killed (liveness) at once with a grace period of 1 s instead of 30 s: the
    // restart is what is judged, not how long kubelet waits for it.
    const bench = async (kinds: readonly string[]): Promise<string> => {
      const { code, out, err } = await inVm([process.execPath, join(repo, 'dist/hack/bench/egress-failover.js'), '-n', '1', '-s', '1',
        '-k', kinds.join(','), '--k8s-readiness-fail-ms', '2000', '--k8s-grace-ms', '1000'], { timeoutS: 900 });
      assert.equal(code, 0, `bench failed (rc ${code}):\n${out}\n${err.slice(-3000)}`);
      return out;
    };
    // | path | loss | runs | outage p50 | outage max | probes lost on the lost NAT pod | other clients: probes lost, streams disturbed | coild false failovers | clients on the lost NAT pod | starved runs |
    const summaryRows = (text: string): string[][] => text.split('\n').filter((l) => /^\| (coil|Coil) /.test(l) && l.split('|').length === 12)
      .map((l) => l.split('|').map((c) => c.trim()));
    // A starved VM (its clients sent under half their probes: the machine gave it too little CPU,
    // as the VM's first run after boot can get on a shared machine) measures the machine's load,
    // not coild: that kind runs again in a new VM, up to twice, and the test fails only when every
    // attempt was starved, naming the load. Each kind is judged on its last attempt's rows alone.
    const KINDS = ['node-lost', 'graceful', 'scale-up', 'sigkill', 'sigstop'];
    const lastRun = new Map<string, string>();
    const log: string[] = [];
    let pending = KINDS;
    for (let attempt = 1; attempt <= 3 && pending.length > 0; attempt++) {
      const text = await bench(pending);
      log.push(`--- attempt ${attempt}: ${pending.join(',')}\n${text}`);
      for (const kind of pending) lastRun.set(kind, text);
      pending = pending.filter((kind) => summaryRows(text).some((c) => c[2] === kind && c[10] !== '0'));
    }
    const full = log.join('\n');
    const out = KINDS.flatMap((kind) => lastRun.get(kind)!.split('\n').filter((l) => /^\| (coil|Coil[^|]*) \| ([^|]+) \|/.exec(l)?.[2] === kind)).join('\n');
    const summary = new Map(summaryRows(out).map((c) => [`${c[1]!.startsWith('coil') ? 'coil' : 'Coil'} ${c[2]}`, c]));
    const row = (key: string): string[] => {
      const r = summary.get(key);
      assert.ok(r, `summary row ${key} missing:\n${full}`);
      return r;
    };
    // Every loss is judged on a client that was on the lost NAT pod: with none, the outage would be
    // 0 by construction.
    for (const key of ['coil node-lost', 'Coil node-lost', 'coil graceful', 'Coil graceful', 'coil sigkill', 'Coil sigkill', 'coil sigstop', 'Coil sigstop']) {
      assert.ok(Number(row(key)[9]) >= 1, `${key}: no client was on the lost NAT pod, so nothing was judged:\n${full}`);
    }
    for (const key of summary.keys()) assert.equal(row(key)[10], '0', `${key}: the VM was starved in 3 attempts (load averages ${[...full.matchAll(/load average (\S+)/g)].map((m) => m[1]).join(', ')}), the runs measured nothing:\n${full}`);
    const coilLost = row('coil node-lost');
    assert.ok(Number(coilLost[5]) <= OUTAGE_BOUND_MS, `coil's outage for a lost NAT pod: ${coilLost[5]} ms`);
    assert.equal(coilLost[7], '0, 0', 'clients of the other NAT pods lost probes or had streams disturbed');
    // coild moved no client of a NAT pod that was not lost (its probe declared none down).
    assert.equal(coilLost[8], '0', `coild declared a NAT pod down that was not lost:\n${out}`);
    assert.equal(row('coil graceful')[6], '0', 'a graceful deletion lost probes');
    // Per-flow drain (docs/egress-failover.md#draining): the streams through the draining NAT pod
    // go on until it stops serving (1 s after the drain began), and a stream opened during the
    // drain goes through another NAT pod and outlives the drained one.
    const detail = out.split('\n').filter((l) => /^\| coil \| graceful \|/.test(l) && l.split('|').length === 14);
    assert.equal(detail.length, 1, `the graceful run's detail row:\n${out}`);
    for (const line of detail) {
      const cells = line.split('|').map((c) => c.trim());
      const lost = cells[3]!;
      const streams = cells[7]!.split('; ');
      const late = streams.filter((x) => x.startsWith('new '));
      assert.equal(late.length, 1, `one stream opened during the drain: ${line}`);
      const m = /^new \+\d+ ms via (\S+): (.*)$/.exec(late[0]!);
      assert.ok(m && m[1] !== lost && m[1] !== '?' && m[2] === 'kept', `the stream opened during the drain went through the draining NAT pod or did not outlive it: ${late[0]}`);
      // When the pod stopped serving, as the bench did it; a stream that went on until then is
      // reset once coild deleted the drained link and TCP's next retransmission meets the new NAT
      // pod — under TCG that can come after the read (coild's pin sync of the drain's start holds
      // the pod's lock for seconds there, and the retransmissions back off), so a stream whose
      // last echo came when the pod stopped serving went on until it ended. Allowance: 300 ms plus
      // the longest stall the clients saw, as for a pause.
      const drain = /^not serving \+(\d+), link down \+(\d+), /.exec(cells[12]!);
      assert.ok(drain, `the graceful run's drain steps: ${line}`);
      const notServing = Number(drain[1]);
      const stall = /^(\d+) \/ (\d+);/.exec(cells[10]!);
      assert.ok(stall, `the graceful run's stall: ${line}`);
      const allowance = 300 + Math.max(Number(stall[1]), Number(stall[2]));
      for (const x of streams.filter((y) => !y.startsWith('new '))) {
        const reset = /^reset \+(\d+) ms/.exec(x);
        const hung = /^hung \(last echo \+(\d+) ms\)$/.exec(x);
        assert.ok(x === 'kept' || (reset && Number(reset[1]) >= notServing) || (hung && Number(hung[1]) >= notServing - allowance),
          `a stream through the draining NAT pod ended before the pod stopped serving (+${notServing} ms, allowance ${allowance} ms): ${x}; ${line}`);
      }
    }
    assert.deepEqual([row('coil scale-up')[6], row('coil scale-up')[7]], ['0', '0, 0'], 'adding a NAT pod lost probes or disturbed streams');
    for (const kind of ['sigkill', 'sigstop']) {
      const r = row(`coil ${kind}`);
      assert.deepEqual([r[5], r[6], r[7], r[8]], ['0', '0', '0, 0', '0'], `${kind}: coil's path lost probes, disturbed streams or failed over`);
    }
    // The real coil-egress killed (or hung, then killed by kubelet) and restarted: its streams and
    // the one opened while it restarted are kept, and its start changed nothing of the pod's data
    // path (peer links, FoU port, the clients' conntrack entries).
    for (const line of out.split('\n').filter((l) => /^\| coil \| sig(kill|stop) \|/.test(l) && l.split('|').length === 14)) {
      const cells = line.split('|').map((c) => c.trim());
      assert.doesNotMatch(cells[7]!, /reset|closed|hung|paused/, `a stream through a killed or stopped NAT process was disturbed: ${line}`);
      assert.match(cells[7]!, /new \+\d+ ms via \S+: kept/, `no stream opened during the restart, or it was not kept: ${line}`);
      assert.match(cells[12]!, /restarted \+\d+, ready \+\d+ ms; kept \(/, `coil-egress's restart changed the pod's data path: ${line}`);
    }
    assert.ok(Number.isFinite(Number(row('Coil node-lost')[5])), `the ClusterIP path never answered again: ${row('Coil node-lost')[5]}`);
    for (const kind of ['graceful', 'scale-up']) assert.equal(row(`coil ${kind}`)[8], '0', `${kind}: coild declared a NAT pod down that was not lost`);
  });

  test('an Egress with a shared SNAT address keeps its clients\' TCP streams across the loss of its active NAT pod, with coild moving the tunnels and the address (no hand moves); Coil\'s masquerade resets them', { timeout: 400_000 }, async () => {
    const { code, out, err } = await inVm([process.execPath, join(repo, 'dist/hack/bench/egress-session-keeping.js'), '--modes', 'masquerade,option', '--runs', '1'], { timeoutS: 360 });
    assert.equal(code, 0, `bench failed (rc ${code}):\n${out}\n${err.slice(-3000)}`);
    // | mode | runs | streams kept | stall p50 / max (ms) | bytes lost or duplicated (kept streams) |
    const summary = new Map(out.split('\n').filter((l) => /^\| (option|masquerade) \| \d+ \| \d+ of \d+ \|/.test(l)).map((l) => l.split('|').map((c) => c.trim())).map((c) => [c[1]!, c]));
    assert.deepEqual([summary.get('option')?.[3], summary.get('option')?.[5]], ['2 of 2', '0'], `option: both clients' streams kept, every byte echoed once:\n${out}`);
    assert.equal(summary.get('masquerade')?.[3], '0 of 1', `masquerade (Coil's NAT): the stream reset:\n${out}`);
    assert.match(out, /\| option \| 1 \| \d+ \(S re-routed \+\d+\) \|/, `coild re-routed S:\n${out}`);
  });
});
