/**
 * Real FoU tunnels, which this machine's kernel lacks: egress-fou-scenario.js runs inside a qemu
 * VM booting Debian's stock kernel over the host's filesystem (hack/fou-vm.sh). About 20 s here
 * without KVM (2 s of boot), most of it process starts, which are 20–70 times slower in the VM.
 *
 * Also runs, in the VM, the tests whose FoU steps skip (kernelLacks) or take their no-FoU branch on
 * this machine's kernel — fou.test.js, egress-dataplane.test.js and egress-spawns.test.js, and egress-coild.test.js and
 * coild-egress-only.test.js with their node lab — so that every FoU
 * branch of the netns tests runs somewhere on every CI run (test/skip-guard.test.ts checks that
 * each kernelLacks skip's file is listed here).
 *
 * Skipped, or failed under CI=true, as test/netns/fou-vm.ts says.
 */
import assert from 'node:assert/strict';
import { dirname, join } from 'node:path';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { inVm, repo, vmSkip } from './fou-vm.js';

const here = dirname(fileURLToPath(import.meta.url));
const skip = vmSkip('egress FoU VM test');

describe('egress FoU tunnels in a VM with a stock kernel', { skip }, () => {
  test('client → ClusterIP (DNAT) → egress pod → masquerade → target and back (v4, v6), sport auto via the flow device, originating-only (both backends), teardown', { timeout: 300_000 }, async () => {
    const { code, out, err } = await inVm([process.execPath, join(here, 'egress-fou-scenario.js')], { timeoutS: 280 });
    assert.equal(code, 0, `scenario failed (rc ${code}):\n${out}\n${err.slice(-2000)}`);
    assert.match(out, /ALL OK/);
    // 11 steps of the tunnel path, 4 of originating-only (egress-fou-originating-only.ts).
    assert.equal((out.match(/^ok /gm) ?? []).length, 15);
  });

  // The tests that skip their FoU steps on a kernel without FoU run whole here, none skipped.
  test('the FoU steps of fou.test.js, egress-dataplane.test.js and egress-spawns.test.js, skipped on this kernel, pass in the VM', { timeout: 300_000 }, async () => {
    const files = [join(repo, 'dist/src/netlink/fou.test.js'), join(here, 'egress-dataplane.test.js'), join(here, 'egress-spawns.test.js')];
    const { code, out, err } = await inVm([process.execPath, '--test', '--test-reporter=tap', ...files], { timeoutS: 280, show: (l) => /^\s*(not )?ok |^# (tests|pass|fail|skipped) /.test(l) });
    const count = (what: string): number => Number(new RegExp(`^# ${what} (\\d+)$`, 'm').exec(out)?.[1] ?? NaN);
    assert.equal(code, 0, `tests failed in the VM (rc ${code}):\n${out}\n${err.slice(-2000)}`);
    assert.deepEqual({ fail: count('fail'), skipped: count('skipped') }, { fail: 0, skipped: 0 });
    assert.ok(count('pass') >= 10, `${count('pass')} tests passed`);
  });

  // The netns tests whose FoU branch needs a node lab (a real API server and coild): on this
  // kernel they run their no-FoU branch, here their FoU one. The one skip allowed is the no-FoU
  // case's (kernelHas: npm test runs it on this machine). (egress-agent.test.js's test without
  // FoU only asserts less where there is FoU; its API servers are not worth the VM's minutes.)
  test('the FoU branches of egress-coild and coild-egress-only pass in the VM', { timeout: 900_000 }, async () => {
    const files = ['egress-coild.test.js', 'coild-egress-only.test.js'].map((f) => join(here, f));
    const { code, out, err } = await inVm([process.execPath, '--test', '--test-concurrency=1', '--test-reporter=tap', ...files], { timeoutS: 860, show: (l) => /^\s*(not )?ok |^# (tests|pass|fail|skipped) /.test(l) });
    const count = (what: string): number => Number(new RegExp(`^# ${what} (\\d+)$`, 'm').exec(out)?.[1] ?? NaN);
    assert.equal(code, 0, `tests failed in the VM (rc ${code}):\n${out}\n${err.slice(-2000)}`);
    const skips = [...out.matchAll(/^\s*ok \d+ - (.*) # SKIP (.*)$/gm)].map((m) => `${m[1]}: ${m[2]}`);
    assert.deepEqual(skips, ['ADD of a pod naming an Egress fails clearly without FoU, with an Event, leaving nothing behind: this kernel has fou, ipip: npm test on a kernel without FoU runs this step']);
    assert.match(out, /^\s*ok \d+ - with FoU, ADD sets up the client rules and the tunnel to the ClusterIP$/m);
    assert.equal(count('fail'), 0);
    assert.ok(count('pass') >= 7, `${count('pass')} tests passed`);
  });
});
