/**
 * AddressBlock: one block of a pool, held by one node. Cluster-scoped; its fields are top-level
 * (no spec/status), as in Coil. Name `<pool>-<index>`, labels pool/node/request, finalizer
 * `coil.cybozu.com`, controller ownerReference to the AddressPool.
 *
 * @see docs/compatibility.md#addressblock-resource
 */
import type { V1ObjectMeta } from '@kubernetes/client-node';
import { GROUP, LABEL_NODE, LABEL_POOL, LABEL_RESERVED, VERSION } from './keys.js';
import { type KindDefinition, int32, obj, str } from './schema.js';

export interface AddressBlock {
  apiVersion?: string;
  kind?: string;
  metadata?: V1ObjectMeta;
  /** Index of the block in its pool, counted across the pool's subnets in order. */
  index: number;
  /** IPv4 CIDR of the block, e.g. `10.2.0.32/27`. */
  ipv4?: string;
  /** IPv6 CIDR of the block. */
  ipv6?: string;
}

/** Name of the block at `index` of `pool` (Coil: `<pool>-<index>`). */
export function addressBlockName(pool: string, index: number | bigint): string {
  return `${pool}-${index}`;
}

/** Pool name from the block's label, or undefined if unlabeled. */
export function poolOf(block: AddressBlock): string | undefined {
  return block.metadata?.labels?.[LABEL_POOL];
}

/** Node name from the block's label, or undefined if unlabeled. */
export function nodeOf(block: AddressBlock): string | undefined {
  return block.metadata?.labels?.[LABEL_NODE];
}

/** True for blocks reserved by the v1 migration: they count as taken and are never allocated from. */
export function isReserved(block: AddressBlock): boolean {
  return block.metadata?.labels?.[LABEL_RESERVED] === 'true';
}

/** Schema and names of the AddressBlock CRD. */
export const AddressBlockKind: KindDefinition = {
  group: GROUP,
  version: VERSION,
  kind: 'AddressBlock',
  listKind: 'AddressBlockList',
  plural: 'addressblocks',
  singular: 'addressblock',
  shortNames: ['ab'],
  categories: ['coil'],
  namespaced: false,
  description: 'AddressBlock is the Schema for the addressblocks API: a block of addresses of an AddressPool, assigned to one node.',
  printerColumns: [
    { name: 'Node', type: 'string', jsonPath: ".metadata.labels['coil\\.cybozu\\.com/node']" },
    { name: 'Pool', type: 'string', jsonPath: ".metadata.labels['coil\\.cybozu\\.com/pool']" },
    { name: 'IPv4', type: 'string', jsonPath: '.ipv4' },
    { name: 'IPv6', type: 'string', jsonPath: '.ipv6' },
  ],
  schema: obj('AddressBlock is the Schema for the addressblocks API.', {
    apiVersion: str('APIVersion defines the versioned schema of this representation of an object.'),
    kind: str('Kind is a string value representing the REST resource this object represents.'),
    metadata: { type: 'object' },
    index: int32('Index is the index of this block in the pool, counted across the subnets in order.', { minimum: 0 }),
    ipv4: str('IPv4 is the IPv4 subnet of this block in CIDR notation.'),
    ipv6: str('IPv6 is the IPv6 subnet of this block in CIDR notation.'),
  }, ['index']),
};
