/**
 * How `kubectl coil` prints: kubectl's conventions — a table with upper-case headers by default,
 * more columns with `-o wide`, the whole object with `-o json` or `-o yaml`.
 */
import { formatTable as textTable } from '../runtime/text-table.js';
import { toYamlDocuments, type YamlValue } from '../runtime/yaml-out.js';
import type { Output } from './flags.js';

/** Fixed-width columns separated by three spaces (kubectl's printer), newline-terminated; the first row is the header. */
export function kubectlTable(rows: readonly (readonly string[])[]): string {
  return `${textTable(rows, 3)}\n`;
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
