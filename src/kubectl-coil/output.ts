/**
 * How `kubectl coil` prints: kubectl's conventions — a table with upper-case headers by default,
 * more columns with `-o wide`, the whole object with `-o json` or `-o yaml`.
 */
import { toYamlDocuments, type YamlValue } from '../runtime/yaml-out.js';
import type { Output } from './flags.js';

/** Fixed-width columns separated by three spaces (kubectl's printer); the first row is the header. */
export function formatTable(rows: readonly (readonly string[])[]): string {
  const widths: number[] = [];
  for (const r of rows) r.forEach((c, i) => (widths[i] = Math.max(widths[i] ?? 0, c.length)));
  return rows.map((r) => r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]!))).join('   ').trimEnd()).join('\n') + '\n';
}

/** `value` as JSON or YAML; bigints become decimal strings. */
export function formatObject(value: unknown, output: 'json' | 'yaml'): string {
  const plain = JSON.parse(JSON.stringify(value, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v))) as YamlValue;
  return output === 'json' ? `${JSON.stringify(plain, null, 2)}\n` : toYamlDocuments([plain]).replace(/^---\n/, '');
}

/** Whether `output` prints an object rather than a table. */
export function isStructured(output: Output): output is 'json' | 'yaml' {
  return output === 'json' || output === 'yaml';
}
