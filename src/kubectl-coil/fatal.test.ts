import assert from 'node:assert/strict';
import { test } from 'node:test';
import { fatalMessage, MAX_FATAL_CHARS } from './fatal.js';

test('an error is one line: its kind unless plain, its message, its causes; never a stack', () => {
  assert.equal(fatalMessage(new Error('boom')), 'boom');
  assert.equal(fatalMessage(new TypeError("Cannot read properties of undefined (reading 'bind')")), "TypeError: Cannot read properties of undefined (reading 'bind')");
  const e = new Error('fetch failed', { cause: Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), { code: 'ECONNREFUSED' }) });
  assert.equal(fatalMessage(e), 'fetch failed: connect ECONNREFUSED 127.0.0.1:1');
  assert.equal(fatalMessage(new Error('line one\n    at x (y.js:1:2)\nline three')), 'line one at x (y.js:1:2) line three');
  assert.equal(fatalMessage('a string'), 'a string');
  assert.equal(fatalMessage({ code: 7 }), '{"code":7}');
  assert.equal(fatalMessage(undefined), 'an unknown error');
});

test('a page-long message (a minified source line) is cut to one line of at most MAX_FATAL_CHARS', () => {
  const m = fatalMessage(new Error('x'.repeat(100_000)));
  assert.equal(m.length, MAX_FATAL_CHARS);
  assert.ok(m.endsWith('…'));
});
