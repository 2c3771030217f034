/**
 * Every skip of the suite fails under `CI=true` except the kernel-module skips, each naming the VM
 * test that runs the step (test/support/prerequisite.ts): the sources are read for skips
 * (test/support/skip-audit.ts), and npm test's reporter lists a run's skips and fails a CI run on
 * any other (test/support/skip-reporter.ts), its counts still last.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { auditSkips, type Source } from './support/skip-audit.js';
import { skipVerdict } from './support/skip-reporter.js';
import { vmSkip } from './netns/fou-vm.js';

const root = fileURLToPath(new URL('../../', import.meta.url));
const reporter = fileURLToPath(new URL('./support/skip-reporter.js', import.meta.url));

/** The guard's own files, which name the forms they refuse. */
const GUARD = ['test/skip-guard.test.ts', 'test/support/skip-audit.ts', 'test/support/skip-reporter.ts'];

async function sources(dir: string): Promise<Source[]> {
  const out: Source[] = [];
  for (const entry of await readdir(join(root, dir), { withFileTypes: true })) {
    const path = `${dir}/${entry.name}`;
    if (entry.isDirectory()) out.push(...(await sources(path)));
    else if (entry.name.endsWith('.ts') && !GUARD.includes(path)) out.push({ path, text: await readFile(join(root, path), 'utf8') });
  }
  return out;
}

describe('the skips in the sources', () => {
  test('every skip in src/ and test/ comes from prerequisite(), vmSkip() or a kernel-module skip whose VM test runs the file', async () => {
    assert.deepEqual(auditSkips([...(await sources('src')), ...(await sources('test'))]), []);
  });

  test('the constructs that stayed silent under CI=true are found', () => {
    const vm = { path: 'test/netns/egress-fou-vm.test.ts', text: "const files = [join(repo, 'dist/src/netlink/fou.test.js')];" };
    const found = auditSkips([vm,
      { path: 'test/netns/a.test.ts', text: "describe('x', { skip: labSkipReason() }, () => {});" },
      { path: 'test/netns/b.test.ts', text: "for (const v of V) describe(`y ${v}`, { skip: netnsSkipReason() }, () => {});" },
      { path: 'src/netlink/fou.test.ts', text: "test('z', (t) => {\n  if (!agent.isUsable) return t.skip(`${agent.runtimePath} missing`);\n});" },
      { path: 'test/netns/c.test.ts', text: "const skip = process.env.X ? 'X is set' : undefined;\ndescribe('w', { skip }, () => {});" },
      { path: 'test/netns/d.test.ts', text: "it.skip('later', () => {});\ntest('t', { todo: 'soon' }, () => {});" },
      { path: 'test/netns/egress-coild.test.ts', text: "if (!hasFou) return t.skip(kernelLacks(missing, 'test/netns/egress-fou-vm.test.ts'));" },
    ]);
    assert.deepEqual(found.map((f) => f.replace(/: .*/, '')), [
      'test/netns/a.test.ts:1', 'test/netns/b.test.ts:1', 'src/netlink/fou.test.ts:2', 'test/netns/c.test.ts:2', 'test/netns/d.test.ts:1', 'test/netns/d.test.ts:2', 'test/netns/egress-coild.test.ts:1',
    ], found.join('\n'));
    assert.match(found.at(-1)!, /file list lacks egress-coild\.test\.js: the skipped step runs nowhere/);
  });

  test('the allowed forms pass: prerequisite(), a variable given only that, vmSkip(), a kernel-module skip its VM test runs', () => {
    const vm = { path: 'test/netns/egress-fou-vm.test.ts', text: "const files = ['egress-dataplane.test.js'];" };
    assert.deepEqual(auditSkips([vm,
      { path: 'test/netns/a.test.ts', text: "describe('x', { skip: prerequisite(labSkipReason()) }, () => {});" },
      { path: 'test/netns/b.test.ts', text: "const skip = prerequisite(netnsSkipReason() ?? (ok ? undefined : 'missing'));\ndescribe('y', { skip }, () => {});" },
      { path: 'test/netns/c.test.ts', text: "const skip = vmSkip('egress FoU VM test');\ndescribe('z', { skip }, () => {});" },
      { path: 'test/netns/egress-dataplane.test.ts', text: "let fouSkip: string | undefined;\nfouSkip = kernelLacks(missing, 'test/netns/egress-fou-vm.test.ts');\nif (fouSkip) return t.skip(fouSkip);" },
    ]), []);
  });
});

describe('the run\'s skips (npm test\'s reporter)', () => {
  const kernel = { name: 'k', file: 'f', reason: 'this kernel lacks fou, ipip: test/netns/egress-fou-vm.test.ts runs this step in a VM with a stock kernel' };
  test('only kernel-module skips naming their VM test pass under CI=true', () => {
    assert.deepEqual(skipVerdict([kernel], true), { lines: ['skips: 1, of which kernel-module skips (allowed in CI): 1'], fail: false });
    const v = skipVerdict([kernel, { name: 'n', file: 'g', reason: 'COIL_SKIP_VM is set' }, { name: 'm', file: undefined, reason: 'this kernel lacks fou (somewhere)' }], true);
    assert.equal(v.fail, true);
    assert.deepEqual(v.lines.slice(1), ['not allowed under CI=true: n (g): COIL_SKIP_VM is set', 'not allowed under CI=true: m: this kernel lacks fou (somewhere)']);
    assert.equal(skipVerdict([{ name: 'n', file: 'g', reason: 'x' }], false).fail, false, 'outside CI a skip is listed only');
  });

  test('a run with another skip exits 1 under CI=true and 0 without; its counts still end the output', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'coil-skip-guard-'));
    try {
      const file = join(dir, 'x.test.mjs');
      await writeFile(file, [
        "import { describe, test } from 'node:test';",
        "test('runs', () => {});",
        `test('kernel', (t) => t.skip(${JSON.stringify(kernel.reason)}));`,
        "describe('suite', { skip: 'no root here' }, () => { test('inner', () => {}); });",
      ].join('\n'));
      const run = (ci: boolean) => new Promise<{ code: number | null; stdout: string }>((resolve) => {
        const { NODE_TEST_CONTEXT: _, CI: __, ...env } = process.env;
        execFile(process.execPath, ['--test', `--test-reporter=${reporter}`, '--test-reporter-destination=stdout', file], { env: { ...env, ...(ci ? { CI: 'true' } : {}) } },
          (err, stdout) => resolve({ code: err ? (err as { code?: number }).code ?? null : 0, stdout }));
      });
      const ci = await run(true);
      assert.equal(ci.code, 1, ci.stdout);
      assert.match(ci.stdout, /✖ not allowed under CI=true: suite \(.*x\.test\.mjs\): no root here\n/);
      assert.match(ci.stdout, /ℹ skipped 1\nℹ todo 0\nℹ duration_ms [\d.]+\n$/, 'the counts end the output');
      const dev = await run(false);
      assert.equal(dev.code, 0, dev.stdout);
      assert.match(dev.stdout, /ℹ would fail under CI=true: suite/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

test('COIL_SKIP_VM fails a VM test under CI=true, as a missing prerequisite does', () => {
  const saved = { CI: process.env.CI, COIL_SKIP_VM: process.env.COIL_SKIP_VM };
  try {
    process.env.CI = 'true';
    process.env.COIL_SKIP_VM = '1';
    assert.throws(() => vmSkip('a VM test'), /CI=true, and this test cannot run here: COIL_SKIP_VM is set/);
  } finally {
    for (const [k, v] of Object.entries(saved)) if (v === undefined) delete process.env[k]; else process.env[k] = v;
  }
});
