/**
 * The one-file `kubectl-coil` an admin copies out of the image (hack/image/bundle.ts
 * bundleKubectlCoil; README, "Operate"): built from tsc's output, it runs by itself — its own
 * `#!/usr/bin/env node` line, nothing loaded from beside it — and answers as the plugin does.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { copyFile, mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { promisify } from 'node:util';
import { bundleKubectlCoil } from '../hack/image/bundle.js';
import { KUBECTL_COIL_VERSION } from '../src/kubectl-coil/version.js';

const run = promisify(execFile);
let dir = '';
let tool = '';

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kubectl-coil-bundle-'));
  await bundleKubectlCoil(join(dir, 'built'));
  // Alone in a directory of its own, as on an admin's PATH.
  await run('mkdir', [join(dir, 'bin')]);
  tool = join(dir, 'bin', 'kubectl-coil');
  await copyFile(join(dir, 'built'), tool);
  await run('chmod', ['0755', tool]);
});
after(() => (dir ? rm(dir, { recursive: true, force: true }) : undefined));

test('the bundle is one executable file that runs by itself on Node', async () => {
  assert.ok(((await stat(tool)).mode & 0o111) !== 0);
  const env = { PATH: `${join(process.execPath, '..')}:/usr/bin:/bin`, HOME: dir };
  assert.equal((await run(tool, ['version'], { env, cwd: dir })).stdout, `kubectl-coil ${KUBECTL_COIL_VERSION}\n`);
  const help = await run(tool, ['ipam', 'release', '--help'], { env, cwd: dir });
  assert.match(help.stdout, /--from-report stringArray/);
  const bad = await run(tool, ['ipam', 'check', '--kubeconfig', join(dir, 'missing')], { env, cwd: dir }).catch((e: { code: number; stderr: string }) => e);
  assert.equal((bad as { code: number }).code, 2);
  assert.match((bad as { stderr: string }).stderr, /^kubectl coil: --kubeconfig: cannot load .*missing/);
});
