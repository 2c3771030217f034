import assert from 'node:assert/strict';
import { test } from 'node:test';
import { runtimeProblem } from './runtime-check.js';

test('Node ≥ 24 and Bun run the tool; an older Node is told what is needed', () => {
  assert.equal(runtimeProblem({ node: '24.21.0' }), undefined);
  assert.equal(runtimeProblem({ node: '26.1.0' }), undefined);
  assert.equal(runtimeProblem({ node: '24.3.0', bun: '1.4.5' }), undefined, 'Bun reports a Node version of its own');
  assert.equal(runtimeProblem({ node: '22.9.0', bun: '1.4.5' }), undefined);
  assert.match(runtimeProblem({ node: '20.20.2' })!, /^this is Node 20\.20\.2; kubectl-coil needs Node ≥ 24, or no runtime at all as the self-contained executable/);
  assert.match(runtimeProblem({})!, /Node \(unknown\)/);
});
