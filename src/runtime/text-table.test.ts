import assert from 'node:assert/strict';
import { test } from 'node:test';
import { formatTable } from './text-table.js';

test('formatTable pads every column but the last to its widest cell and trims each line', () => {
  assert.equal(formatTable([['NAME', 'IPV4'], ['default-pool', '10.0.0.0/24'], ['p', '']]), 'NAME           IPV4\ndefault-pool   10.0.0.0/24\np');
  assert.equal(formatTable([['A', 'B'], ['xx', 'y']], 2), 'A   B\nxx  y');
  assert.equal(formatTable([]), '');
});
