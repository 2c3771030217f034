import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Kinds } from '../api/v2/kinds.js';
import { LEADER_ELECTION_RBAC, MANAGER_RBAC, kindRule } from './rbac.js';

describe('kindRule', () => {
  it('takes group and resource names from the kind descriptors', () => {
    assert.deepEqual(kindRule(Kinds.Pod, ['get']), { group: '', resources: ['pods'], verbs: ['get'] });
    assert.deepEqual(kindRule([Kinds.AddressPool, Kinds.AddressBlock], ['get', 'list']), { group: 'coil.cybozu.com', resources: ['addresspools', 'addressblocks'], verbs: ['get', 'list'] });
    assert.deepEqual(kindRule(Kinds.Egress, ['update'], { subresource: 'finalizers' }), { group: 'coil.cybozu.com', resources: ['egresses/finalizers'], verbs: ['update'] });
    assert.deepEqual(kindRule(Kinds.ClusterRole, ['bind'], { resourceNames: ['coil-egress'] }), { group: 'rbac.authorization.k8s.io', resources: ['clusterroles'], verbs: ['bind'], resourceNames: ['coil-egress'] });
  });
  it('refuses one rule across API groups', () => {
    assert.throws(() => kindRule([Kinds.Pod, Kinds.Deployment], ['get']), /cannot span API groups: core, apps/);
  });
});

describe("the Manager's own rules", () => {
  it('name Events and the Lease as their kind descriptors do, in the chart\'s words', () => {
    assert.deepEqual(MANAGER_RBAC, [
      { group: Kinds.Event.group, resources: [Kinds.Event.plural], verbs: ['create', 'patch'] },
      { group: 'events.k8s.io', resources: ['events'], verbs: ['create', 'patch'] },
    ]);
    assert.deepEqual(LEADER_ELECTION_RBAC, [
      { group: 'coordination.k8s.io', resources: [Kinds.Lease.plural], verbs: ['get', 'list', 'watch', 'create', 'update', 'patch', 'delete'] },
      { group: '', resources: ['events'], verbs: ['create', 'patch'] },
    ]);
  });
});
