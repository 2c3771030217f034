/**
 * The Egress controller with nothing but the chart's RBAC: its caches sync, its webhooks answer,
 * and it can create, bind and delete what an Egress needs (the ClusterRoleBinding through `bind`
 * on the ClusterRole coil-egress), as it must in a cluster and in the lab.
 */
import 'reflect-metadata';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { KubeConfig } from '@kubernetes/client-node';
import { applyChart, LAB_NAMESPACE, serviceAccountKubeconfig } from '../../hack/lab/credentials.js';
import { coilCrds } from '../../src/api/v2/crd.js';
import { Kinds } from '../../src/api/v2/kinds.js';
import type { Client } from '../../src/runtime/client.js';
import type { KindDescriptor } from '../../src/runtime/kind.js';
import type { Manager } from '../../src/runtime/manager.js';
import { ControlPlane, eventually, freePort, REPO_ROOT } from './control-plane.js';
import { adminClient } from './controller-support.js';
import { createEgress, egressManager } from './egress-support.js';
import { createNamespace } from './runtime-support.js';
import { kubectl } from './tools.js';

const SA = `system:serviceaccount:${LAB_NAMESPACE}:coil-controller`;

describe('Egress controller under the chart RBAC', () => {
  let cp: ControlPlane;
  let mgr: Manager;
  let client: Client;
  const NS = 'rbac-egress';
  const key = (name: string, namespace = NS) => ({ namespace, name });

  before(async () => {
    cp = await ControlPlane.start({ crds: coilCrds() });
    const port = await freePort();
    await applyChart(cp, join(REPO_ROOT, 'charts/coil'), `https://127.0.0.1:${port}`, cp.ca.caPem);
    const kc = new KubeConfig();
    kc.loadFromFile(await serviceAccountKubeconfig(cp, 'coil-controller', cp.server, join(cp.dir, 'controller.kubeconfig')));
    mgr = (await egressManager(cp, { webhooks: true, egress: true, access: true }, {}, { kubeConfig: kc, webhookPort: port })).mgr;
    await mgr.start();
    client = adminClient(cp);
    await createNamespace(cp, NS);
  });
  after(async () => {
    await mgr?.stop();
    await cp?.stop();
  });

  test('an Egress admitted by the chart webhooks gets its objects, binding and status', async () => {
    const e = await eventually(() => createEgress(client, NS, 'nat', { podDisruptionBudget: { minAvailable: 1 }, template: { spec: { containers: [] } } }));
    assert.deepEqual(e.spec.template?.spec?.containers, [{ name: 'egress' }]);
    await eventually(async () => {
      for (const kind of [Kinds.Deployment, Kinds.Service, Kinds.PodDisruptionBudget] as KindDescriptor[]) assert.ok(await client.get(kind, key('nat')), kind.kind);
      assert.ok(await client.get(Kinds.ServiceAccount, key('coil-egress')));
      assert.deepEqual((await client.get(Kinds.ClusterRoleBinding, { name: 'coil-egress' }))?.subjects?.map((s) => s.namespace), [NS]);
      assert.ok((await client.get(Kinds.Egress, key('nat')))?.status?.selector);
    });
  });

  test('the chart lets the controller read Pods (its own image) but not write them', async () => {
    const can = (verb: string, resource: string) => kubectl(cp.kubeconfigPath, ['auth', 'can-i', verb, resource, `--as=${SA}`]).then((o) => o.trim(), () => 'no');
    assert.equal(await can('get', 'pods'), 'yes');
    assert.equal(await can('create', 'pods'), 'no');
    assert.equal(await can('bind', 'clusterroles/coil-egress'), 'yes');
    assert.equal(await can('bind', 'clusterroles/cluster-admin'), 'no');
  });

  test('the chart limits the controller to its own ServiceAccounts and binding', async () => {
    const can = (verb: string, resource: string) => kubectl(cp.kubeconfigPath, ['auth', 'can-i', verb, resource, `--as=${SA}`, '-n', NS]).then((o) => o.trim(), () => 'no');
    assert.equal(await can('delete', 'serviceaccounts/coil-egress'), 'yes');
    assert.equal(await can('delete', 'serviceaccounts/default'), 'no');
    assert.equal(await can('patch', 'clusterrolebindings/coil-egress'), 'yes');
    assert.equal(await can('patch', 'clusterrolebindings/cluster-admin'), 'no');
    assert.equal(await can('delete', 'clusterrolebindings/coil-controller'), 'no');
  });

  test('deleting the last Egress removes the ServiceAccount and the binding', async () => {
    await client.delete(Kinds.Egress, key('nat'));
    await eventually(async () => {
      assert.equal(await client.get(Kinds.ServiceAccount, key('coil-egress')), undefined);
      assert.equal(await client.get(Kinds.ClusterRoleBinding, { name: 'coil-egress' }), undefined);
    });
  });
});
