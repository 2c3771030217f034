/**
 * BlockRequest: a node's request for one more AddressBlock of a pool. Created by coild
 * (ownerReference → Node), answered by the controller through the status subresource.
 *
 * @see docs/compatibility.md#blockrequest-resource, docs/compatibility.md#blockrequest-reconciler
 */
import type { V1ObjectMeta } from '@kubernetes/client-node';
import { type Condition, findCondition, isConditionTrue } from './conditions.js';
import { ANN_CLAIM_INDEX, GROUP, VERSION } from './keys.js';
import { type KindDefinition, conditionSchema, obj, str } from './schema.js';

export interface BlockRequestSpec {
  /** Node that will hold the block. */
  nodeName: string;
  /** AddressPool to carve the block from. */
  poolName: string;
}

export interface BlockRequestStatus {
  /** Name of the AddressBlock allocated for this request. */
  addressBlockName?: string;
  /** `Complete` and, on failure, `Failed` (reason `out of blocks`). */
  conditions?: Condition[];
}

export interface BlockRequest {
  apiVersion?: string;
  kind?: string;
  metadata?: V1ObjectMeta;
  spec: BlockRequestSpec;
  status?: BlockRequestStatus;
}

/** Condition types of a BlockRequest. */
export const COND_COMPLETE = 'Complete';
export const COND_FAILED = 'Failed';
/** Reason of the `Failed` condition when the pool has no free block (Coil's text). */
export const REASON_OUT_OF_BLOCKS = 'out of blocks';
/** Reason of the `Failed` condition when a claim back is refused (ours: docs/ipam-recovery.md#claim-back). */
export const REASON_CLAIM_REFUSED = 'claim refused';

/**
 * The block index a BlockRequest claims back (annotation `coil.cybozu.com/claim-index`, a
 * decimal integer ≥ 0), or undefined for an ordinary request — an annotation that is no such
 * number included, so a malformed claim is served as Coil's controller serves it: any block.
 */
export function claimIndexOf(br: Readonly<BlockRequest>): bigint | undefined {
  const text = br.metadata?.annotations?.[ANN_CLAIM_INDEX];
  return text !== undefined && /^[0-9]{1,19}$/.test(text) ? BigInt(text) : undefined;
}

/** Outcome of a BlockRequest as coild sees it. */
export type BlockRequestResult =
  | { readonly kind: 'pending' }
  | { readonly kind: 'allocated'; readonly addressBlockName: string }
  | { readonly kind: 'failed'; readonly reason: string; readonly message: string };

/**
 * Reads the answer of a request, with Coil's rule (`GetResult`): any `Failed=True` is a failure
 * whose text is the condition's reason; else `Complete=True` with a block name is success;
 * anything else is still pending.
 */
export function blockRequestResult(status: BlockRequestStatus | undefined): BlockRequestResult {
  const failed = findCondition(status?.conditions, COND_FAILED);
  if (failed?.status === 'True') {
    return { kind: 'failed', reason: failed.reason ?? 'failed', message: failed.message ?? '' };
  }
  if (isConditionTrue(status?.conditions, COND_COMPLETE) && status?.addressBlockName) {
    return { kind: 'allocated', addressBlockName: status.addressBlockName };
  }
  return { kind: 'pending' };
}

/** True once the controller has answered (successfully or not). */
export function isAnswered(status: BlockRequestStatus | undefined): boolean {
  return (status?.conditions?.length ?? 0) > 0;
}

/** Schema and names of the BlockRequest CRD. */
export const BlockRequestKind: KindDefinition = {
  group: GROUP,
  version: VERSION,
  kind: 'BlockRequest',
  listKind: 'BlockRequestList',
  plural: 'blockrequests',
  singular: 'blockrequest',
  shortNames: ['br'],
  categories: ['coil'],
  namespaced: false,
  description: 'BlockRequest is the Schema for the blockrequests API: a node asking for one more AddressBlock of a pool.',
  subresources: { status: true },
  printerColumns: [
    { name: 'Node', type: 'string', jsonPath: '.spec.nodeName' },
    { name: 'Pool', type: 'string', jsonPath: '.spec.poolName' },
    { name: 'Block', type: 'string', jsonPath: '.status.addressBlockName' },
    { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp' },
  ],
  schema: obj('BlockRequest is the Schema for the blockrequests API.', {
    apiVersion: str('APIVersion defines the versioned schema of this representation of an object.'),
    kind: str('Kind is a string value representing the REST resource this object represents.'),
    metadata: { type: 'object' },
    spec: obj('BlockRequestSpec defines the desired state of BlockRequest.', {
      nodeName: str('NodeName is the name of the node that requests a block.', { minLength: 1 }),
      poolName: str('PoolName is the name of the AddressPool to carve the block from.', { minLength: 1 }),
    }, ['nodeName', 'poolName']),
    status: obj('BlockRequestStatus defines the observed state of BlockRequest.', {
      addressBlockName: str('AddressBlockName is the name of the allocated AddressBlock.'),
      conditions: { type: 'array', description: 'Conditions is a list of conditions: Complete and Failed.', items: conditionSchema },
    }),
  }, ['spec']),
};
