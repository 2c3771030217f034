/**
 * A small, deterministic YAML writer for the manifests `coil-migrator dump` prints and for
 * `kubectl coil … -o yaml`: maps with
 * keys sorted (as the original's unstructured conversion did), block style, lists indented like
 * sigs.k8s.io/yaml (`- ` at the parent key's column), every document preceded by `---`.
 *
 * Written here rather than taken from a library because the program must run from the image's
 * production dependencies, and the `yaml` package is a dev dependency; the objects are plain
 * JSON (strings, integers, booleans, maps, lists), which keeps this short.
 *
 * @see docs/migration-from-coil-v1.md#its-output-format
 */

/** JSON-like value the writer accepts. `undefined` map entries are left out. */
export type YamlValue = string | number | boolean | null | undefined | readonly YamlValue[] | { readonly [key: string]: YamlValue };

/**
 * Renders `docs` as a multi-document stream, each document starting with `---\n`.
 * @throws TypeError on a non-finite number or a non-JSON value (a bug in the caller)
 */
export function toYamlDocuments(docs: readonly YamlValue[]): string {
  return docs.map((d) => `---\n${render(d, 0)}`).join('');
}

function render(value: YamlValue, indent: number): string {
  if (isMap(value)) {
    const keys = Object.keys(value).filter((k) => value[k] !== undefined).sort(compare);
    if (keys.length === 0) return `${pad(indent)}{}\n`;
    return keys.map((k) => entry(scalar(k), value[k], indent)).join('');
  }
  if (Array.isArray(value)) return value.length === 0 ? `${pad(indent)}[]\n` : value.map((v) => item(v, indent)).join('');
  return `${pad(indent)}${scalar(value as string | number | boolean | null)}\n`;
}

/** `key: value`, or `key:` followed by the nested block. */
function entry(key: string, value: YamlValue, indent: number): string {
  if (isMap(value) && Object.keys(value).some((k) => value[k] !== undefined)) return `${pad(indent)}${key}:\n${render(value, indent + 2)}`;
  if (Array.isArray(value) && value.length > 0) return `${pad(indent)}${key}:\n${render(value, indent)}`;
  if (isMap(value)) return `${pad(indent)}${key}: {}\n`;
  if (Array.isArray(value)) return `${pad(indent)}${key}: []\n`;
  return `${pad(indent)}${key}: ${scalar(value as string | number | boolean | null)}\n`;
}

/** `- value`; a map's first key goes on the dash line, the rest under it. */
function item(value: YamlValue, indent: number): string {
  if ((isMap(value) && Object.keys(value).some((k) => value[k] !== undefined)) || (Array.isArray(value) && value.length > 0)) {
    const nested = render(value, indent + 2);
    return `${pad(indent)}- ${nested.slice(indent + 2)}`;
  }
  return `${pad(indent)}- ${render(value, 0)}`;
}

const PLAIN = /^[A-Za-z0-9_][A-Za-z0-9_./-]*$/;
const RESERVED_WORDS = /^(y|Y|yes|Yes|YES|n|N|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF|null|Null|NULL|~)$/;
const NUMBER_LIKE = /^[-+]?(\.?[0-9][0-9_]*(\.[0-9_]*)?([eE][-+]?[0-9]+)?|0x[0-9a-fA-F_]+|0o?[0-7_]+|\.(inf|Inf|INF|nan|NaN|NAN))$/;
const DATE_LIKE = /^[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}/;

/**
 * A scalar: strings stay plain when no YAML 1.1 or 1.2 reader could take them for anything else
 * (so `"true"` and `"5"` are quoted but `10.64.0.0/25` is not); otherwise a JSON string, which is
 * a valid YAML double-quoted scalar.
 */
function scalar(value: string | number | boolean | null): string {
  if (value === null) return 'null';
  if (typeof value === 'boolean') return String(value);
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw new TypeError(`cannot write ${value} as YAML`);
    return String(value);
  }
  if (typeof value !== 'string') throw new TypeError(`cannot write ${typeof value} as YAML`);
  const plain = PLAIN.test(value) && !RESERVED_WORDS.test(value) && !NUMBER_LIKE.test(value) && !DATE_LIKE.test(value);
  return plain ? value : JSON.stringify(value);
}

function isMap(v: YamlValue): v is { readonly [key: string]: YamlValue } {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function pad(n: number): string {
  return ' '.repeat(n);
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
