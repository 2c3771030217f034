/**
 * The reporter of `npm test` (and so of CI, `.ci/run`): node --test's spec reporter, plus a list of
 * the run's skips printed just before the run's counts, which still end the output. Under
 * `CI=true` a skip whose reason is not a kernel-module skip ({@link KERNEL_SKIP}: this kernel
 * lacks FoU, and the VM test that runs the step is named) fails the run (exit status 1): CI runs
 * after hack/setup.sh on a fresh clone, where any other skip hides a test that never runs
 * (test/support/prerequisite.ts).
 *
 * Usage: node --test --test-reporter=./dist/test/support/skip-reporter.js --test-reporter-destination=stdout …
 */
import { spec } from 'node:test/reporters';
import { KERNEL_SKIP } from './prerequisite.js';

/** One skipped (or todo) test as node --test reports it. */
export interface SkippedTest {
  readonly name: string;
  readonly file: string | undefined;
  readonly reason: string;
}

/** Whether `s` may be skipped in a CI run: a kernel-module skip, nothing else (a todo never). */
export function allowedInCi(s: SkippedTest): boolean {
  return KERNEL_SKIP.test(s.reason);
}

/**
 * The lines printed before the counts: each skip not allowed under CI, and how many skips there
 * were. `ci` says whether they fail the run.
 */
export function skipVerdict(skips: readonly SkippedTest[], ci: boolean): { lines: string[]; fail: boolean } {
  const bad = skips.filter((s) => !allowedInCi(s));
  const lines = [`skips: ${skips.length}, of which kernel-module skips (allowed in CI): ${skips.length - bad.length}`];
  for (const s of bad) lines.push(`${ci ? 'not allowed under CI=true' : 'would fail under CI=true'}: ${s.name}${s.file ? ` (${s.file})` : ''}: ${s.reason}`);
  return { lines, fail: ci && bad.length > 0 };
}

interface TestEvent {
  type: string;
  data: { name?: string; file?: string; skip?: string | boolean; todo?: string | boolean; nesting?: number; message?: string };
}

/** spec, with the run's skips listed before its counts (and failing the run under CI=true, see above). */
export default async function* skipGuardReporter(source: AsyncIterable<TestEvent>): AsyncGenerator<string> {
  const inner = new spec();
  const drain = function* (): Generator<string> {
    for (let chunk = inner.read() as unknown; chunk !== null; chunk = inner.read() as unknown) yield String(chunk);
  };
  const skips: SkippedTest[] = [];
  let reported = false;
  for await (const event of source) {
    const d = event.data;
    if ((event.type === 'test:pass' || event.type === 'test:fail') && (d.skip !== undefined || d.todo !== undefined)) {
      const why = d.skip ?? d.todo;
      skips.push({ name: d.name ?? '?', file: d.file, reason: `${d.todo !== undefined ? 'todo: ' : ''}${typeof why === 'string' ? why : '(no reason given)'}` });
    }
    // The runner's counts start with "tests N" at the top level: the verdict goes just before them.
    if (!reported && event.type === 'test:diagnostic' && d.nesting === 0 && /^tests \d+$/.test(d.message ?? '')) {
      reported = true;
      const v = skipVerdict(skips, process.env.CI === 'true');
      if (v.fail) process.exitCode = 1;
      yield v.lines.map((l, i) => `${v.fail && i > 0 ? '✖' : 'ℹ'} ${l}\n`).join('');
    }
    inner.write(event);
    yield* drain();
  }
  inner.end();
  yield* drain();
}
