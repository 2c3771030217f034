/**
 * Kubernetes' taint and toleration matching, for tests that check coil's pods against the taints
 * a node gets (k8s.io/api/core/v1 `Toleration.ToleratesTaint`).
 */
import type * as k8s from '@kubernetes/client-node';

/**
 * True when `toleration` tolerates `taint` (pure): an empty effect matches every effect; operator
 * `Exists` matches any value (an empty key: every taint); `Equal` (the default) needs key and value.
 */
export function tolerates(toleration: k8s.V1Toleration, taint: k8s.V1Taint): boolean {
  if (toleration.effect && toleration.effect !== taint.effect) return false;
  if (toleration.operator === 'Exists') return !toleration.key || toleration.key === taint.key;
  return toleration.key === taint.key && (toleration.value ?? '') === (taint.value ?? '');
}

/**
 * The taints Kubernetes itself puts on a node (the node lifecycle controller for conditions and
 * reachability, kubelet's eviction manager's conditions, `kubectl cordon`), each with the effects it
 * is applied with (k8s.io/api/core/v1 well_known_taints.go; NoExecute for not-ready and
 * unreachable: taint-based eviction).
 */
export const NODE_LIFECYCLE_TAINTS: readonly k8s.V1Taint[] = [
  { key: 'node.kubernetes.io/not-ready', effect: 'NoSchedule' },
  { key: 'node.kubernetes.io/not-ready', effect: 'NoExecute' },
  { key: 'node.kubernetes.io/unreachable', effect: 'NoSchedule' },
  { key: 'node.kubernetes.io/unreachable', effect: 'NoExecute' },
  { key: 'node.kubernetes.io/memory-pressure', effect: 'NoSchedule' },
  { key: 'node.kubernetes.io/disk-pressure', effect: 'NoSchedule' },
  { key: 'node.kubernetes.io/pid-pressure', effect: 'NoSchedule' },
  { key: 'node.kubernetes.io/network-unavailable', effect: 'NoSchedule' },
  { key: 'node.kubernetes.io/unschedulable', effect: 'NoSchedule' },
];
