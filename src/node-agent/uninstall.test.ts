import assert from 'node:assert/strict';
import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { V1DaemonSet, V1Pod } from '@kubernetes/client-node';
import { daemonSetOwnerOf, ownerRemains, removeCoilConflist, removeNodeRouting } from './uninstall.js';

const pod = (refs: NonNullable<V1Pod['metadata']>['ownerReferences']): V1Pod => ({ metadata: { namespace: 'kube-system', name: 'coild-x', ownerReferences: refs } });
const ds = (uid: string, deleting = false): V1DaemonSet => ({ metadata: { name: 'coild', uid, ...(deleting ? { deletionTimestamp: new Date() } : {}) } });

describe('uninstall: telling an uninstall from a restart', () => {
  test('the owning DaemonSet comes from the Pod\'s ownerReferences (apps group, controller first)', () => {
    assert.deepEqual(daemonSetOwnerOf(pod([{ apiVersion: 'apps/v1', kind: 'DaemonSet', name: 'coild', uid: 'u1', controller: true }])), { namespace: 'kube-system', name: 'coild', uid: 'u1' });
    assert.equal(daemonSetOwnerOf(pod([{ apiVersion: 'v1', kind: 'Node', name: 'n1', uid: 'u2' }])), undefined);
    assert.equal(daemonSetOwnerOf(pod(undefined)), undefined);
  });

  test('the owner remains only while the same DaemonSet (UID) exists and is not being deleted', () => {
    const owner = { namespace: 'kube-system', name: 'coild', uid: 'u1' };
    assert.equal(ownerRemains(owner, ds('u1')), true, 'restart or rolling upgrade');
    assert.equal(ownerRemains(owner, undefined), false, 'deleted (helm uninstall, background propagation)');
    assert.equal(ownerRemains(owner, ds('u1', true)), false, 'being deleted (foreground propagation)');
    assert.equal(ownerRemains(owner, ds('u2')), false, 'replaced by another release');
  });
});

describe('removeCoilConflist', () => {
  let dir: string;
  before(async () => (dir = await mkdtemp(join(tmpdir(), 'coil-uninstall-'))));
  after(() => rm(dir, { recursive: true, force: true }));

  test('removes a conflist naming the coil plugin, and only that file', async () => {
    await writeFile(join(dir, '10-coil.conflist'), JSON.stringify({ cniVersion: '1.0.0', name: 'k8s-pod-network', plugins: [{ type: 'coil' }, { type: 'portmap' }] }));
    await writeFile(join(dir, '20-other.conflist'), '{}');
    assert.equal(await removeCoilConflist(join(dir, '10-coil.conflist')), true);
    assert.deepEqual(await readdir(dir), ['20-other.conflist']);
  });

  test('leaves a file of that name that is not coil\'s, and a missing file is no error', async () => {
    await writeFile(join(dir, '10-coil.conflist'), JSON.stringify({ cniVersion: '1.0.0', name: 'x', plugins: [{ type: 'ptp' }] }));
    assert.equal(await removeCoilConflist(join(dir, '10-coil.conflist')), false);
    await writeFile(join(dir, 'bad.conflist'), '{');
    assert.equal(await removeCoilConflist(join(dir, 'bad.conflist')), false);
    assert.equal(await removeCoilConflist(join(dir, 'absent.conflist')), false);
    assert.deepEqual((await readdir(dir)).sort(), ['10-coil.conflist', '20-other.conflist', 'bad.conflist']);
  });
});

describe('removeNodeRouting (an uninstall on the node)', () => {
  const routing = (wired: number) => {
    const done: string[] = [];
    return {
      done,
      r: { list: async () => Array.from({ length: wired }, () => ({})), clearExport: async () => void done.push('119'), removePodTable: async () => void done.push('116') },
    };
  };
  test('keeps tables 116 and 119 and the rule while coil pods are wired: they keep their network', async () => {
    const t = routing(7);
    assert.deepEqual(await removeNodeRouting(t.r), { kept: 7 });
    assert.deepEqual(t.done, []);
  });
  test('removes them from a node with no coil pod left', async () => {
    const t = routing(0);
    assert.equal(await removeNodeRouting(t.r), 'removed');
    assert.deepEqual(t.done, ['119', '116']);
  });
});
