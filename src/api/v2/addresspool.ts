/**
 * AddressPool: a cluster-scoped set of subnets from which AddressBlocks are carved.
 *
 * @see docs/compatibility.md#addresspool-resource, docs/compatibility.md#addresspool-webhooks
 */
import type { V1ObjectMeta } from '@kubernetes/client-node';
import type { SubnetSet } from '../../ipam/pool.js';
import { DEFAULT_BLOCK_SIZE_BITS, GROUP, VERSION } from './keys.js';
import { type KindDefinition, int32, obj, str } from './schema.js';

/** One subnet item (src/ipam/pool.ts): IPv4, IPv6 or both (dual stack; both must have the same host-bit width). */
export type { SubnetSet };

export interface AddressPoolSpec {
  /** log2 of the number of addresses in one block. Default 5 (32 addresses); immutable. */
  blockSizeBits: number;
  /** Subnets in allocation order; append-only. At least one. */
  subnets: SubnetSet[];
}

/** Observed allocation state, written by the AddressPool reconciler (ours; Coil has no status). */
export interface AddressPoolStatus {
  /** Number of AddressBlocks currently carved from the pool. */
  allocatedBlocks?: number;
  /** Number of blocks the pool can hold, as a decimal string (IPv6 pools exceed 2^63). */
  maxBlocks?: string;
}

export interface AddressPool {
  apiVersion?: string;
  kind?: string;
  metadata?: V1ObjectMeta;
  spec: AddressPoolSpec;
  status?: AddressPoolStatus;
}

/** Schema and names of the AddressPool CRD. */
export const AddressPoolKind: KindDefinition = {
  group: GROUP,
  version: VERSION,
  kind: 'AddressPool',
  listKind: 'AddressPoolList',
  plural: 'addresspools',
  singular: 'addresspool',
  shortNames: ['ap'],
  categories: ['coil'],
  namespaced: false,
  description: 'AddressPool is the Schema for the addresspools API: subnets carved into per-node AddressBlocks. A pool named "default" serves namespaces without the coil.cybozu.com/pool annotation.',
  subresources: { status: true },
  printerColumns: [
    { name: 'BlockSize Bits', type: 'integer', jsonPath: '.spec.blockSizeBits', description: 'log2 of the addresses per block' },
    { name: 'Allocated', type: 'integer', jsonPath: '.status.allocatedBlocks', description: 'allocated blocks' },
    { name: 'Max', type: 'string', jsonPath: '.status.maxBlocks', description: 'blocks the pool can hold' },
  ],
  schema: obj('AddressPool is the Schema for the addresspools API.', {
    apiVersion: str('APIVersion defines the versioned schema of this representation of an object.'),
    kind: str('Kind is a string value representing the REST resource this object represents.'),
    metadata: { type: 'object' },
    spec: obj(
      'AddressPoolSpec defines the desired state of AddressPool.',
      {
        blockSizeBits: int32(
          'BlockSizeBits specifies the size of the address blocks carved from this pool. If BlockSizeBits is 5, a block will have 2^5 = 32 addresses. Immutable.',
          { default: DEFAULT_BLOCK_SIZE_BITS, minimum: 0 },
        ),
        subnets: {
          type: 'array',
          description: 'Subnets is a list of IPv4, IPv6, or dual stack subnets. Items must be consistent (the same families) and may only be appended.',
          minItems: 1,
          items: obj('SubnetSet holds an IPv4 subnet, an IPv6 subnet, or both with the same number of host bits.', {
            ipv4: str('IPv4 subnet in CIDR notation, e.g. 10.2.0.0/16.'),
            ipv6: str('IPv6 subnet in CIDR notation, e.g. fd02::/112.'),
          }),
        },
      },
      ['subnets'],
    ),
    status: obj('AddressPoolStatus is the observed allocation state.', {
      allocatedBlocks: { type: 'integer', format: 'int64', description: 'Number of AddressBlocks carved from the pool.', minimum: 0 },
      maxBlocks: str('Number of blocks the pool can hold, as a decimal string (IPv6 pools exceed 2^63).'),
    }),
  }, ['spec']),
};
