/**
 * The scale benchmark itself (hack/bench/scale.ts) at 3 nodes, cold start only, run twice
 * (`--controller-concurrency=1,2`), with `--drop-block=2`: after the second cold start served
 * every node the bench deletes one node's block, and that cold start must count the node lost —
 * though every node released its block after the first cold start, which the census once took for
 * a release of this one (docs/performance.md#scale). Real apiserver, coil-controller and kwok.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const scale = fileURLToPath(new URL('../../hack/bench/scale.js', import.meta.url));

test('a block lost in the second cold start of a run is counted lost, in its table and its figures', { timeout: 600_000 }, async () => {
  const dir = await mkdtemp(join(tmpdir(), 'coil-scale-census-'));
  try {
    const out = join(dir, 'figures.jsonl');
    const args = ['--nodes=3', '--phases=cold', '--controller-concurrency=1,2', '--drop-block=2', '--cooling-period=3s', '--block-release-grace=3s', '--profile-seconds=1', `--out=${out}`, `--out-dir=${dir}`];
    const r = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
      execFile(process.execPath, [scale, ...args], { timeout: 540_000, maxBuffer: 16 << 20 }, (err, stdout, stderr) => resolve({ code: err ? (err as { code?: number }).code ?? null : 0, stdout, stderr }));
    });
    assert.equal(r.code, 0, `${r.stdout}\n${r.stderr}`);
    const fig = JSON.parse((await readFile(out, 'utf8')).trim()) as { coldByConcurrency: Record<string, { lost: number; duplicates: number; notServed: number }> };
    assert.deepEqual(Object.keys(fig.coldByConcurrency), ['1', '2']);
    assert.equal(fig.coldByConcurrency['1']!.notServed, 0, r.stdout);
    assert.equal(fig.coldByConcurrency['2']!.notServed, 0, r.stdout);
    assert.equal(fig.coldByConcurrency['1']!.lost, 0, 'the first cold start lost nothing');
    assert.equal(fig.coldByConcurrency['2']!.lost, 1, `the block deleted in the second cold start is counted lost:\n${r.stdout}`);
    // Each cold start's table prints its lost count; the second names the block the bench deleted.
    const lostRows = [...r.stdout.matchAll(/^\| nodes served a block and without one now \(lost;[^|]*\| (\d+)([^|]*)\|$/gm)];
    assert.deepEqual(lostRows.map((m) => m[1]), ['0', '1'], r.stdout);
    assert.match(lostRows[1]![2]!, /--drop-block: default-\d+ of node-\d+, whose stand-in was stopped, deleted by the bench/);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
