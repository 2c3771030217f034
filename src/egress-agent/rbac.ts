/**
 * What coil-egress (in Egress pods) may do in the API; hack/ writes it into the chart's
 * ClusterRole `coil-egress`, which the Egress controller binds to the `coil-egress`
 * ServiceAccount of each namespace holding an Egress. Read-only: it watches the client pods
 * that name its Egress, and reviews the callers of its authenticated `/metrics`
 * (src/runtime/http-auth.ts).
 */
import type { RbacRule } from '../runtime/registry.js';
import { Kinds } from '../api/v2/kinds.js';
import { kindRule } from '../runtime/rbac.js';
import { HTTP_AUTH_RBAC } from '../runtime/http-auth.js';

export const EGRESS_AGENT_RBAC: readonly RbacRule[] = [
  kindRule(Kinds.Pod, ['get', 'list', 'watch']),
  ...HTTP_AUTH_RBAC,
];
