/**
 * What `kubectl coil` does in the API, declared once: hack/chart-rbac.ts turns it into the chart's
 * ClusterRoles `coil-ipam-view` (show, check) and `coil-ipam-admin` (also release), which an admin
 * binds to whoever operates coil (README, "Operate"); test/envtest/kubectl-coil.test.ts runs the
 * tool as users holding only these.
 */
import { Kinds } from '../api/v2/kinds.js';
import { kindRule } from '../runtime/rbac.js';
import type { RbacRule } from '../runtime/registry.js';
import { IPAM_READER_SERVICE_ACCOUNT } from './cluster.js';

/**
 * `ipam show`, `ipam check` and `version` (its Pods and Nodes): reads, and coild's `GET /ipam` through the pod proxy with a token
 * of the ServiceAccount `coil-ipam-reader` (cluster.ts says why).
 */
export const KUBECTL_COIL_VIEW_RBAC: readonly RbacRule[] = [
  kindRule([Kinds.AddressPool, Kinds.AddressBlock, Kinds.BlockRequest], ['get', 'list']),
  kindRule([Kinds.Node, Kinds.Pod], ['get', 'list']),
  // The cluster's identity in a report: the UID of kube-system.
  kindRule(Kinds.Namespace, ['get'], { resourceNames: ['kube-system'] }),
  kindRule(Kinds.Pod, ['get'], { subresource: 'proxy' }),
  kindRule(Kinds.ServiceAccount, ['create'], { subresource: 'token', resourceNames: [IPAM_READER_SERVICE_ACCOUNT] }),
];

/**
 * `ipam release` besides the reads: deleting a block (and its finalizer), and a leak release
 * request annotated on the block that holds the address (ipam-release.ts).
 */
export const KUBECTL_COIL_RELEASE_RBAC: readonly RbacRule[] = [
  kindRule(Kinds.AddressBlock, ['delete', 'patch']),
];
