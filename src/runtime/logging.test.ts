import assert from 'node:assert/strict';
import { test } from 'node:test';
import { serializeError } from './logging.js';

test('the err serializer keeps the cause chain, the errors of an AggregateError and the own plain fields', () => {
  const kernel = Object.assign(new Error('ip -json link show: Dump was interrupted'), { command: 'ip -json link show', exitCode: 0, errno: 'EINTR', argv: ['ip'] });
  const top = new Error('listing pod interfaces failed', { cause: kernel });
  const s = serializeError(new AggregateError([top, 'not an error'], 'init failed')) as Record<string, unknown>;
  assert.equal(s.message, 'init failed');
  const [first, second] = s.errors as Record<string, unknown>[];
  assert.equal(first!.message, 'listing pod interfaces failed');
  assert.deepEqual(
    Object.fromEntries(Object.entries(first!.cause as object).filter(([k, v]) => k !== 'stack' && v !== undefined)),
    { message: 'ip -json link show: Dump was interrupted', name: 'Error', command: 'ip -json link show', exitCode: 0, errno: 'EINTR' },
  );
  assert.equal(second, 'not an error');
});
