/**
 * Kind descriptors coild reads and writes: the IPAM kinds, Node and Pod (shared with the
 * controller in src/reconcilers/kinds.ts) plus the core Namespace, whose `coil.cybozu.com/pool`
 * annotation chooses a pod's pool (docs/compatibility.md#pool-choice), and coild's own DaemonSet.
 */
import type { V1DaemonSet, V1Namespace } from '@kubernetes/client-node';
import { Kinds } from '../reconcilers/kinds.js';
import { defineKind } from '../runtime/kind.js';

/** Descriptors for coild's cache and client. */
export const CoildKinds = Object.freeze({
  ...Kinds,
  Namespace: defineKind<V1Namespace>({ group: '', version: 'v1', kind: 'Namespace', plural: 'namespaces', namespaced: false }),
  /** coild's owning DaemonSet: gone or deleting at shutdown means an uninstall (uninstall.ts). */
  DaemonSet: defineKind<V1DaemonSet>({ group: 'apps', version: 'v1', kind: 'DaemonSet', plural: 'daemonsets', namespaced: true }),
});
