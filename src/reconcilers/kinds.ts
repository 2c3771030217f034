/**
 * Typed kind descriptors of what the IPAM controller reads and writes: Coil's three IPAM kinds
 * (from their CRD definitions in src/api/v2) and the core Node and Pod. A descriptor's phantom type
 * makes `cache.get(Kinds.AddressPool, key)` return an {@link AddressPool}.
 *
 * Objects from the cache are plain JSON: client-node's `Date`-typed fields (e.g. a Node condition's
 * `lastTransitionTime`) are RFC 3339 strings at run time; read them with {@link timeMs}.
 */
import type { V1Node, V1Pod } from '@kubernetes/client-node';
import type { AddressBlock } from '../api/v2/addressblock.js';
import { AddressBlockKind } from '../api/v2/addressblock.js';
import type { AddressPool } from '../api/v2/addresspool.js';
import { AddressPoolKind } from '../api/v2/addresspool.js';
import type { BlockRequest } from '../api/v2/blockrequest.js';
import { BlockRequestKind } from '../api/v2/blockrequest.js';
import type { KindDefinition } from '../api/v2/schema.js';
import { defineKind, type KindDescriptor } from '../runtime/kind.js';

function fromDefinition<T extends AddressPool | AddressBlock | BlockRequest>(d: KindDefinition): KindDescriptor<T> {
  return defineKind<T>({ group: d.group, version: d.version, kind: d.kind, plural: d.plural, namespaced: d.namespaced });
}

/** Descriptors for `@Reconciler({ for: Kinds.BlockRequest })`, the cache and the client. */
export const Kinds = Object.freeze({
  AddressPool: fromDefinition<AddressPool>(AddressPoolKind),
  AddressBlock: fromDefinition<AddressBlock>(AddressBlockKind),
  BlockRequest: fromDefinition<BlockRequest>(BlockRequestKind),
  Node: defineKind<V1Node>({ group: '', version: 'v1', kind: 'Node', plural: 'nodes', namespaced: false }),
  Pod: defineKind<V1Pod>({ group: '', version: 'v1', kind: 'Pod', plural: 'pods', namespaced: true }),
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
