/**
 * RBAC rules every Manager needs regardless of its reconcilers: Events from the event recorder
 * (cluster-wide, on the reconciled objects) and, in the leader-election namespace only, the
 * Lease. hack/ writes them into the chart (files/rbac.yaml).
 */
import { Kinds } from '../api/v2/kinds.js';
import type { EventRecorder } from './event-recorder.js';
import type { KindDescriptor } from './kind.js';
import type { RbacRule } from './registry.js';

/** What the Manager's {@link EventRecorder} writes: core/v1 Events, created and patched (counts). */
export const EVENT_RECORDER_RBAC: readonly RbacRule[] = [kindRule(Kinds.Event, ['create', 'patch'])];

/** Cluster-wide: the event recorder's Events (and events.k8s.io for newer clients). */
export const MANAGER_RBAC: readonly RbacRule[] = [
  ...EVENT_RECORDER_RBAC,
  kindRule(Kinds.EventsV1Event, ['create', 'patch']),
];

/** get, list and watch on `kind`: what caching it (an informer) needs. */
export function readRule(kind: KindDescriptor): RbacRule {
  return { group: kind.group, resources: [kind.plural], verbs: ['get', 'list', 'watch'] };
}

/** In the leader-election namespace only (a Role): the Lease, and Events about it. */
export const LEADER_ELECTION_RBAC: readonly RbacRule[] = [
  kindRule(Kinds.Lease, ['get', 'list', 'watch', 'create', 'update', 'patch', 'delete']),
  ...EVENT_RECORDER_RBAC,
];

/**
 * A rule on `kinds` (one API group; several make one rule, as the chart writes them), or on their
 * `subresource` (`status`, `finalizers`): group and resource names come from the kinds'
 * descriptors (src/api/v2/kinds.ts), never spelled again.
 * @throws Error when the kinds are of different groups
 */
export function kindRule(kinds: KindDescriptor | readonly KindDescriptor[], verbs: readonly string[], o: { readonly subresource?: string; readonly resourceNames?: readonly string[] } = {}): RbacRule {
  const list: readonly KindDescriptor[] = Array.isArray(kinds) ? kinds : [kinds as KindDescriptor];
  const group = list[0]!.group;
  if (list.some((k) => k.group !== group)) throw new Error(`one RBAC rule cannot span API groups: ${list.map((k) => k.group || 'core').join(', ')}`);
  return {
    group,
    resources: list.map((k) => (o.subresource ? `${k.plural}/${o.subresource}` : k.plural)),
    verbs,
    ...(o.resourceNames ? { resourceNames: o.resourceNames } : {}),
  };
}
