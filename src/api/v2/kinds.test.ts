import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Kinds } from './kinds.js';

test('every kind addresses the resource the API server serves (group, version, plural, scope)', () => {
  const table = Object.fromEntries(Object.entries(Kinds).map(([name, k]) => [name, `${k.group}/${k.version} ${k.kind} ${k.plural} ${k.namespaced ? 'namespaced' : 'cluster'}`]));
  assert.deepEqual(table, {
    AddressPool: 'coil.cybozu.com/v2 AddressPool addresspools cluster',
    AddressBlock: 'coil.cybozu.com/v2 AddressBlock addressblocks cluster',
    BlockRequest: 'coil.cybozu.com/v2 BlockRequest blockrequests cluster',
    Egress: 'coil.cybozu.com/v2 Egress egresses namespaced',
    Node: '/v1 Node nodes cluster',
    Namespace: '/v1 Namespace namespaces cluster',
    Pod: '/v1 Pod pods namespaced',
    Service: '/v1 Service services namespaced',
    ServiceAccount: '/v1 ServiceAccount serviceaccounts namespaced',
    SubjectAccessReview: 'authorization.k8s.io/v1 SubjectAccessReview subjectaccessreviews cluster',
    TokenReview: 'authentication.k8s.io/v1 TokenReview tokenreviews cluster',
    ConfigMap: '/v1 ConfigMap configmaps namespaced',
    Event: '/v1 Event events namespaced',
    EventsV1Event: 'events.k8s.io/v1 Event events namespaced',
    Deployment: 'apps/v1 Deployment deployments namespaced',
    DaemonSet: 'apps/v1 DaemonSet daemonsets namespaced',
    PodDisruptionBudget: 'policy/v1 PodDisruptionBudget poddisruptionbudgets namespaced',
    EndpointSlice: 'discovery.k8s.io/v1 EndpointSlice endpointslices namespaced',
    ClusterRole: 'rbac.authorization.k8s.io/v1 ClusterRole clusterroles cluster',
    ClusterRoleBinding: 'rbac.authorization.k8s.io/v1 ClusterRoleBinding clusterrolebindings cluster',
    Lease: 'coordination.k8s.io/v1 Lease leases namespaced',
  });
  for (const k of Object.values(Kinds)) assert.ok(Object.isFrozen(k));
});
