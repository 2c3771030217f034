/**
 * The VM tests' one way into the stock-kernel VM (hack/fou-vm.sh; this machine's kernel has no
 * FoU): why a VM test is skipped, and running a command there with its output collected and shown
 * as `# vm:` lines. Used by egress-fou-vm.test.ts and egress-failover-vm.test.ts.
 *
 * hack/setup.sh (run by `npm test`) installs qemu and the VM kernel, so the VM tests run on every
 * fresh clone. Without them (a machine set up by hand) they are skipped with the reason, and under
 * `CI=true` they fail instead (test/support/prerequisite.ts). `COIL_SKIP_VM=1` skips them on purpose
 * on a developer's machine; under `CI=true` it fails them as a missing prerequisite does.
 */
import { spawn, spawnSync } from 'node:child_process';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { prerequisite } from '../support/prerequisite.js';

const here = dirname(fileURLToPath(import.meta.url));
/** The repository root (this file runs from dist/test/netns). */
export const repo = resolve(here, '../../..');
const runner = join(repo, 'hack/fou-vm.sh');

/** Why the VM cannot run here: the runner's own answer (`--status`), so the test and the runner never disagree. */
function vmSkipReason(): string | undefined {
  const r = spawnSync(runner, ['--status'], { encoding: 'utf8' });
  return r.status === 0 ? undefined : (r.stdout.trim() || r.stderr.trim() || `${runner} --status exited ${r.status ?? r.signal}`);
}

/**
 * The skip reason of a VM test (undefined: run it), printed once with `what` when skipped.
 * @throws Error under CI=true when the VM cannot run (prerequisite's rule)
 */
export function vmSkip(what: string): string | undefined {
  const skip = prerequisite(process.env.COIL_SKIP_VM ? 'COIL_SKIP_VM is set' : vmSkipReason());
  if (skip) console.log(`# ${what} skipped: ${skip}`);
  return skip;
}

/** Options of {@link inVm}. */
export interface InVmOptions {
  /** Seconds before the runner kills the VM (FOU_VM_TIMEOUT); the test's own timeout must exceed it. */
  timeoutS: number;
  /** Which lines of the command's stdout to print as `# vm:` lines (all of them when it failed). Default: all. */
  show?: (line: string) => boolean;
}

/**
 * Runs `argv` in the VM from the repository root; prints the lines of its stdout that `show`
 * picks and the runner's timings as `# vm:` lines, and the console's tail when the VM failed.
 * @returns the exit code (the command's; 124 timeout; 125 the VM failed) and its output
 */
export async function inVm(argv: readonly string[], o: InVmOptions): Promise<{ code: number | null; out: string; err: string }> {
  const started = Date.now();
  // Without NODE_TEST_CONTEXT: a `node --test` in the VM would take itself for a child of this
  // runner and report in its private protocol instead of TAP.
  const { NODE_TEST_CONTEXT: _, ...env } = process.env;
  const child = spawn(runner, ['-v', '--', ...argv], {
    cwd: repo, env: { ...env, FOU_VM_TIMEOUT: String(o.timeoutS) }, stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout.on('data', (b: Buffer) => { out += b.toString(); });
  child.stderr.on('data', (b: Buffer) => { err += b.toString(); });
  const code = await new Promise<number | null>((r) => child.on('close', r));
  const seconds = ((Date.now() - started) / 1000).toFixed(1);
  const show = o.show ?? (() => true);
  for (const line of out.trim().split('\n')) if (show(line) || code !== 0) console.log(`# vm: ${line}`);
  console.log(`# vm: ${err.split('\n').filter((l) => l.startsWith('fou-vm:')).join(' | ')} (wall ${seconds} s)`);
  if (code === 125) console.log(`# vm console tail:\n${err.slice(-2000)}`);
  return { code, out, err };
}
