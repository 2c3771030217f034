/**
 * The Egress reconcilers against the real apiserver with kube-controller-manager (Deployment,
 * ReplicaSet, garbage-collector and HPA controllers): an Egress becomes its Deployment (and
 * ReplicaSet and Pods), Service, PDB, ServiceAccount and binding; `kubectl scale` and an HPA act
 * through the scale subresource; edits converge, removals included; objects deleted by hand come
 * back; deleting the Egress removes everything.
 */
import 'reflect-metadata';
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { V1ReplicaSet } from '@kubernetes/client-node';
import { coilCrds } from '../../src/api/v2/crd.js';
import { Kinds } from '../../src/api/v2/kinds.js';
import type { Client } from '../../src/runtime/client.js';
import { defineKind } from '../../src/runtime/kind.js';
import type { Manager } from '../../src/runtime/manager.js';
import { ControlPlane, eventually } from './control-plane.js';
import { adminClient } from './controller-support.js';
import { createEgress, egressManager, TEST_EGRESS_OPTIONS } from './egress-support.js';
import { createNamespace, metricValue, scrape } from './runtime-support.js';
import { kubectl } from './tools.js';

const ReplicaSet = defineKind<V1ReplicaSet>({ group: 'apps', version: 'v1', kind: 'ReplicaSet', plural: 'replicasets', namespaced: true });
const Hpa = defineKind<{ metadata?: object; spec?: object; status?: { conditions?: { type: string; status: string; reason: string }[] } }>({
  group: 'autoscaling', version: 'v2', kind: 'HorizontalPodAutoscaler', plural: 'horizontalpodautoscalers', namespaced: true,
});
const SELECTOR = (name: string) => ({ 'app.kubernetes.io/name': 'coil', 'app.kubernetes.io/component': 'egress', 'app.kubernetes.io/instance': name });
const SELECTOR_TEXT = (name: string) => `app.kubernetes.io/component=egress,app.kubernetes.io/instance=${name},app.kubernetes.io/name=coil`;

