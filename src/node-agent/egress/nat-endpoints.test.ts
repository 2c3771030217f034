import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { V1EndpointSlice } from '@kubernetes/client-node';
import { natEndpointsOf } from './nat-endpoints.js';

const slice = (name: string, service: string, addressType: string, endpoints: V1EndpointSlice['endpoints']): V1EndpointSlice => ({
  metadata: { namespace: 'internet', name, labels: { 'kubernetes.io/service-name': service } }, addressType, endpoints,
});

describe('NAT endpoints from EndpointSlices', () => {
  test('serving from serving, else ready, else true; terminating defaults to false; other Services and FQDN slices ignored', () => {
    const slices = [
      slice('nat-a', 'nat', 'IPv4', [
        { addresses: ['10.64.0.3'], conditions: { ready: false, serving: true, terminating: true }, targetRef: { kind: 'Pod', name: 'nat-1' }, nodeName: 'node-2' },
        { addresses: ['10.64.0.1'], conditions: {} },
        { addresses: ['10.64.0.2'], conditions: { ready: false } },
      ]),
      slice('nat-b', 'nat', 'IPv6', [{ addresses: ['FD00::0:1'], conditions: { ready: true } }]),
      slice('other', 'other', 'IPv4', [{ addresses: ['10.64.9.9'] }]),
      slice('fqdn', 'nat', 'FQDN', [{ addresses: ['example.com'] }]),
    ];
    assert.deepEqual(natEndpointsOf('nat', slices), [
      { address: '10.64.0.1', family: 4, serving: true, terminating: false },
      { address: '10.64.0.2', family: 4, serving: false, terminating: false },
      { address: '10.64.0.3', family: 4, serving: true, terminating: true, pod: 'internet/nat-1', nodeName: 'node-2' },
      { address: 'fd00::1', family: 6, serving: true, terminating: false },
    ]);
  });

  test('an address in two slices (a slice split) counts once, serving if either says so', () => {
    const slices = [
      slice('a', 'nat', 'IPv4', [{ addresses: ['10.64.0.1'], conditions: { serving: false } }]),
      slice('b', 'nat', 'IPv4', [{ addresses: ['10.64.0.1'], conditions: { serving: true } }]),
    ];
    assert.deepEqual(natEndpointsOf('nat', slices), [{ address: '10.64.0.1', family: 4, serving: true, terminating: false }]);
  });
});
