/**
 * What `coil-controller release-finalizers` (the chart's post-delete hook) may do: the chart's
 * `coil-uninstall` ClusterRole is generated from this (hack/chart-rbac.ts).
 */
import type { RbacRule } from '../runtime/registry.js';

export const RELEASE_FINALIZERS_RBAC: readonly RbacRule[] = [
  { group: 'coil.cybozu.com', resources: ['addresspools', 'addressblocks'], verbs: ['get', 'list', 'update', 'patch'] },
  { group: '', resources: ['pods'], verbs: ['list'] },
];
