/**
 * collectView against an API server that is still warming up after a restart: the invariant
 * checker must read through the 429 "storage is (re)initializing" it answers for a moment, not end
 * the soak (the long soak, seed 452833933, failed so right after an apiserver-restart fault).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { FakeApiServer } from '../fakes/api-server.fake.js';
import { collectView } from './collect.js';

test('collectView reads again while the API server answers 429, and returns the view', async () => {
  const api = new FakeApiServer();
  const kubeConfig = await api.start();
  try {
    api.play([429, 429, { items: [], rv: '1' }], []);
    const view = await collectView({ kubeConfig, nodes: [], containerIds: async () => new Map(), fetchIpam: async () => undefined });
    assert.deepEqual(view.nodes, []);
    assert.ok(api.listCount >= 5, `lists: ${api.listCount}`);
  } finally {
    await api.stop();
  }
});
