import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { libcniCache } from './collect.js';

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
