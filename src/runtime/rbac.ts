/**
 * RBAC rules every Manager needs regardless of its reconcilers: Events from the event recorder
 * (cluster-wide, on the reconciled objects) and, in the leader-election namespace only, the
 * Lease. hack/ writes them into the chart (files/rbac.yaml).
 */
import type { RbacRule } from './registry.js';

/** Cluster-wide: the event recorder writes core/v1 Events (and events.k8s.io for newer clients). */
export const MANAGER_RBAC: readonly RbacRule[] = [
  { group: '', resources: ['events'], verbs: ['create', 'patch'] },
  { group: 'events.k8s.io', resources: ['events'], verbs: ['create', 'patch'] },
];

/** In the leader-election namespace only (a Role): the Lease, and Events about it. */
export const LEADER_ELECTION_RBAC: readonly RbacRule[] = [
  { group: 'coordination.k8s.io', resources: ['leases'], verbs: ['get', 'list', 'watch', 'create', 'update', 'patch', 'delete'] },
  { group: '', resources: ['events'], verbs: ['create', 'patch'] },
];
