/**
 * What `coil-controller release-finalizers` (the chart's post-delete hook) may do: the chart's
 * `coil-uninstall` ClusterRole is generated from this (hack/chart-rbac.ts).
 */
import type { RbacRule } from '../runtime/registry.js';
import { Kinds } from '../api/v2/kinds.js';
import { kindRule } from '../runtime/rbac.js';

export const RELEASE_FINALIZERS_RBAC: readonly RbacRule[] = [
  kindRule([Kinds.AddressPool, Kinds.AddressBlock], ['get', 'list', 'update', 'patch']),
  kindRule(Kinds.Pod, ['list']),
];
