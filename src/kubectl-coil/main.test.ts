/**
 * main.ts's last line of defence: an uncaught exception or an unhandled rejection — thrown here
 * from a timer a preloaded module sets, after main.ts has installed its handlers — prints one line
 * and exits 1, as a load failure of the commands does (test/kubectl-coil-krew.test.ts runs the
 * built executable for the errors run.ts lets through).
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const run = promisify(execFile);
const MAIN = fileURLToPath(new URL('./main.js', import.meta.url));

async function withPreload(source: string): Promise<{ code: number; stdout: string; stderr: string }> {
  const preload = `data:text/javascript,${encodeURIComponent(source)}`;
  return run(process.execPath, ['--import', preload, MAIN, 'version', '--client'], { env: { PATH: '/usr/bin:/bin' } }).then(
    (r) => ({ code: 0, ...r }),
    (e: { code: number; stdout: string; stderr: string }) => e,
  );
}

test('an uncaught exception is one line, exit 1', async () => {
  const r = await withPreload("setTimeout(() => { throw new RangeError('late\\n    at nowhere (x.js:1:1)'); }, 0);");
  assert.equal(r.code, 1);
  assert.equal(r.stderr, 'kubectl coil: RangeError: late at nowhere (x.js:1:1)\n');
});

test('an unhandled rejection is one line, exit 1', async () => {
  const r = await withPreload("setTimeout(() => { Promise.reject(new Error('nobody waited', { cause: new Error('the cause') })); }, 0);");
  assert.equal(r.code, 1);
  assert.equal(r.stderr, 'kubectl coil: nobody waited: the cause\n');
});
