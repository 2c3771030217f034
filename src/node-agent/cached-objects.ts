/**
 * What coild keeps of the objects it caches: the fields its parts read, nothing else
 * (client-go's `SetTransform`, src/runtime/informer.ts). coild runs on every node, and each
 * Pod of its node costs it memory for as long as the Pod lives: a kubelet-run Pod of a
 * Deployment, cached whole, cost ≈ 6.4 KB of heap (100 JS objects); reduced to the fields below,
 * ≈ 1 KB (docs/performance.md#footprint). Everything else is cached without `managedFields`,
 * which no part reads (a third of a small object).
 *
 * The Pod fields kept, and who reads them:
 * - metadata name, namespace, uid, resourceVersion: the cache key, Events on the Pod
 *   (src/runtime/event-recorder.ts names it by these);
 * - metadata annotations: the Egresses a client names (egress/egress-watcher.ts);
 * - metadata labels: kept (a Pod's identity in logs and selectors; small);
 * - metadata ownerReferences: coild's own Pod's DaemonSet (uninstall.ts);
 * - metadata deletionTimestamp, creationTimestamp: kept (a Pod going away);
 * - spec nodeName, hostNetwork: this node's Pods (orphans.ts, cni-service.ts), host-network Pods
 *   carry no pod address (src/ipam/pod-ips.ts) nor egress;
 * - status phase, podIP, podIPs: the addresses a live Pod shows (src/ipam/pod-ips.ts).
 * A part that reads another field of a cached Pod must add it here (test: cached-objects.test.ts).
 */
import type { KubernetesObject, V1Pod } from '@kubernetes/client-node';
import { stripManagedFields } from '../runtime/informer.js';

/** A Pod reduced to the fields coild reads (see the module comment). Pure; keeps the cache key. */
export function coildPod(obj: KubernetesObject): KubernetesObject {
  const p = obj as V1Pod;
  const m = p.metadata ?? {};
  const slim: V1Pod = {
    ...(p.apiVersion !== undefined && { apiVersion: p.apiVersion }),
    ...(p.kind !== undefined && { kind: p.kind }),
    metadata: {
      name: m.name, namespace: m.namespace, uid: m.uid, resourceVersion: m.resourceVersion,
      ...(m.labels && { labels: m.labels }),
      ...(m.annotations && { annotations: m.annotations }),
      ...(m.ownerReferences && { ownerReferences: m.ownerReferences }),
      ...(m.creationTimestamp && { creationTimestamp: m.creationTimestamp }),
      ...(m.deletionTimestamp && { deletionTimestamp: m.deletionTimestamp }),
    },
    // No containers: the type requires them, no reader does.
    spec: { ...(p.spec?.nodeName !== undefined && { nodeName: p.spec.nodeName }), ...(p.spec?.hostNetwork !== undefined && { hostNetwork: p.spec.hostNetwork }) } as V1Pod['spec'],
    status: {
      ...(p.status?.phase !== undefined && { phase: p.status.phase }),
      ...(p.status?.podIP !== undefined && { podIP: p.status.podIP }),
      ...(p.status?.podIPs !== undefined && { podIPs: p.status.podIPs }),
    },
  };
  return slim as KubernetesObject;
}

/** Any other kind: the object without `metadata.managedFields`. */
export const coildObject = stripManagedFields;
