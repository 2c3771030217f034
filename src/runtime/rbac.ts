/**
 * RBAC rules every Manager needs regardless of its reconcilers: Events from the event recorder
 * (cluster-wide, on the reconciled objects) and, in the leader-election namespace only, the
 * Lease. hack/ writes them into the chart (files/rbac.yaml).
 */
import type { EventRecorder } from './event-recorder.js';
import type { KindDescriptor } from './kind.js';
import type { RbacRule } from './registry.js';

/** What the Manager's {@link EventRecorder} writes: core/v1 Events, created and patched (counts). */
export const EVENT_RECORDER_RBAC: readonly RbacRule[] = [{ group: '', resources: ['events'], verbs: ['create', 'patch'] }];

/** Cluster-wide: the event recorder's Events (and events.k8s.io for newer clients). */
export const MANAGER_RBAC: readonly RbacRule[] = [
  ...EVENT_RECORDER_RBAC,
  { group: 'events.k8s.io', resources: ['events'], verbs: ['create', 'patch'] },
];

/** get, list and watch on `kind`: what caching it (an informer) needs. */
export function readRule(kind: KindDescriptor): RbacRule {
  return { group: kind.group, resources: [kind.plural], verbs: ['get', 'list', 'watch'] };
}

/** In the leader-election namespace only (a Role): the Lease, and Events about it. */
export const LEADER_ELECTION_RBAC: readonly RbacRule[] = [
  { group: 'coordination.k8s.io', resources: ['leases'], verbs: ['get', 'list', 'watch', 'create', 'update', 'patch', 'delete'] },
  { group: '', resources: ['events'], verbs: ['create', 'patch'] },
];
