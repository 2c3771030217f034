import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { cidrContains, parseCidr } from './cidr.js';
import { checkNoOverlap } from './invariants.js';
import { allocateBlock, PoolLayout, PoolState, type BlockCidrs, type PoolSpec, type SubnetSet } from './pool.js';

/**
 * Random valid pools: 1–4 disjoint subnets (item k lives in 10.k.0.0/16 and fd00:k::/112), all of one
 * family set, each 2^0…2^5 blocks of 2^0…2^4 addresses. Small enough to model exhaustively.
 */
const poolSpec: fc.Arbitrary<PoolSpec> = fc
  .record({
    blockSizeBits: fc.integer({ min: 0, max: 4 }),
    families: fc.constantFrom<('ipv4' | 'ipv6')[]>(['ipv4'], ['ipv6'], ['ipv4', 'ipv6']),
    extraBits: fc.array(fc.integer({ min: 0, max: 5 }), { minLength: 1, maxLength: 4 }),
  })
  .map(({ blockSizeBits, families, extraBits }) => ({
    blockSizeBits,
    subnets: extraBits.map((extra, k): SubnetSet => {
      const host = blockSizeBits + extra;
      return {
        ...(families.includes('ipv4') && { ipv4: `10.${k}.0.0/${32 - host}` }),
        ...(families.includes('ipv6') && { ipv6: `fd00:${k}::/${128 - host}` }),
      };
    }),
  }));

/** An operation on the pool: allocate, or free the n-th held block (modulo the number held). */
type Op = { kind: 'allocate' } | { kind: 'free'; pick: number };
const ops = fc.array(
  fc.oneof(fc.constant<Op>({ kind: 'allocate' }), fc.nat().map((pick): Op => ({ kind: 'free', pick }))),
  { maxLength: 120 },
);

function cidrsOf(blocks: Iterable<BlockCidrs>): string[] {
  return [...blocks].flatMap((b) => [b.ipv4, b.ipv6].filter((c): c is string => c !== undefined));
}

describe('pool properties', () => {
  test('allocate/free sequences never hand out overlapping blocks and always take the lowest free index', () => {
    fc.assert(
      fc.property(poolSpec, ops, (spec, sequence) => {
        const layout = PoolLayout.fromSpec(spec);
        const state = new PoolState(layout);
        const held = new Map<bigint, BlockCidrs>();
        for (const op of sequence) {
          if (op.kind === 'allocate') {
            let lowest = 0n;
            while (held.has(lowest)) lowest++;
            const block = state.allocate();
            if (lowest >= layout.totalBlocks) {
              assert.equal(block, undefined);
            } else {
              assert.equal(block?.index, lowest);
              held.set(block.index, block);
            }
          } else if (held.size > 0) {
            const index = [...held.keys()][op.pick % held.size]!;
            assert.equal(state.remove(index), true);
            held.delete(index);
          }
          assert.equal(state.allocatedCount, held.size);
        }
        assert.deepEqual(checkNoOverlap(cidrsOf(held.values())), []);
      }),
    );
  });

  test('every block of a pool lies in its subnets and no two blocks overlap', () => {
    fc.assert(
      fc.property(poolSpec, (spec) => {
        const layout = PoolLayout.fromSpec(spec);
        const blocks: BlockCidrs[] = [];
        for (let i = 0n; i < layout.totalBlocks; i++) blocks.push(layout.blockAt(i)!);
        assert.deepEqual(checkNoOverlap(cidrsOf(blocks)), []);
        for (const cidr of cidrsOf(blocks)) {
          assert.ok(spec.subnets.some((s) => [s.ipv4, s.ipv6].some((n) => n !== undefined && cidrContains(parseCidr(n), parseCidr(cidr)))));
        }
      }),
    );
  });

  test('indexOfBlock inverts blockAt', () => {
    fc.assert(
      fc.property(
        poolSpec.chain((spec) => {
          const total = PoolLayout.fromSpec(spec).totalBlocks;
          return fc.tuple(fc.constant(spec), fc.bigInt({ min: 0n, max: total - 1n }));
        }),
        ([spec, index]) => {
          const layout = PoolLayout.fromSpec(spec);
          assert.equal(layout.indexOfBlock(layout.blockAt(index)!), index);
        },
      ),
    );
  });

  test('indexOfBlock inverts blockAt on huge IPv6 pools, up to the last block, without overflow', () => {
    const huge = fc.record({
      prefix: fc.integer({ min: 16, max: 64 }),
      blockSizeBits: fc.integer({ min: 0, max: 16 }),
      fraction: fc.double({ min: 0, max: 1, noNaN: true }),
    });
    fc.assert(
      fc.property(huge, ({ prefix, blockSizeBits, fraction }) => {
        const layout = PoolLayout.fromSpec({ blockSizeBits, subnets: [{ ipv6: `fd00::/${prefix}` }] });
        assert.equal(layout.totalBlocks, 1n << BigInt(128 - prefix - blockSizeBits));
        const last = layout.totalBlocks - 1n;
        const index = BigInt(Math.floor(fraction * 1e6)) * (last / 1_000_000n);
        for (const i of [0n, index, last]) {
          const block = layout.blockAt(i)!;
          assert.ok(cidrContains(parseCidr(`fd00::/${prefix}`), parseCidr(block.ipv6!)));
          assert.equal(layout.indexOfBlock(block), i);
        }
        assert.equal(layout.blockAt(layout.totalBlocks), undefined);
      }),
    );
  });

  test('allocateBlock and PoolState agree on the block chosen', () => {
    fc.assert(
      fc.property(poolSpec, fc.uniqueArray(fc.integer({ min: 0, max: 40 })), (spec, taken) => {
        const layout = PoolLayout.fromSpec(spec);
        const state = new PoolState(layout);
        for (const t of taken) state.add(BigInt(t));
        assert.deepEqual(state.peekFree(), allocateBlock(layout, state.used));
      }),
    );
  });
});
