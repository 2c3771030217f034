/**
 * Reads test sources for skips (test/skip-guard.test.ts): every `skip` option and `t.skip(…)` must
 * take its reason from {@link prerequisite} (it fails under `CI=true`), `vmSkip` (the VM tests',
 * built on it), or a kernel-module skip (`kernelLacks`/`kernelHas`), whose named VM test must
 * run the file; `describe.skip`, `it.skip`, `test.skip` and todos are refused. A text scan, not a
 * parser: a skip it cannot read (a reason computed inline) is reported, to be rewritten plainly.
 */
import { basename } from 'node:path';

/** A source file: its path from the repository root and its text. */
export interface Source {
  readonly path: string;
  readonly text: string;
}

/** The calls a skip's reason may come from. */
const ALLOWED = /^(prerequisite|vmSkip|kernelLacks|kernelHas)\(/;

/** Whether `value` (an expression's text) is an allowed reason in `text`: an allowed call, `undefined`, or a variable only ever given those. */
function allowedValue(value: string, text: string, seen = new Set<string>()): boolean {
  const v = value.trim();
  if (ALLOWED.test(v) || v === 'undefined') return true;
  if (!/^[A-Za-z_$][\w$]*$/.test(v) || seen.has(v)) return false;
  seen.add(v);
  const given: string[] = [];
  for (const m of text.matchAll(new RegExp(`\\b(?:const|let|var)\\s+${v}\\b(?:\\s*:[^=;\\n]+)?(?:\\s*=\\s*([^;\\n]+))?`, 'g'))) given.push(m[1] ?? 'undefined');
  for (const m of text.matchAll(new RegExp(`(?<![\\w$.])${v}\\s*=(?![=>])\\s*([^;\\n]+)`, 'g'))) given.push(m[1]!);
  return given.length > 0 && given.every((g) => allowedValue(g, text, seen));
}

const line = (text: string, index: number): number => text.slice(0, index).split('\n').length;

/**
 * @param sources the files to read (src/ and test/ TypeScript)
 * @returns one line per skip that breaks the rule (`path:line: what`); empty when all keep it
 */
export function auditSkips(sources: readonly Source[]): string[] {
  const out: string[] = [];
  const byPath = new Map(sources.map((s) => [s.path, s.text]));
  for (const { path, text } of sources) {
    const at = (i: number, what: string) => out.push(`${path}:${line(text, i)}: ${what}`);
    for (const m of text.matchAll(/\b(describe|suite|it|test)\.(skip|todo)\b/g)) at(m.index, `${m[0]}: skip with prerequisite() or a kernel-module skip instead`);
    for (const m of text.matchAll(/\btodo\s*:/g)) at(m.index, 'a todo test: CI counts it as not run');
    for (const m of text.matchAll(/[{,]\s*skip\s*:\s*([^,}\n]+(?:\([^)]*\))?)/g)) {
      if (!allowedValue(m[1]!, text)) at(m.index, `skip: ${m[1]!.trim()} — not from prerequisite(), vmSkip() or a kernel-module skip`);
    }
    for (const m of text.matchAll(/[{,]\s*skip\s*(?=[,}])/g)) {
      if (!allowedValue('skip', text)) at(m.index, '{ skip }: the variable is not from prerequisite(), vmSkip() or a kernel-module skip');
    }
    for (const m of text.matchAll(/\b(?!(?:describe|suite|it|test)\.)\w+\.skip\(([^)]*(?:\([^)]*\))?[^)]*)\)/g)) {
      if (!allowedValue(m[1]!, text) || m[1]!.trim() === '') at(m.index, `${m[0]} — not from prerequisite() or a kernel-module skip`);
    }
    for (const m of text.matchAll(/\bkernelLacks\([^,]+,\s*'([^']+)'\)/g)) {
      const vm = byPath.get(m[1]!);
      const compiled = `${basename(path, '.ts')}.js`;
      if (vm === undefined) at(m.index, `kernelLacks names ${m[1]}, which is not a source here`);
      else if (!vm.includes(compiled)) at(m.index, `kernelLacks names ${m[1]}, whose file list lacks ${compiled}: the skipped step runs nowhere`);
    }
  }
  return out;
}
