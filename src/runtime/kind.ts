import type { KubernetesObject } from '@kubernetes/client-node';
import type { KindDescriptor } from '../api/v2/kinds.js';

/** Kind descriptors and `defineKind` are declared with the kinds, in src/api/v2/kinds.ts. */
export { defineKind, type KindDescriptor } from '../api/v2/kinds.js';

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
