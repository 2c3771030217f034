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

/**
 * Applies `ops` (add/remove/replace/test) to a copy of `doc`; used by tests and fakes to check
 * patches round-trip. @throws Error on a failed `test` or a missing path
 */
export function applyJsonPatch<T>(doc: T, ops: readonly JsonPatchOp[]): T {
  let root: unknown = structuredClone(doc);
  for (const op of ops) {
    const parts = op.path === '' ? [] : op.path.slice(1).split('/').map(unescape);
    if (parts.length === 0) {
      if (op.op === 'test') {
        if (!deepEqual(root, op.value)) throw new Error(`test failed at ${op.path}`);
      } else root = structuredClone(op.value);
      continue;
    }
    const last = parts.pop()!;
    let parent: any = root;
    for (const p of parts) {
      parent = parent?.[Array.isArray(parent) ? Number(p) : p];
      if (parent === undefined) throw new Error(`path not found: ${op.path}`);
    }
    const arr = Array.isArray(parent);
    const idx = arr ? (last === '-' ? parent.length : Number(last)) : last;
    switch (op.op) {
      case 'add':
        if (arr) parent.splice(idx, 0, structuredClone(op.value));
        else parent[idx] = structuredClone(op.value);
        break;
      case 'replace':
        if (!(idx in parent)) throw new Error(`path not found: ${op.path}`);
        parent[idx] = structuredClone(op.value);
        break;
      case 'remove':
        if (!(idx in parent)) throw new Error(`path not found: ${op.path}`);
        if (arr) parent.splice(idx, 1);
        else delete parent[idx];
        break;
      case 'test':
        if (!deepEqual(parent[idx], op.value)) throw new Error(`test failed at ${op.path}`);
        break;
      default:
        throw new Error(`unsupported op ${op.op}`);
    }
  }
  return root as T;
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

function unescape(part: string): string {
  return part.replace(/~1/g, '/').replace(/~0/g, '~');
}
