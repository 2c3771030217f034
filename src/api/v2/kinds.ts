/**
 * Every kind coil reads or writes, declared once: Coil's four kinds (from their CRD definitions in
 * this directory) and the core and workload kinds the programs use. The controller, coild,
 * coil-egress, the migrator, hack/ and the tests all import {@link Kinds}; nothing declares a kind
 * elsewhere. Pure data (type-only imports), like the rest of src/api/v2.
 *
 * Objects read through the runtime are plain JSON: client-node's `Date`-typed fields (e.g. a Node
 * condition's `lastTransitionTime`) are RFC 3339 strings at run time; read them with {@link timeMs}.
 */
import type {
  CoreV1Event,
  EventsV1Event,
  KubernetesObject,
  V1ClusterRole,
  V1ClusterRoleBinding,
  V1ConfigMap,
  V1DaemonSet,
  V1EndpointSlice,
  V1Deployment,
  V1Namespace,
  V1Node,
  V1Pod,
  V1PodDisruptionBudget,
  V1Service,
  V1ServiceAccount,
  V1SubjectAccessReview,
  V1TokenReview,
} from '@kubernetes/client-node';
import type { AddressBlock } from './addressblock.js';
import { AddressBlockKind } from './addressblock.js';
import type { AddressPool } from './addresspool.js';
import { AddressPoolKind } from './addresspool.js';
import type { BlockRequest } from './blockrequest.js';
import { BlockRequestKind } from './blockrequest.js';
import type { Egress } from './egress.js';
import { EgressKind } from './egress.js';
import type { KindDefinition } from './schema.js';

/**
 * Names one API resource the way the REST API addresses it. Reconcilers, webhooks, the cache and
 * the client all take a descriptor instead of a class, so the runtime never needs discovery
 * (client-node's KubernetesObjectApi asks `GET /apis/<gv>` before its first call on each kind).
 *
 * `T` is a phantom type: it only lets `cache.get(kind, …)` return the kind's TS type.
 *
 * @example
 *   const Widget = defineKind<Widget>({ group: 'example.com', version: 'v1', kind: 'Widget', plural: 'widgets', namespaced: true });
 * @see Kubernetes API conventions, "Resources" (group/version/resource and kind)
 */
export interface KindDescriptor<T extends KubernetesObject = KubernetesObject> {
  /** API group; `''` for the core group (`/api/v1`). */
  readonly group: string;
  readonly version: string;
  /** `kind` as written in objects, e.g. `AddressPool`. */
  readonly kind: string;
  /** Lower-case plural resource name used in paths, e.g. `addresspools`. */
  readonly plural: string;
  /** Whether objects live in a namespace (false for AddressPool, AddressBlock, BlockRequest, Node). */
  readonly namespaced: boolean;
  /** Phantom field carrying `T`; never set. */
  readonly __object?: T;
}

/** Builds a descriptor; exists only to fix `T` at the definition site. */
export function defineKind<T extends KubernetesObject>(d: Omit<KindDescriptor<T>, '__object'>): KindDescriptor<T> {
  return Object.freeze({ ...d });
}

/** The descriptor of one of Coil's CRDs, from its definition (names only, no schema). */
function fromDefinition<T extends KubernetesObject>(d: KindDefinition): KindDescriptor<T> {
  return defineKind<T>({ group: d.group, version: d.version, kind: d.kind, plural: d.plural, namespaced: d.namespaced });
}

const CLUSTER_SCOPED = false;

/**
 * A `v1` kind of a built-in API group (`''` for core). Its plural is the lower-cased kind plus
 * `s`, true of every built-in kind declared here (not of all: Ingress → ingresses).
 */
function builtIn<T extends KubernetesObject>(group: string, kind: string, namespaced = true): KindDescriptor<T> {
  return defineKind<T>({ group, version: 'v1', kind, plural: `${kind.toLowerCase()}s`, namespaced });
}

/** `coordination.k8s.io/v1` Lease, as plain JSON (times are RFC 3339 MicroTime strings). */
export interface Lease {
  apiVersion?: string;
  kind?: string;
  metadata: { name: string; namespace: string; resourceVersion?: string };
  spec?: {
    holderIdentity?: string | null;
    leaseDurationSeconds?: number;
    acquireTime?: string | null;
    renewTime?: string | null;
    leaseTransitions?: number;
  };
}

/** Descriptors for `@Reconciler({ for: Kinds.BlockRequest })`, the cache and the client. */
export const Kinds = Object.freeze({
  // Coil's kinds, group coil.cybozu.com, version v2.
  AddressPool: fromDefinition<AddressPool>(AddressPoolKind),
  AddressBlock: fromDefinition<AddressBlock>(AddressBlockKind),
  BlockRequest: fromDefinition<BlockRequest>(BlockRequestKind),
  Egress: fromDefinition<Egress>(EgressKind),
  // Core and workload kinds, by API group.
  Node: builtIn<V1Node>('', 'Node', CLUSTER_SCOPED),
  Namespace: builtIn<V1Namespace>('', 'Namespace', CLUSTER_SCOPED),
  Pod: builtIn<V1Pod>('', 'Pod'),
  Service: builtIn<V1Service>('', 'Service'),
  EndpointSlice: builtIn<V1EndpointSlice>('discovery.k8s.io', 'EndpointSlice'),
  ServiceAccount: builtIn<V1ServiceAccount>('', 'ServiceAccount'),
  ConfigMap: builtIn<V1ConfigMap>('', 'ConfigMap'),
  Event: builtIn<CoreV1Event>('', 'Event'),
  /** The same Events through the `events.k8s.io` API, which newer clients write. */
  EventsV1Event: builtIn<EventsV1Event>('events.k8s.io', 'Event'),
  Deployment: builtIn<V1Deployment>('apps', 'Deployment'),
  DaemonSet: builtIn<V1DaemonSet>('apps', 'DaemonSet'),
  PodDisruptionBudget: builtIn<V1PodDisruptionBudget>('policy', 'PodDisruptionBudget'),
  ClusterRole: builtIn<V1ClusterRole>('rbac.authorization.k8s.io', 'ClusterRole', CLUSTER_SCOPED),
  ClusterRoleBinding: builtIn<V1ClusterRoleBinding>('rbac.authorization.k8s.io', 'ClusterRoleBinding', CLUSTER_SCOPED),
  Lease: builtIn<Lease & { metadata: { name: string } }>('coordination.k8s.io', 'Lease'),
  /** Created (never stored) by the authenticated HTTP endpoints: src/runtime/http-auth.ts. */
  TokenReview: builtIn<V1TokenReview>('authentication.k8s.io', 'TokenReview', CLUSTER_SCOPED),
  SubjectAccessReview: builtIn<V1SubjectAccessReview>('authorization.k8s.io', 'SubjectAccessReview', CLUSTER_SCOPED),
});

/**
 * Milliseconds since the epoch of an API timestamp (string on the wire, `Date` in client-node's
 * typings). @returns undefined when absent or unparsable
 */
export function timeMs(t: string | Date | undefined | null): number | undefined {
  if (t === undefined || t === null) return undefined;
  const ms = t instanceof Date ? t.getTime() : Date.parse(t);
  return Number.isNaN(ms) ? undefined : ms;
}
