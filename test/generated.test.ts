import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';
import { renderGeneratedFiles } from '../hack/generate.js';

const root = fileURLToPath(new URL('../../', import.meta.url));

test('generated files are up to date (run `npm run generate`)', async () => {
  for (const [path, expected] of renderGeneratedFiles()) {
    const actual = await readFile(join(root, path), 'utf8').catch(() => '<missing>');
    assert.equal(actual, expected, `${path} is stale: run npm run generate`);
  }
});
