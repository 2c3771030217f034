/**
 * What coild may do in the API, by feature; hack/ writes it into the chart (files/rbac.yaml),
 * and the lab runs coild with exactly these rights, so a missing rule fails there.
 *
 * Deliberately absent (Coil grants some of them): creating AddressBlocks (only the controller
 * allocates), writing BlockRequest status (only the controller answers), any Pod or Node write,
 * Secrets.
 */
import type { RbacRule } from '../runtime/registry.js';

export const COILD_RBAC: { readonly common: readonly RbacRule[]; readonly ipam: readonly RbacRule[]; readonly egress: readonly RbacRule[] } = {
  common: [
    // The Node's InternalIPs are the pods' gateways; the Node is the BlockRequests' owner.
    { group: '', resources: ['nodes'], verbs: ['get', 'list', 'watch'] },
    // Events on Pods whose ADD failed (e.g. a pool out of blocks).
    { group: '', resources: ['events'], verbs: ['create', 'patch'] },
    // Its own Pod (the owning DaemonSet) and that DaemonSet: an uninstall removes coil from the node.
    { group: '', resources: ['pods'], verbs: ['get'] },
    { group: 'apps', resources: ['daemonsets'], verbs: ['get', 'list', 'watch'] },
  ],
  ipam: [
    { group: '', resources: ['namespaces', 'pods'], verbs: ['get', 'list', 'watch'] },
    // Release of an emptied block: remove the finalizer, delete the block.
    { group: 'coil.cybozu.com', resources: ['addressblocks'], verbs: ['get', 'list', 'watch', 'update', 'patch', 'delete'] },
    { group: 'coil.cybozu.com', resources: ['addresspools'], verbs: ['get', 'list', 'watch'] },
    { group: 'coil.cybozu.com', resources: ['blockrequests'], verbs: ['get', 'list', 'watch', 'create', 'delete'] },
  ],
  egress: [
    { group: '', resources: ['pods', 'services'], verbs: ['get', 'list', 'watch'] },
    { group: 'coil.cybozu.com', resources: ['egresses'], verbs: ['get', 'list', 'watch'] },
  ],
};
