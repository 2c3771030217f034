/**
 * Real FoU tunnels, which this machine's kernel lacks: egress-fou-scenario.js runs inside a qemu
 * VM booting Debian's stock kernel over the host's filesystem (hack/fou-vm.sh). About 20 s here
 * without KVM (2 s of boot), most of it process starts, which are 20–70 times slower in the VM.
 *
 * Also runs fou.test.js and egress-dataplane.test.js in the VM, whose FoU steps skip on this
 * machine's kernel, so that they run whole somewhere on every CI run.
 *
 * hack/setup.sh (run by `npm test`) installs qemu and the VM kernel, so this runs on every fresh
 * clone. Without them (a machine set up by hand) it is skipped with the reason, and under
 * `CI=true` it fails instead (test/support/prerequisite.ts). `COIL_SKIP_VM=1` skips it on purpose.
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

/** Why the VM cannot run here: the runner's own answer (`--status`), so the test and the runner never disagree. */
function vmSkipReason(): string | undefined {
  const r = spawnSync(runner, ['--status'], { encoding: 'utf8' });
  return r.status === 0 ? undefined : (r.stdout.trim() || r.stderr.trim() || `${runner} --status exited ${r.status ?? r.signal}`);
}

const skip = process.env.COIL_SKIP_VM ? 'COIL_SKIP_VM is set' : prerequisite(vmSkipReason());
if (skip) console.log(`# egress FoU VM test skipped: ${skip}`);

/** Runs `argv` in the VM; prints the lines of its stdout that `show` picks and the runner's timings as `# vm:` lines. */
async function inVm(argv: readonly string[], show: (line: string) => boolean = () => true): Promise<{ code: number | null; out: string; err: string }> {
  const started = Date.now();
  // Without NODE_TEST_CONTEXT: a `node --test` in the VM would take itself for a child of this
  // runner and report in its private protocol instead of TAP.
  const { NODE_TEST_CONTEXT: _, ...env } = process.env;
  const child = spawn(runner, ['-v', '--', ...argv], {
    cwd: repo, env: { ...env, FOU_VM_TIMEOUT: '280' }, stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout.on('data', (b: Buffer) => { out += b.toString(); });
  child.stderr.on('data', (b: Buffer) => { err += b.toString(); });
  const code = await new Promise<number | null>((r) => child.on('close', r));
  const seconds = ((Date.now() - started) / 1000).toFixed(1);
  for (const line of out.trim().split('\n')) if (show(line) || code !== 0) console.log(`# vm: ${line}`);
  console.log(`# vm: ${err.split('\n').filter((l) => l.startsWith('fou-vm:')).join(' | ')} (wall ${seconds} s)`);
  if (code === 125) console.log(`# vm console tail:\n${err.slice(-2000)}`);
  return { code, out, err };
}

describe('egress FoU tunnels in a VM with a stock kernel', { skip }, () => {
  test('client → ClusterIP (DNAT) → egress pod → masquerade → target and back (v4, v6), sport auto via the flow device, originating-only (both backends), teardown', { timeout: 300_000 }, async () => {
    const { code, out, err } = await inVm([process.execPath, join(here, 'egress-fou-scenario.js')]);
    assert.equal(code, 0, `scenario failed (rc ${code}):\n${out}\n${err.slice(-2000)}`);
    assert.match(out, /ALL OK/);
    // 11 steps of the tunnel path, 4 of originating-only (egress-fou-originating-only.ts).
    assert.equal((out.match(/^ok /gm) ?? []).length, 15);
  });

  // The tests that skip their FoU steps on a kernel without FoU run whole here, none skipped.
  test('the FoU steps of fou.test.js and egress-dataplane.test.js, skipped on this kernel, pass in the VM', { timeout: 300_000 }, async () => {
    const files = [join(repo, 'dist/src/netlink/fou.test.js'), join(here, 'egress-dataplane.test.js')];
    const { code, out, err } = await inVm([process.execPath, '--test', '--test-reporter=tap', ...files], (l) => /^\s*(not )?ok |^# (tests|pass|fail|skipped) /.test(l));
    const count = (what: string): number => Number(new RegExp(`^# ${what} (\\d+)$`, 'm').exec(out)?.[1] ?? NaN);
    assert.equal(code, 0, `tests failed in the VM (rc ${code}):\n${out}\n${err.slice(-2000)}`);
    assert.deepEqual({ fail: count('fail'), skipped: count('skipped') }, { fail: 0, skipped: 0 });
    assert.ok(count('pass') >= 10, `${count('pass')} tests passed`);
  });
});
