import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { KubernetesObject, V1Pod } from '@kubernetes/client-node';
import { coildPod, coildObject } from './cached-objects.js';
import { declareCoildCache } from './rbac.js';
import { parseConfig } from './config.js';
import { podAddresses } from '../ipam/pod-ips.js';
import { egressRefsOf } from './egress/egress-gateways.js';
import { daemonSetOwnerOf } from './uninstall.js';
import { kindId } from '../runtime/kind.js';
import type { Cache, CacheKindOptions } from '../runtime/cache.js';

/** A Pod as the API server sends it for a kubelet-run client of an Egress (abridged). */
const POD: V1Pod = {
  metadata: {
    name: 'web-1', namespace: 'app', uid: 'u-1', resourceVersion: '42', labels: { app: 'web' },
    annotations: { 'egress.coil.cybozu.com/internet': 'nat' }, creationTimestamp: new Date('2026-12-07T00:00:00Z'),
    ownerReferences: [{ apiVersion: 'apps/v1', kind: 'DaemonSet', name: 'coild', uid: 'ds-1', controller: true }],
    managedFields: [{ manager: 'kubelet', operation: 'Update', fieldsType: 'FieldsV1', fieldsV1: { 'f:status': {} } }],
  },
  spec: { nodeName: 'n1', containers: [{ name: 'web', image: 'busybox' }], tolerations: [{ key: 'k', operator: 'Exists' }] },
  status: { phase: 'Running', podIP: '10.0.0.5', podIPs: [{ ip: '10.0.0.5' }, { ip: 'fd00::5' }], conditions: [{ type: 'Ready', status: 'True' }], hostIP: '192.0.2.1' },
};

test('a cached Pod keeps what coild reads: key, addresses, node, Egress annotations, owner, for Events uid and resourceVersion', () => {
  const slim = coildPod(structuredClone(POD)) as V1Pod;
  assert.deepEqual(podAddresses(slim), podAddresses(POD));
  assert.deepEqual(egressRefsOf(slim.metadata?.annotations), egressRefsOf(POD.metadata?.annotations));
  assert.deepEqual(daemonSetOwnerOf(slim), daemonSetOwnerOf(POD));
  assert.equal(slim.spec?.nodeName, 'n1');
  for (const k of ['name', 'namespace', 'uid', 'resourceVersion'] as const) assert.equal(slim.metadata?.[k], POD.metadata?.[k]);
  // A host-network Pod stays one: it has no pod address.
  assert.deepEqual(podAddresses(coildPod({ ...structuredClone(POD), spec: { ...POD.spec!, hostNetwork: true } } as V1Pod) as V1Pod), []);
  // A finished Pod stays finished.
  assert.deepEqual(podAddresses(coildPod({ ...structuredClone(POD), status: { ...POD.status, phase: 'Succeeded' } } as V1Pod) as V1Pod), []);
});

test('a cached Pod drops what no part of coild reads (managedFields, containers, conditions)', () => {
  const slim = coildPod(structuredClone(POD)) as V1Pod;
  assert.equal(slim.metadata?.managedFields, undefined);
  assert.equal(slim.spec?.containers, undefined);
  assert.equal(slim.spec?.tolerations, undefined);
  assert.equal(slim.status?.conditions, undefined);
  assert.deepEqual(Object.keys(slim.spec ?? {}), ['nodeName']);
  assert.deepEqual(Object.keys(slim.status ?? {}), ['phase', 'podIP', 'podIPs']);
});

test('coild declares every cached kind with a transform: Pods reduced, the rest without managedFields', () => {
  const declared = new Map<string, CacheKindOptions>();
  const cache = { ensure: (kind: never, options: CacheKindOptions) => void declared.set(kindId(kind), options), addIndex: () => undefined } as unknown as Cache;
  declareCoildCache(cache, parseConfig(['--enable-egress=true'], { COIL_NODE_NAME: 'n1' }));
  assert.ok(declared.size >= 6, [...declared.keys()].join(', '));
  for (const [kind, o] of declared) {
    assert.ok(o.transform, `${kind} has no transform`);
    const obj = { metadata: { name: 'x', managedFields: [{ manager: 'm' }] } } as KubernetesObject;
    assert.equal(o.transform(obj).metadata?.managedFields, undefined, kind);
  }
  const pod = [...declared].find(([k]) => /(^|\/)Pod$|pods/i.test(k) && !/Pool/.test(k));
  assert.ok(pod, [...declared.keys()].join(', '));
  assert.equal(pod[1].transform, coildPod);
  assert.equal(coildObject({ metadata: { name: 'x', managedFields: [] } } as KubernetesObject).metadata?.managedFields, undefined);
});
