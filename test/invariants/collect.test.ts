import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { FakeApiServer } from '../fakes/api-server.fake.js';
import { collectView, libcniCache } from './collect.js';

test("libcniCache maps each pod to the container id of its cached ADD, over every node's cache", async () => {
  const root = await mkdtemp(join(tmpdir(), 'coil-libcni-'));
  try {
    const entry = (id: string, ns: string, name: string) => JSON.stringify({
      kind: 'cniCacheV1', containerId: id, ifName: 'eth0', networkName: 'k8s-pod-network',
      cniArgs: [['K8S_POD_NAMESPACE', ns], ['K8S_POD_NAME', name], ['K8S_POD_INFRA_CONTAINER_ID', id]],
    });
    for (const [node, id, ns, name] of [['n1', 'aaa', 'e2e', 'web-1'], ['n2', 'bbb', 'kube-system', 'x']]) {
      await mkdir(join(root, node!, 'results'), { recursive: true });
      await writeFile(join(root, node!, 'results', `k8s-pod-network-${id}-eth0`), entry(id!, ns!, name!));
    }
    await writeFile(join(root, 'n2', 'results', 'broken'), '{');
    const ids = await libcniCache([join(root, 'n1'), join(root, 'n2'), join(root, 'missing')]);
    assert.deepEqual([...ids], [['e2e/web-1', 'aaa'], ['kube-system/x', 'bbb']]);
  } finally {
    await rm(root, { recursive: true, force: true });
  }
});

/**
 * collectView against an API server that is still warming up after a restart: the invariant
 * checker must read through the 429 "storage is (re)initializing" it answers for a moment, not end
 * the soak (the long soak, seed 452833933, failed so right after an apiserver-restart fault).
 */
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
