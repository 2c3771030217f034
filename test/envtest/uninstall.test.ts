/**
 * What `helm uninstall` leaves behind, against a real kube-apiserver (its garbage collector in
 * kube-controller-manager included):
 * - coild's UninstallDetector tells a deleted DaemonSet (uninstall) from one that remains
 *   (restart, rolling upgrade) — the decision behind removing the conflist, routes and rules;
 * - the post-delete hook's releaseFinalizers removes `coil.cybozu.com` from every AddressPool and
 *   AddressBlock once the release's Pods are gone, so deleting them afterwards does not hang.
 */
import 'reflect-metadata';
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { V1DaemonSet, V1Pod } from '@kubernetes/client-node';
import { coilCrds } from '../../src/api/v2/crd.js';
import { FIN_COIL } from '../../src/api/v2/keys.js';
import { releaseFinalizers } from '../../src/controller/release-finalizers.js';
import { Kinds } from '../../src/api/v2/kinds.js';
import type { Client } from '../../src/runtime/client.js';
import { defineKind } from '../../src/runtime/kind.js';
import { createLogger } from '../../src/runtime/logging.js';
import type { Manager } from '../../src/runtime/manager.js';
import { Registry } from '../../src/runtime/registry.js';
import { UninstallDetector } from '../../src/node-agent/uninstall.js';
import { ControlPlane, eventually } from './control-plane.js';
import { adminClient } from './controller-support.js';
import { testManager } from './runtime-support.js';

const PodKind = defineKind<V1Pod>({ group: '', version: 'v1', kind: 'Pod', plural: 'pods', namespaced: true });
const log = createLogger({ name: 'uninstall-test', level: 'fatal' });
const NS = 'default';
const LABELS = { 'app.kubernetes.io/name': 'coil', 'app.kubernetes.io/instance': 'coil', 'app.kubernetes.io/component': 'coild' };

function daemonSet(name: string): V1DaemonSet {
  return {
    metadata: { name, namespace: NS, labels: LABELS },
    spec: {
      selector: { matchLabels: LABELS },
      template: { metadata: { labels: LABELS }, spec: { nodeSelector: { nowhere: 'true' }, containers: [{ name: 'coild', image: 'coil' }] } },
    },
  };
}

/** A Pod owned by `ds`, as the DaemonSet controller makes them (never scheduled: no kubelet here). */
const ownedPod = (name: string, ds: V1DaemonSet): V1Pod => ({
  metadata: { name, namespace: NS, labels: LABELS, ownerReferences: [{ apiVersion: 'apps/v1', kind: 'DaemonSet', name: ds.metadata!.name!, uid: ds.metadata!.uid!, controller: true }] },
  spec: { nodeSelector: { nowhere: 'true' }, containers: [{ name: 'coild', image: 'coil' }] },
});

describe('helm uninstall: node cleanup decision and finalizers', () => {
  let cp: ControlPlane;
  let client: Client;
  const managers: Manager[] = [];

  before(async () => {
    cp = await ControlPlane.start({ crds: coilCrds() });
    client = adminClient(cp);
  });
  after(async () => {
    for (const m of managers) await m.stop().catch(() => undefined);
    await cp?.stop();
  });

  async function detector(podName: string): Promise<UninstallDetector> {
    const mgr = testManager(cp, new Registry(), { identity: podName });
    mgr.cache.ensure(PodKind, { namespace: NS });
    const d = new UninstallDetector({ cache: mgr.cache, client: mgr.client, pod: { namespace: NS, name: podName }, logger: log });
    await mgr.start();
    managers.push(mgr);
    await d.start();
    return d;
  }

  test('a restart or an upgrade (the DaemonSet remains) is not an uninstall; deleting the DaemonSet is', async () => {
    const ds = await client.create(Kinds.DaemonSet, daemonSet('coild'));
    await client.create(PodKind, ownedPod('coild-a', ds));
    const d = await detector('coild-a');
    assert.equal(await d.uninstalling(), false, 'DaemonSet in place');
    await client.update(Kinds.DaemonSet, { ...ds, spec: { ...ds.spec!, template: { ...ds.spec!.template, metadata: { labels: { ...LABELS, upgraded: 'yes' } } } } });
    assert.equal(await d.uninstalling(), false, 'DaemonSet updated (helm upgrade)');
    await client.delete(Kinds.DaemonSet, { namespace: NS, name: 'coild' });
    await eventually(async () => await d.uninstalling(), { timeoutMs: 10_000 });
  });

  test('a DaemonSet of the same name made again (another release) does not count as coild\'s owner', async () => {
    const old = await client.create(Kinds.DaemonSet, daemonSet('coild2'));
    await client.create(PodKind, ownedPod('coild-b', old));
    const d = await detector('coild-b');
    await client.delete(Kinds.DaemonSet, { namespace: NS, name: 'coild2' });
    await eventually(async () => (await client.get(Kinds.DaemonSet, { namespace: NS, name: 'coild2' })) === undefined);
    await client.create(Kinds.DaemonSet, daemonSet('coild2'));
    assert.equal(await d.uninstalling(), true);
  });

  test('release-finalizers waits for the release\'s Pods, then frees every pool and block; each then deletes at once', async () => {
    const pool = await client.create(Kinds.AddressPool, { metadata: { name: 'default', finalizers: [FIN_COIL] }, spec: { blockSizeBits: 5, subnets: [{ ipv4: '10.80.0.0/24' }] } });
    await client.create(Kinds.AddressBlock, {
      metadata: { name: 'default-0', finalizers: [FIN_COIL], labels: { 'coil.cybozu.com/pool': 'default', 'coil.cybozu.com/node': 'n1' },
        ownerReferences: [{ apiVersion: 'coil.cybozu.com/v2', kind: 'AddressPool', name: 'default', uid: pool.metadata!.uid!, controller: true, blockOwnerDeletion: true }] },
      index: 0, ipv4: '10.80.0.0/27',
    });
    const run = releaseFinalizers({ client, namespace: NS, release: 'coil', waitMs: 30_000, pollMs: 200, logger: log });
    await new Promise((r) => setTimeout(r, 600));
    assert.ok((await client.get(Kinds.AddressPool, { name: 'default' }))!.metadata!.finalizers!.includes(FIN_COIL), 'kept while coild Pods remain');
    for (const name of ['coild-a', 'coild-b']) await client.delete(PodKind, { namespace: NS, name }, { propagationPolicy: 'Background' });
    // No kubelet: Pods without a node go at once on delete.
    const report = await run;
    assert.deepEqual(report, { pools: 1, blocks: 1, podsGone: true });
    await client.delete(Kinds.AddressBlock, { name: 'default-0' });
    assert.equal(await client.get(Kinds.AddressBlock, { name: 'default-0' }), undefined, 'the block deleted at once');
    await client.delete(Kinds.AddressPool, { name: 'default' });
    assert.equal(await client.get(Kinds.AddressPool, { name: 'default' }), undefined, 'the pool deleted at once');
  });
});
