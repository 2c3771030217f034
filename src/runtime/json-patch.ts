import type { JsonPatchOp } from './client.js';

/**
 * Computes an RFC 6902 patch turning `from` into `to` (both plain JSON). Objects are diffed key
 * by key; arrays of equal length element by element; arrays whose length changed are replaced
 * whole, which keeps the patch valid without a list-diff algorithm (defaulting rarely reorders).
 * `undefined`-valued keys count as absent, as in JSON.
 *
 * @see RFC 6902 (ops), RFC 6901 (pointer escaping: `~` → `~0`, `/` → `~1`)
 */
export function createJsonPatch(from: unknown, to: unknown, path = ''): JsonPatchOp[] {
  if (deepEqual(from, to)) return [];
  if (isObject(from) && isObject(to)) {
    const ops: JsonPatchOp[] = [];
    for (const key of Object.keys(from)) {
      if (from[key] !== undefined && (!(key in to) || to[key] === undefined)) ops.push({ op: 'remove', path: `${path}/${escape(key)}` });
    }
    for (const [key, value] of Object.entries(to)) {
      if (value === undefined) continue;
      const p = `${path}/${escape(key)}`;
      if (!(key in from) || from[key] === undefined) ops.push({ op: 'add', path: p, value });
      else ops.push(...createJsonPatch(from[key], value, p));
    }
    return ops;
  }
  if (Array.isArray(from) && Array.isArray(to) && from.length === to.length) {
    return from.flatMap((v, i) => createJsonPatch(v, to[i], `${path}/${i}`));
  }
  return [{ op: 'replace', path: path, value: to }];
}

/** Structural equality of JSON values (key order ignored). */
export function deepEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (Array.isArray(a) || Array.isArray(b)) {
    return Array.isArray(a) && Array.isArray(b) && a.length === b.length && a.every((v, i) => deepEqual(v, b[i]));
  }
  if (isObject(a) && isObject(b)) {
    const ka = Object.keys(a).filter((k) => a[k] !== undefined);
    const kb = Object.keys(b).filter((k) => b[k] !== undefined);
    return ka.length === kb.length && ka.every((k) => deepEqual(a[k], b[k]));
  }
  return false;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function escape(key: string): string {
  return key.replace(/~/g, '~0').replace(/\//g, '~1');
}
