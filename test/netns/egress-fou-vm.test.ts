/**
 * Real FoU tunnels, which this machine's kernel lacks: egress-fou-scenario.js runs inside a qemu
 * VM booting Debian's stock kernel over the host's filesystem (../shared/bench/fou-vm.sh, see
 * ../shared/reference/fou-in-qemu.md). About 60–130 s under TCG, most of it process starts.
 *
 * Runs only when the VM tooling works here: root, qemu-system-x86_64 on PATH, the runner script,
 * and its kernel cache already set up (`fou-vm.sh --setup`, which needs apt and the network, is
 * never started by a test). `COIL_SKIP_VM=1` skips it. Each skip prints its reason.
 */
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const runner = process.env.FOU_VM_SCRIPT ?? resolve(here, '../../../../shared/bench/fou-vm.sh');
const cache = process.env.FOU_VM_CACHE ?? join(process.env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'fou-vm');

function vmSkipReason(): string | undefined {
  if (process.env.COIL_SKIP_VM) return 'COIL_SKIP_VM is set';
  if (process.getuid?.() !== 0) return 'the FoU VM needs root (9p export of /, netns inside)';
  if (!existsSync(runner)) return `no VM runner at ${runner} (set FOU_VM_SCRIPT)`;
  if (spawnSync('sh', ['-c', 'command -v qemu-system-x86_64']).status !== 0) return 'qemu-system-x86_64 is not installed (fou-vm.sh --setup installs it)';
  if (!existsSync(join(cache, 'root', 'vmlinux'))) return `no VM kernel in ${cache} (run ${runner} --setup once)`;
  return undefined;
}

const skip = vmSkipReason();
if (skip) console.log(`# egress FoU VM test skipped: ${skip}`);

describe('egress FoU tunnels in a VM with a stock kernel', { skip }, () => {
  test('client → ClusterIP (DNAT) → egress pod → masquerade → target and back (v4, v6), sport auto via the flow device, originating-only (both backends), teardown', { timeout: 300_000 }, async () => {
    const started = Date.now();
    const child = spawn(runner, ['-v', '--', process.execPath, join(here, 'egress-fou-scenario.js')], {
      cwd: resolve(here, '../../..'), env: { ...process.env, FOU_VM_TIMEOUT: '280' }, stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (b: Buffer) => { out += b.toString(); });
    child.stderr.on('data', (b: Buffer) => { err += b.toString(); });
    const code = await new Promise<number | null>((r) => child.on('close', r));
    const seconds = ((Date.now() - started) / 1000).toFixed(1);
    for (const line of out.trim().split('\n')) console.log(`# vm: ${line}`);
    console.log(`# vm: ${err.split('\n').filter((l) => l.startsWith('fou-vm:')).join(' | ')} (wall ${seconds} s)`);
    if (code === 125) console.log(`# vm console tail:\n${err.slice(-2000)}`);
    assert.equal(code, 0, `scenario failed (rc ${code}):\n${out}\n${err.slice(-2000)}`);
    assert.match(out, /ALL OK/);
    // 11 steps of the tunnel path, 4 of originating-only (egress-fou-originating-only.ts).
    assert.equal((out.match(/^ok /gm) ?? []).length, 15);
  });
});
