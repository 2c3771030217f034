import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { V1Pod } from '@kubernetes/client-node';
import { cachedPod, podAddresses } from './pod-addresses.js';

const pod = (o: Partial<V1Pod['spec']> & { ips?: string[]; phase?: string } = {}): V1Pod => ({
  apiVersion: 'v1', kind: 'Pod',
  metadata: { name: 'a', namespace: 'ns', uid: 'u', resourceVersion: '7', labels: { app: 'x' }, annotations: { big: 'x'.repeat(1000) }, managedFields: [{ manager: 'kubelet' }] },
  spec: { nodeName: 'n1', containers: [{ name: 'c', image: 'img', env: [{ name: 'A', value: 'b' }] }], ...(o.hostNetwork !== undefined && { hostNetwork: o.hostNetwork }) },
  status: { phase: o.phase ?? 'Running', ...(o.ips && { podIP: o.ips[0], podIPs: o.ips.map((ip) => ({ ip })) }), conditions: [{ type: 'Ready', status: 'True' }] },
});

test('podAddresses: canonical status.podIPs; none for host-network or finished Pods', () => {
  assert.deepEqual(podAddresses(pod({ ips: ['10.0.0.1', 'FD00:0::1'] })), ['10.0.0.1', 'fd00::1']);
  assert.deepEqual(podAddresses(pod({ ips: ['10.0.0.1'], hostNetwork: true })), []);
  assert.deepEqual(podAddresses(pod({ ips: ['10.0.0.1'], phase: 'Succeeded' })), []);
  assert.deepEqual(podAddresses(pod({ ips: ['not-an-ip'] })), []);
});

test('cachedPod keeps name, namespace, resourceVersion, node and addresses only', () => {
  const slim = cachedPod()(pod({ ips: ['10.0.0.1'] }));
  assert.deepEqual(slim, {
    apiVersion: 'v1', kind: 'Pod',
    metadata: { name: 'a', namespace: 'ns', resourceVersion: '7' },
    spec: { nodeName: 'n1' },
    status: { podIPs: [{ ip: '10.0.0.1' }] },
  });
  assert.equal((cachedPod()(pod({ ips: ['10.0.0.1'], hostNetwork: true })) as V1Pod).status?.podIPs, undefined);
});