describe('Egress reconcilers with kube-controller-manager', () => {
  let cp: ControlPlane;
  let mgr: Manager;
  let client: Client;
  const NS = 'egress-a';
  const key = (name: string, namespace = NS) => ({ namespace, name });

  before(async () => {
    cp = await ControlPlane.start({ crds: coilCrds(), controllerManager: true });
    mgr = (await egressManager(cp, { egress: true, access: true })).mgr;
    await mgr.start();
    client = adminClient(cp);
    for (const ns of [NS, 'egress-b', 'egress-c']) await createNamespace(cp, ns);
  });
  after(async () => {
    await mgr?.stop();
    await cp?.stop();
  });

  test('an Egress creates its Deployment, ReplicaSet, Pods, Service, PDB, ServiceAccount and binding', async () => {
    await createEgress(client, NS, 'nat', { replicas: 2, podDisruptionBudget: { maxUnavailable: 1 } });
    const d = await eventually(() => client.get(Kinds.Deployment, key('nat')).then((x) => x ?? false));
    assert.equal(d.spec?.replicas, 2);
    assert.deepEqual(d.spec?.selector.matchLabels, SELECTOR('nat'));
    assert.equal(d.spec?.template.spec?.serviceAccountName, 'coil-egress');
    assert.equal(d.spec?.template.spec?.containers[0]?.image, TEST_EGRESS_OPTIONS.image);
    assert.deepEqual(d.spec?.template.spec?.containers[0]?.args, ['--fou-port=5555', '--backend=iptables']);
    const rs = await eventually(async () => (await client.list(ReplicaSet, { namespace: NS })).find((r) => r.metadata?.ownerReferences?.[0]?.uid === d.metadata?.uid) ?? false);
    assert.equal(rs.spec?.replicas, 2);
    // No scheduler or kubelet here: the pods exist (the ServiceAccount did) but stay Pending.
    await eventually(async () => (await client.list(Kinds.Pod, { namespace: NS, labelSelector: SELECTOR_TEXT('nat') })).length === 2);
    const svc = await client.get(Kinds.Service, key('nat'));
    assert.deepEqual(svc?.spec?.ports?.map((p) => [p.port, p.targetPort, p.protocol]), [[5555, 5555, 'UDP']]);
    assert.equal(svc?.spec?.sessionAffinity, 'ClientIP');
    assert.equal(svc?.spec?.sessionAffinityConfig?.clientIP?.timeoutSeconds, 10800);
    assert.equal(svc?.spec?.ipFamilyPolicy, 'PreferDualStack');
    const pdb = await eventually(() => client.get(Kinds.PodDisruptionBudget, key('nat')).then((x) => x ?? false));
    assert.equal(pdb.spec?.maxUnavailable, 1);
    assert.ok(await client.get(Kinds.ServiceAccount, key('coil-egress')));
    const crb = await eventually(() => client.get(Kinds.ClusterRoleBinding, { name: 'coil-egress' }).then((x) => x ?? false));
    assert.equal(crb.roleRef.name, 'coil-egress');
    assert.deepEqual(crb.subjects, [{ kind: 'ServiceAccount', name: 'coil-egress', namespace: NS }]);
  });

  test('status carries the sorted selector and the available replicas (0: no kubelet)', async () => {
    const e = await eventually(() => client.get(Kinds.Egress, key('nat')).then((x) => x?.status?.selector ? x : false));
    assert.deepEqual(e.status, { selector: SELECTOR_TEXT('nat'), replicas: 0 });
  });

  test('kubectl scale egress changes the Deployment replicas', async () => {
    await kubectl(cp.kubeconfigPath, ['-n', NS, 'scale', 'egress/nat', '--replicas=3']);
    await eventually(async () => (await client.get(Kinds.Deployment, key('nat')))?.spec?.replicas === 3);
    const scale = JSON.parse(await kubectl(cp.kubeconfigPath, ['-n', NS, 'get', 'egress/nat', '--subresource=scale', '-o', 'json'])) as { spec: { replicas: number }; status: { selector: string } };
    assert.equal(scale.spec.replicas, 3);
    assert.equal(scale.status.selector, SELECTOR_TEXT('nat'));
  });

  test('an HPA resolves the Egress scale subresource and its selector (no metrics server: ScalingActive False)', async () => {
    await client.create(Hpa, {
      metadata: { namespace: NS, name: 'nat' },
      spec: {
        scaleTargetRef: { apiVersion: 'coil.cybozu.com/v2', kind: 'Egress', name: 'nat' },
        minReplicas: 1,
        maxReplicas: 5,
        metrics: [{ type: 'Resource', resource: { name: 'cpu', target: { type: 'Utilization', averageUtilization: 50 } } }],
      },
    });
    const conditions = await eventually(async () => {
      const c = (await client.get(Hpa, key('nat')))?.status?.conditions ?? [];
      return c.some((x) => x.type === 'ScalingActive') ? c : false;
    }, { timeoutMs: 60_000 });
    const by = (t: string) => conditions.find((c) => c.type === t);
    assert.deepEqual([by('AbleToScale')?.status, by('AbleToScale')?.reason], ['True', 'SucceededGetScale']);
    // The HPA got past the selector (else: InvalidSelector) and failed only for lack of metrics.
    assert.deepEqual([by('ScalingActive')?.status, by('ScalingActive')?.reason], ['False', 'FailedGetResourceMetric']);
    await client.delete(Hpa, key('nat'));
  });

  test('edits converge: strategy, template annotations, affinity config and PDB are set, switched and removed', async () => {
    await client.mergePatch(Kinds.Egress, key('nat'), {
      spec: {
        destinations: ['10.0.0.0/8'],
        strategy: { type: 'Recreate' },
        template: { metadata: { annotations: { a: '1', b: '2' } } },
        sessionAffinityConfig: { clientIP: { timeoutSeconds: 60 } },
        podDisruptionBudget: { maxUnavailable: null, minAvailable: 1 },
      },
    });
    await eventually(async () => {
      const d = await client.get(Kinds.Deployment, key('nat'));
      assert.deepEqual(d?.spec?.strategy, { type: 'Recreate' });
      assert.deepEqual(d?.spec?.template.metadata?.annotations, { a: '1', b: '2' });
      assert.equal((await client.get(Kinds.Service, key('nat')))?.spec?.sessionAffinityConfig?.clientIP?.timeoutSeconds, 60);
      const pdb = await client.get(Kinds.PodDisruptionBudget, key('nat'));
      assert.deepEqual([pdb?.spec?.minAvailable, pdb?.spec?.maxUnavailable], [1, undefined]);
    });
    // A restart annotation written by kubectl is someone else's field: it must survive our edits.
    await kubectl(cp.kubeconfigPath, ['-n', NS, 'rollout', 'restart', 'deployment/nat']);
    await client.mergePatch(Kinds.Egress, key('nat'), {
      spec: { strategy: null, template: { metadata: { annotations: { b: null } } }, sessionAffinity: 'None', podDisruptionBudget: null },
    });
    await eventually(async () => {
      const d = await client.get(Kinds.Deployment, key('nat'));
      assert.deepEqual(d?.spec?.strategy, { type: 'RollingUpdate', rollingUpdate: { maxSurge: '25%', maxUnavailable: '25%' } });
      assert.deepEqual(Object.keys(d?.spec?.template.metadata?.annotations ?? {}).sort(), ['a', 'kubectl.kubernetes.io/restartedAt']);
      const svc = await client.get(Kinds.Service, key('nat'));
      assert.deepEqual([svc?.spec?.sessionAffinity, svc?.spec?.sessionAffinityConfig], ['None', undefined]);
      assert.equal(await client.get(Kinds.PodDisruptionBudget, key('nat')), undefined);
    });
    await client.mergePatch(Kinds.Egress, key('nat'), { spec: { sessionAffinity: 'ClientIP', sessionAffinityConfig: null, template: null } });
    await eventually(async () => {
      assert.equal((await client.get(Kinds.Service, key('nat')))?.spec?.sessionAffinityConfig?.clientIP?.timeoutSeconds, 10800);
      assert.deepEqual(Object.keys((await client.get(Kinds.Deployment, key('nat')))?.spec?.template.metadata?.annotations ?? {}), ['kubectl.kubernetes.io/restartedAt']);
    });
  });

  test('shared SNAT addresses set and removed: the default args gain and lose --snat-addresses', async () => {
    const args = async () => (await client.get(Kinds.Deployment, key('nat')))?.spec?.template.spec?.containers[0]?.args;
    await client.mergePatch(Kinds.Egress, key('nat'), { spec: { snatAddresses: ['203.0.113.10'] } });
    await eventually(async () => assert.deepEqual(await args(), ['--fou-port=5555', '--backend=iptables', '--snat-addresses=203.0.113.10']));
    await client.mergePatch(Kinds.Egress, key('nat'), { spec: { snatAddresses: null } });
    await eventually(async () => assert.deepEqual(await args(), ['--fou-port=5555', '--backend=iptables']));
  });

  test('a reconcile with nothing to change writes nothing', async () => {
    const before = await Promise.all([client.get(Kinds.Deployment, key('nat')), client.get(Kinds.Service, key('nat'))]);
    const runs = async () => metricValue(await scrape(mgr.ports.metrics!), 'controller_runtime_reconcile_total', { controller: 'egress' }) ?? 0;
    const start = await runs();
    await client.mergePatch(Kinds.Egress, key('nat'), { metadata: { labels: { touched: 'yes' } } });
    await eventually(async () => (await runs()) > start);
    const after = await Promise.all([client.get(Kinds.Deployment, key('nat')), client.get(Kinds.Service, key('nat'))]);
    // The Deployment's resourceVersion also moves with kube-controller-manager's status updates;
    // its generation moves only when someone writes its spec.
    assert.equal(after[0]?.metadata?.generation, before[0]?.metadata?.generation, 'Deployment spec not rewritten');
    assert.equal(after[1]?.metadata?.resourceVersion, before[1]?.metadata?.resourceVersion, 'Service not rewritten');
  });

  test('owned objects deleted by hand are re-created', async () => {
    await client.mergePatch(Kinds.Egress, key('nat'), { spec: { podDisruptionBudget: { minAvailable: '50%' } } });
    const old = await eventually(async () => {
      const objs = await Promise.all([client.get(Kinds.Deployment, key('nat')), client.get(Kinds.Service, key('nat')), client.get(Kinds.PodDisruptionBudget, key('nat'))]);
      return objs.every(Boolean) ? objs : false;
    });
    await client.delete(Kinds.Deployment, key('nat'));
    await client.delete(Kinds.Service, key('nat'));
    await client.delete(Kinds.PodDisruptionBudget, key('nat'));
    await eventually(async () => {
      const objs = await Promise.all([client.get(Kinds.Deployment, key('nat')), client.get(Kinds.Service, key('nat')), client.get(Kinds.PodDisruptionBudget, key('nat'))]);
      return objs.every((o, i) => o && o.metadata?.uid !== old[i]!.metadata?.uid);
    });
  });

  test('a Deployment of the same name that the Egress does not control is left alone, with a Warning Event', async () => {
    const foreign = { metadata: { namespace: NS, name: 'taken' }, spec: { selector: { matchLabels: { app: 'mine' } }, template: { metadata: { labels: { app: 'mine' } }, spec: { containers: [{ name: 'c', image: 'mine' }] } } } };
    await client.create(Kinds.Deployment, foreign);
    await createEgress(client, NS, 'taken');
    const ev = await eventually(async () => (await client.list(Kinds.Event, { namespace: NS, fieldSelector: 'involvedObject.name=taken,involvedObject.kind=Egress' }))[0] ?? false);
    assert.equal(ev.type, 'Warning');
    assert.match(ev.message ?? '', /Deployment egress-a\/taken exists and is not controlled by this Egress/);
    const d = await client.get(Kinds.Deployment, key('taken'));
    assert.deepEqual([d?.metadata?.ownerReferences, d?.spec?.template.spec?.containers.map((c) => c.name)], [undefined, ['c']]);
    await client.delete(Kinds.Egress, key('taken'));
    await client.delete(Kinds.Deployment, key('taken'));
  });

  test('a pod template the apiserver rejects (bad value, unknown field) leaves a Warning Event naming the field, and a fix converges', async () => {
    await createEgress(client, NS, 'odd', { template: { spec: { containers: [{ name: 'egress', ports: [{ containerPort: 70000 }] }] } } });
    const ev = await eventually(async () => (await client.list(Kinds.Event, { namespace: NS, fieldSelector: 'involvedObject.name=odd,involvedObject.kind=Egress' }))[0] ?? false);
    assert.equal(ev.reason, 'ReconcileFailed');
    assert.match(ev.message ?? '', /Deployment egress-a\/odd rejected by the apiserver: .*containerPort: Invalid value: 70000/);
    // A misspelt field is refused too (strict field validation), not silently dropped.
    await client.mergePatch(Kinds.Egress, key('odd'), { spec: { template: { spec: { containers: [{ name: 'egress', imagePulPolicy: 'Always' }] } } } });
    await eventually(async () => {
      const events = await client.list(Kinds.Event, { namespace: NS, fieldSelector: 'involvedObject.name=odd,involvedObject.kind=Egress' });
      return events.some((e) => /imagePulPolicy/.test(e.message ?? ''));
    });
    assert.equal(await client.get(Kinds.Deployment, key('odd')), undefined);
    await client.mergePatch(Kinds.Egress, key('odd'), { spec: { template: { spec: { containers: [{ name: 'egress' }] } } } });
    await eventually(() => client.get(Kinds.Deployment, key('odd')).then(Boolean));
    await client.delete(Kinds.Egress, key('odd'));
  });

  test('the ServiceAccounts and the binding follow the namespaces holding Egresses', async () => {
    await createEgress(client, 'egress-b', 'b1');
    await createEgress(client, 'egress-c', 'c1');
    const subjects = async () => (await client.get(Kinds.ClusterRoleBinding, { name: 'coil-egress' }))?.subjects?.map((s) => s.namespace);
    await eventually(async () => assert.deepEqual(await subjects(), [NS, 'egress-b', 'egress-c']));
    await client.delete(Kinds.Egress, key('b1', 'egress-b'));
    await eventually(async () => assert.deepEqual(await subjects(), [NS, 'egress-c']));
    await eventually(async () => (await client.get(Kinds.ServiceAccount, key('coil-egress', 'egress-b'))) === undefined);
    const sa = await client.get(Kinds.ServiceAccount, key('coil-egress', 'egress-c'));
    await client.delete(Kinds.ServiceAccount, key('coil-egress', 'egress-c'));
    await eventually(async () => ((await client.get(Kinds.ServiceAccount, key('coil-egress', 'egress-c')))?.metadata?.uid ?? sa?.metadata?.uid) !== sa?.metadata?.uid);
  });

  test('deleting the Egresses removes their objects, ServiceAccounts and finally the binding', async () => {
    await client.delete(Kinds.Egress, key('nat'));
    await eventually(async () => {
      const left = await Promise.all([client.get(Kinds.Deployment, key('nat')), client.get(Kinds.Service, key('nat')), client.get(Kinds.PodDisruptionBudget, key('nat'))]);
      assert.deepEqual(left, [undefined, undefined, undefined]);
      assert.deepEqual(await client.list(ReplicaSet, { namespace: NS, labelSelector: SELECTOR_TEXT('nat') }), []);
      assert.equal(await client.get(Kinds.ServiceAccount, key('coil-egress')), undefined);
    }, { timeoutMs: 60_000 });
    await eventually(async () => assert.deepEqual((await client.get(Kinds.ClusterRoleBinding, { name: 'coil-egress' }))?.subjects?.map((s) => s.namespace), ['egress-c']));
    await client.delete(Kinds.Egress, key('c1', 'egress-c'));
    await eventually(async () => (await client.get(Kinds.ClusterRoleBinding, { name: 'coil-egress' })) === undefined);
  });
});
