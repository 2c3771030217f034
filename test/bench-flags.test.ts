/**
 * hack/bench/bench-flags.ts: a flag value a benchmark itself finds bad (an item of a list flag,
 * checked in its main) exits 2 naming the flag, as one the flag table refuses does, and starts
 * nothing; not 1 with a stack trace, the exit of a benchmark that failed.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const scale = fileURLToPath(new URL('../hack/bench/scale.js', import.meta.url));

function run(args: string[]): Promise<{ code: number | null; stderr: string; stdout: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [scale, ...args], { timeout: 30_000 }, (err, stdout, stderr) => resolve({ code: err ? (err as { code?: number }).code ?? null : 0, stderr, stdout }));
  });
}

test('a bad item of a list flag exits 2 naming the flag, before anything starts', async () => {
  for (const [args, message] of [
    [['--controller-concurrency=16,0'], /^scale: --controller-concurrency: expected integers in \[1, 1024\], got "16,0"\n$/],
    [['--controller-concurrency=many'], /^scale: --controller-concurrency: expected integers/],
    [['--nodes=100,x'], /^scale: --nodes: expected positive integers, got "100,x"\n$/],
    [['--controller-concurrency=16,64', '--phases=cold', '--drop-block=3'], /^scale: --drop-block: 3 names no cold start \(there are 2: one per --controller-concurrency value\)\n$/],
    [['--drop-block=1'], /^scale: --drop-block: needs --phases=cold \(the node that lost its block stays dead\), got "cold,churn,handover,scaledown,apiserver"\n$/],
  ] as const) {
    const r = await run([...args]);
    assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, message);
    assert.equal(r.stdout, '', 'nothing started');
  }
});
