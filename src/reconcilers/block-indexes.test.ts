import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { AddressBlock } from '../api/v2/addressblock.js';
import { blockNodeIndex, blockPoolIndex, cachedAddressBlock } from './block-indexes.js';

const block = {
  apiVersion: 'coil.cybozu.com/v2',
  kind: 'AddressBlock',
  metadata: {
    name: 'p-3',
    uid: 'u-3',
    resourceVersion: '42',
    generation: 1,
    creationTimestamp: '2026-11-22T00:00:00Z',
    labels: { 'coil.cybozu.com/pool': 'p', 'coil.cybozu.com/node': 'n1', 'coil.cybozu.com/request': 'r-1' },
    finalizers: ['coil.cybozu.com'],
    ownerReferences: [{ apiVersion: 'coil.cybozu.com/v2', kind: 'AddressPool', name: 'p', uid: 'pu', controller: true }],
    managedFields: [{ manager: 'coil-controller', operation: 'Update' }],
  },
  index: 3,
  ipv4: '10.0.0.96/27',
} as unknown as AddressBlock;

test('the cached shape keeps what the reconcilers read and drops the rest', () => {
  assert.deepEqual(cachedAddressBlock()(structuredClone(block)), {
    apiVersion: 'coil.cybozu.com/v2',
    kind: 'AddressBlock',
    metadata: { name: 'p-3', uid: 'u-3', resourceVersion: '42', labels: block.metadata!.labels, finalizers: ['coil.cybozu.com'] },
    index: 3,
    ipv4: '10.0.0.96/27',
  });
});

test('a deleting block keeps its deletionTimestamp', () => {
  const deleting = structuredClone(block) as unknown as { metadata: Record<string, unknown> };
  deleting.metadata['deletionTimestamp'] = '2026-11-22T01:00:00Z';
  const cached = cachedAddressBlock()(deleting as never) as unknown as { metadata: Record<string, unknown> };
  assert.equal(cached.metadata['deletionTimestamp'], '2026-11-22T01:00:00Z');
});

test('blocks are indexed by their pool and node labels; unlabelled blocks by nothing', () => {
  assert.deepEqual([blockPoolIndex(block), blockNodeIndex(block)], [['p'], ['n1']]);
  assert.deepEqual([blockPoolIndex({ index: 0 }), blockNodeIndex({ index: 0 })], [[], []]);
});

test('blocks with the same finalizers share one frozen list; another list is kept apart', () => {
  const transform = cachedAddressBlock();
  const other = structuredClone(block);
  other.metadata!.name = 'p-4';
  const [a, b] = [transform(structuredClone(block)), transform(other)] as AddressBlock[];
  assert.equal(a!.metadata!.finalizers, b!.metadata!.finalizers);
  assert.ok(Object.isFrozen(a!.metadata!.finalizers));
  const two = structuredClone(block);
  two.metadata!.finalizers = ['coil.cybozu.com', 'example.com/other'];
  assert.deepEqual((transform(two) as AddressBlock).metadata!.finalizers, ['coil.cybozu.com', 'example.com/other']);
  assert.deepEqual(a!.metadata!.finalizers, ['coil.cybozu.com']);
});
