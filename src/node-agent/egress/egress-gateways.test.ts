import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { Egress } from '../../api/v2/egress.js';
import { egressRefsOf, gatewaysOf } from './egress-gateways.js';

describe('egress gateways', () => {
  test('annotations name Egresses per namespace, comma-separated, blanks ignored, sorted and unique', () => {
    assert.deepEqual(egressRefsOf({ 'egress.coil.cybozu.com/internet': 'nat, nat2,,nat', 'egress.coil.cybozu.com/domestic': 'gw', other: 'x' }), [
      { namespace: 'domestic', name: 'gw' }, { namespace: 'internet', name: 'nat' }, { namespace: 'internet', name: 'nat2' },
    ]);
    assert.deepEqual(egressRefsOf(undefined), []);
  });

  test('one gateway per ClusterIP with the destinations of its family; headless gives none', () => {
    const egress: Egress = { metadata: { namespace: 'internet', name: 'nat' }, spec: { destinations: ['0.0.0.0/0', '::/0', '192.168.10.0/24'], replicas: 1, sessionAffinity: 'ClientIP', fouSourcePortAuto: true } };
    assert.deepEqual(gatewaysOf(egress, { spec: { clusterIPs: ['10.96.0.5', 'fd00:96::5'] } }), [
      { egress: 'internet/nat', clusterIp: '10.96.0.5', destinations: ['0.0.0.0/0', '192.168.10.0/24'], isSourcePortAuto: true },
      { egress: 'internet/nat', clusterIp: 'fd00:96::5', destinations: ['::/0'], isSourcePortAuto: true },
    ]);
    assert.deepEqual(gatewaysOf(egress, { spec: { clusterIP: 'None', clusterIPs: ['None'] } }), []);
  });

  test("destinations as Go reads them, in canonical form (Coil's Egress may hold 10.0.0.1/24 or /0024)", () => {
    const egress: Egress = { metadata: { namespace: 'internet', name: 'nat' }, spec: { destinations: ['10.20.0.0/0016', '192.168.10.7/24', 'FD00:0::/0064', 'bogus', '10.0.0.0/33'], replicas: 1, sessionAffinity: 'ClientIP' } };
    assert.deepEqual(gatewaysOf(egress, { spec: { clusterIPs: ['10.96.0.5', 'fd00:96::5'] } }).map((g) => g.destinations), [
      ['10.20.0.0/16', '192.168.10.0/24'],
      ['fd00::/64'],
    ]);
  });

  test('a shared SNAT address goes to the gateway of its family, in canonical form; a family without one gets none', () => {
    const egress: Egress = { metadata: { namespace: 'internet', name: 'nat' }, spec: { destinations: ['0.0.0.0/0', '::/0'], replicas: 2, sessionAffinity: 'ClientIP', snatAddresses: ['2001:DB8:0::10'] } };
    assert.deepEqual(gatewaysOf(egress, { spec: { clusterIPs: ['10.96.0.5', 'fd00:96::5'] } }).map((g) => g.snatAddress), [undefined, '2001:db8::10']);
    egress.spec.snatAddresses = ['203.0.113.10', '2001:db8::10'];
    assert.deepEqual(gatewaysOf(egress, { spec: { clusterIPs: ['10.96.0.5', 'fd00:96::5'] } }).map((g) => g.snatAddress), ['203.0.113.10', '2001:db8::10']);
  });
});
