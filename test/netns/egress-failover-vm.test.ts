/**
 * Egress failover on real FoU tunnels, in the stock-kernel VM (hack/fou-vm.sh; this machine's
 * kernel has no FoU): hack/bench/egress-failover.js with one run of each kind of loss. It shows
 * - compatibility both ways: tunnels to the ClusterIP (Coil's coild) work with our NAT pods, and
 *   coild's steered tunnels work with a NAT pod set up with Coil's iptables rules (E2, the first
 *   choice of one client) — the bench fails when a client got no answer before the loss;
 * - coild's probe through the NAT pods' FoU decapsulation, forwarding and MASQUERADE answers, and a
 *   lost NAT pod's clients move (0.5–0.8 s in this VM; the test allows 3 s, TCG timing being
 *   what it is) while the other clients lose no probe and no stream;
 * - a graceful deletion loses no probe; a NAT pod added moves no client.
 * Also egress-probe-scenario.js: the probe on real FoU in both families.
 * About 2.5 min here without KVM. Skipped like egress-fou-vm.test.ts when the VM cannot run
 * (failing under CI=true); `COIL_SKIP_VM=1` skips it on purpose.
 */
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { dirname, join, resolve } from 'node:path';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { prerequisite } from '../support/prerequisite.js';

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, '../../..');
const runner = join(repo, 'hack/fou-vm.sh');

function vmSkipReason(): string | undefined {
  const r = spawnSync(runner, ['--status'], { encoding: 'utf8' });
  return r.status === 0 ? undefined : (r.stdout.trim() || r.stderr.trim() || `${runner} --status exited ${r.status ?? r.signal}`);
}

const skip = process.env.COIL_SKIP_VM ? 'COIL_SKIP_VM is set' : prerequisite(vmSkipReason());
if (skip) console.log(`# egress failover VM test skipped: ${skip}`);

describe('egress failover in a VM with a stock kernel', { skip }, () => {
  test('coild\'s probe answers through a NAT pod\'s FoU decapsulation and NAT, IPv4 and IPv6, and fails when the NAT pod is unreachable', { timeout: 300_000 }, async () => {
    const { NODE_TEST_CONTEXT: _, ...env } = process.env;
    const child = spawn(runner, ['-v', '--', process.execPath, join(here, 'egress-probe-scenario.js')], { cwd: repo, env: { ...env, FOU_VM_TIMEOUT: '280' }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (b: Buffer) => { out += b.toString(); });
    child.stderr.on('data', (b: Buffer) => { err += b.toString(); });
    const code = await new Promise<number | null>((r) => child.on('close', r));
    for (const line of out.trim().split('\n')) console.log(`# vm: ${line}`);
    assert.equal(code, 0, `scenario failed (rc ${code}):\n${out}\n${err.slice(-2000)}`);
    assert.match(out, /ALL OK/);
    assert.equal((out.match(/^ok /gm) ?? []).length, 5);
  });


  test('coild moves a lost NAT pod\'s clients (bound 3 s under TCG), others lose nothing; a graceful deletion loses no probe, a scale-up moves nothing; both paths work with both kinds of NAT pod', { timeout: 600_000 }, async () => {
    const { NODE_TEST_CONTEXT: _, ...env } = process.env;
    const child = spawn(runner, ['-v', '--', process.execPath, join(repo, 'dist/hack/bench/egress-failover.js'), '-n', '1', '-s', '1'], {
      cwd: repo, env: { ...env, FOU_VM_TIMEOUT: '500' }, stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (b: Buffer) => { out += b.toString(); });
    child.stderr.on('data', (b: Buffer) => { err += b.toString(); });
    const code = await new Promise<number | null>((r) => child.on('close', r));
    for (const line of out.trim().split('\n')) console.log(`# vm: ${line}`);
    assert.equal(code, 0, `bench failed (rc ${code}):\n${out}\n${err.slice(-3000)}`);
    // | path | loss | runs | outage p50 | outage max | probes lost on the lost NAT pod | other clients: probes lost, streams disturbed |
    const summary = new Map(out.split('\n').filter((l) => /^\| (coil|Coil) /.test(l) && l.split('|').length === 9)
      .map((l) => l.split('|').map((c) => c.trim())).map((c) => [`${c[1]!.startsWith('coil') ? 'coil' : 'Coil'} ${c[2]}`, c]));
    const coilLost = summary.get('coil node-lost');
    const coilGraceful = summary.get('coil graceful');
    const baseline = summary.get('Coil node-lost');
    assert.ok(coilLost && coilGraceful && baseline, `summary rows missing:\n${out}`);
    // The bound is loose on purpose: under TCG on a shared machine, timers and each `ip` start
    // take 100s of ms (the bench's table splits detection from the move); without the steering
    // the client would get no answer at all, since nothing else moves its tunnel on this path.
    assert.ok(Number(coilLost[5]) <= 3_000, `coil's outage for a lost NAT pod: ${coilLost[5]} ms`);
    assert.equal(coilLost[7], '0, 0', 'clients of the other NAT pods lost probes or had streams disturbed');
    assert.equal(coilGraceful[6], '0', 'a graceful deletion lost probes');
    const coilUp = summary.get('coil scale-up');
    assert.ok(coilUp, `no scale-up row:\n${out}`);
    assert.deepEqual([coilUp[6], coilUp[7]], ['0', '0, 0'], 'adding a NAT pod lost probes or disturbed streams');
    assert.ok(Number.isFinite(Number(baseline[5])), `the ClusterIP path never answered again: ${baseline[5]}`);
  });
});
