import type { KubernetesObject } from '@kubernetes/client-node';

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

/** `apiVersion` of objects of this kind: `group/version`, or just `version` for the core group. */
export function apiVersionOf(k: KindDescriptor): string {
  return k.group === '' ? k.version : `${k.group}/${k.version}`;
}

/** Unique id of a kind inside one process: `plural.group` (the CRD name form), `plural` for core. */
export function kindId(k: KindDescriptor): string {
  return k.group === '' ? k.plural : `${k.plural}.${k.group}`;
}

/**
 * REST path of the collection: `/apis/g/v[/namespaces/ns]/plural`. Without `namespace` a
 * namespaced kind is listed across all namespaces.
 */
export function collectionPath(k: KindDescriptor, namespace?: string): string {
  const root = k.group === '' ? `/api/${k.version}` : `/apis/${k.group}/${k.version}`;
  const ns = k.namespaced && namespace ? `/namespaces/${encodeURIComponent(namespace)}` : '';
  return `${root}${ns}/${k.plural}`;
}

/**
 * REST path of one object (and optionally a subresource such as `status`).
 * @throws Error when a namespaced kind is addressed without a namespace
 */
export function objectPath(k: KindDescriptor, key: ObjectKey, subresource?: string): string {
  if (k.namespaced && !key.namespace) throw new Error(`${k.kind} ${key.name}: namespace is required`);
  const sub = subresource ? `/${subresource}` : '';
  return `${collectionPath(k, key.namespace)}/${encodeURIComponent(key.name)}${sub}`;
}

/** Namespace and name of an object; `namespace` is absent for cluster-scoped kinds. */
export interface ObjectKey {
  readonly namespace?: string;
  readonly name: string;
}

/**
 * The work-queue key of an object: `namespace/name`, or `name` when cluster-scoped (client-go's
 * `MetaNamespaceKeyFunc`, so keys read the same in logs as in Go controllers).
 */
export function keyOf(obj: KubernetesObject | ObjectKey): string {
  const key = 'metadata' in obj ? objectKeyOf(obj) : (obj as ObjectKey);
  return key.namespace ? `${key.namespace}/${key.name}` : key.name;
}

/** Namespace and name from an object's metadata (empty name when the object has none). */
export function objectKeyOf(obj: KubernetesObject): ObjectKey {
  const name = obj.metadata?.name ?? '';
  const namespace = obj.metadata?.namespace;
  return namespace ? { namespace, name } : { name };
}

/** Inverse of {@link keyOf}. */
export function parseKey(key: string): ObjectKey {
  const slash = key.indexOf('/');
  return slash < 0 ? { name: key } : { namespace: key.slice(0, slash), name: key.slice(slash + 1) };
}
