/**
 * The other half of src/runtime/json-patch.ts, needed only by tests: applying an RFC 6902 patch
 * (add/remove/replace/test) to check that a created patch turns `from` into `to`.
 */
import type { JsonPatchOp } from '../../src/runtime/client.js';
import { deepEqual } from '../../src/runtime/json-patch.js';

/**
 * Applies `ops` (add/remove/replace/test) to a copy of `doc`; used by tests to check that
 * the patches of src/runtime/json-patch.ts round-trip. @throws Error on a failed `test` or a missing path
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

function unescape(part: string): string {
  return part.replace(/~1/g, '/').replace(/~0/g, '~');
}
