import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { allocateBlock, PoolLayout, PoolLayoutError, PoolState, type PoolSpec } from './pool.js';
import { cpuMs } from '../../test/fakes/timing.js';

// The pools of Coil's own pool_test.go: a dual-stack pool of 4 + 2 blocks, and an IPv4 pool of 2.
const DEFAULT_POOL: PoolSpec = {
  blockSizeBits: 1,
  subnets: [
    { ipv4: '10.2.0.0/29', ipv6: 'fd02::200/125' },
    { ipv4: '10.3.0.0/30', ipv6: 'fd02::300/126' },
  ],
};
const V4_POOL: PoolSpec = { blockSizeBits: 2, subnets: [{ ipv4: '10.4.0.0/29' }] };
const V6_POOL: PoolSpec = { blockSizeBits: 8, subnets: [{ ipv6: 'fd00::/48' }] };

describe('PoolLayout', () => {
  test('totalBlocks sums 2^(hostBits - blockSizeBits) over the subnets', () => {
    assert.equal(PoolLayout.fromSpec(DEFAULT_POOL).totalBlocks, 6n);
    assert.equal(PoolLayout.fromSpec(V4_POOL).totalBlocks, 2n);
  });

  test('totalBlocks of fd00::/48 with 8-bit blocks is 2^72', () => {
    assert.equal(PoolLayout.fromSpec(V6_POOL).totalBlocks, 1n << 72n);
  });

  test('totalBlocks of 10.0.0.0/8 with 0-bit blocks is 2^24', () => {
    assert.equal(PoolLayout.fromSpec({ blockSizeBits: 0, subnets: [{ ipv4: '10.0.0.0/8' }] }).totalBlocks, 1n << 24n);
  });

  const blocks: [string, PoolSpec, bigint, { ipv4?: string; ipv6?: string }][] = [
    ['dual-stack first block', DEFAULT_POOL, 0n, { ipv4: '10.2.0.0/31', ipv6: 'fd02::200/127' }],
    ['dual-stack last block of the first subnet', DEFAULT_POOL, 3n, { ipv4: '10.2.0.6/31', ipv6: 'fd02::206/127' }],
    ['dual-stack first block of the second subnet', DEFAULT_POOL, 4n, { ipv4: '10.3.0.0/31', ipv6: 'fd02::300/127' }],
    ['dual-stack last block', DEFAULT_POOL, 5n, { ipv4: '10.3.0.2/31', ipv6: 'fd02::302/127' }],
    ['IPv4 second block', V4_POOL, 1n, { ipv4: '10.4.0.4/30' }],
    ['IPv6 first block', V6_POOL, 0n, { ipv6: 'fd00::/120' }],
    ['IPv6 block 10000', V6_POOL, 10000n, { ipv6: 'fd00::27:1000/120' }],
    ['IPv6 last block', V6_POOL, (1n << 72n) - 1n, { ipv6: 'fd00::ffff:ffff:ffff:ffff:ff00/120' }],
    ['/32 blocks of a /8', { blockSizeBits: 0, subnets: [{ ipv4: '10.0.0.0/8' }] }, (1n << 24n) - 1n, { ipv4: '10.255.255.255/32' }],
  ];
  for (const [name, spec, index, expected] of blocks) {
    test(`blockAt: ${name} (index ${index})`, () => {
      assert.deepEqual(PoolLayout.fromSpec(spec).blockAt(index), { index, ...expected });
    });
  }

  test('blockAt is undefined past the last block and below 0', () => {
    const layout = PoolLayout.fromSpec(DEFAULT_POOL);
    assert.equal(layout.blockAt(6n), undefined);
    assert.equal(layout.blockAt(-1n), undefined);
  });

  test('host bits in a subnet are cleared, as Coil (Go ParseCIDR) did', () => {
    assert.deepEqual(PoolLayout.fromSpec({ blockSizeBits: 2, subnets: [{ ipv4: '10.4.0.5/29' }] }).blockAt(0n), { index: 0n, ipv4: '10.4.0.0/30' });
  });

  const badSpecs: [string, PoolSpec, RegExp][] = [
    ['an item without CIDRs', { blockSizeBits: 1, subnets: [{}] }, /invalid subnet/],
    ['unparsable text', { blockSizeBits: 1, subnets: [{ ipv4: 'x' }] }, /invalid CIDR address: x/],
    ['IPv6 text in the ipv4 field', { blockSizeBits: 1, subnets: [{ ipv4: 'fd00::/64' }] }, /invalid IPv4 subnet/],
    ['a subnet narrower than a block', { blockSizeBits: 5, subnets: [{ ipv4: '10.0.0.0/30' }] }, /too narrow/],
    ['dual stack of different widths', { blockSizeBits: 1, subnets: [{ ipv4: '10.0.0.0/24', ipv6: 'fd00::/112' }] }, /same size/],
    ['negative blockSizeBits', { blockSizeBits: -1, subnets: [{ ipv4: '10.0.0.0/24' }] }, /blockSizeBits/],
  ];
  for (const [name, spec, message] of badSpecs) {
    test(`fromSpec throws PoolLayoutError for ${name}`, () => {
      assert.throws(() => PoolLayout.fromSpec(spec), (e: unknown) => e instanceof PoolLayoutError && message.test(e.message));
    });
  }

  const inverse: [string, { ipv4?: string; ipv6?: string }, bigint | undefined][] = [
    ['a dual-stack block', { ipv4: '10.3.0.2/31', ipv6: 'fd02::302/127' }, 5n],
    ['v4 and v6 at different indices', { ipv4: '10.3.0.2/31', ipv6: 'fd02::300/127' }, undefined],
    ['a dual-stack block missing its ipv6', { ipv4: '10.3.0.2/31' }, undefined],
    ['a block of the wrong size', { ipv4: '10.2.0.0/30', ipv6: 'fd02::200/126' }, undefined],
    ['a block with host bits set', { ipv4: '10.2.0.1/31', ipv6: 'fd02::200/127' }, undefined],
    ['a block outside the pool', { ipv4: '10.9.0.0/31', ipv6: 'fd02::900/127' }, undefined],
    ['nothing', {}, undefined],
  ];
  for (const [name, cidrs, expected] of inverse) {
    test(`indexOfBlock: ${name} → ${expected}`, () => {
      assert.equal(PoolLayout.fromSpec(DEFAULT_POOL).indexOfBlock(cidrs), expected);
    });
  }
});

describe('allocateBlock', () => {
  test('an empty pool gives index 0', () => {
    assert.deepEqual(allocateBlock(PoolLayout.fromSpec(V4_POOL), new Set()), { index: 0n, ipv4: '10.4.0.0/30' });
  });

  test('the lowest free index is chosen, so a freed index is reused first (Coil)', () => {
    assert.equal(allocateBlock(PoolLayout.fromSpec(DEFAULT_POOL), new Set([0n, 1n, 2n, 3n, 5n]))?.index, 4n);
  });

  test('a full pool gives undefined', () => {
    assert.equal(allocateBlock(PoolLayout.fromSpec(V4_POOL), new Set([0n, 1n])), undefined);
  });

  test('an empty fd00::/48 pool of /120 blocks gives index 0', () => {
    assert.deepEqual(allocateBlock(PoolLayout.fromSpec(V6_POOL), new Set()), { index: 0n, ipv6: 'fd00::/120' });
  });

  test('fd00::/48 with 10,000 blocks used gives index 10,000 in well under a second', () => {
    const layout = PoolLayout.fromSpec(V6_POOL);
    const used = new Set(Array.from({ length: 10_000 }, (_, i) => BigInt(i)));
    let block: ReturnType<typeof allocateBlock>;
    assert.ok(cpuMs(() => { block = allocateBlock(layout, used); }) < 100, 'took too long');
    assert.equal(block?.index, 10_000n);
  });
});

describe('PoolState', () => {
  test('reports maxBlocks from the layout and counts what it holds', () => {
    const state = new PoolState(PoolLayout.fromSpec(DEFAULT_POOL));
    state.add(2n);
    state.add(4n);
    assert.equal(state.maxBlocks, 6n);
    assert.equal(state.allocatedCount, 2);
  });

  test('add of a known index returns false and does not double count', () => {
    const state = new PoolState(PoolLayout.fromSpec(DEFAULT_POOL));
    assert.equal(state.add(1n), true);
    assert.equal(state.add(1n), false);
    assert.equal(state.allocatedCount, 1);
  });

  test('remove of an unknown index returns false', () => {
    assert.equal(new PoolState(PoolLayout.fromSpec(DEFAULT_POOL)).remove(3n), false);
  });

  test('allocate takes the lowest free index, and a removed index is taken next', () => {
    const state = new PoolState(PoolLayout.fromSpec(DEFAULT_POOL));
    assert.deepEqual([0, 1, 2].map(() => state.allocate()?.index), [0n, 1n, 2n]);
    state.remove(1n);
    assert.equal(state.allocate()?.index, 1n);
    assert.equal(state.allocate()?.index, 3n);
  });

  test('allocate gives undefined when every block is held', () => {
    const state = new PoolState(PoolLayout.fromSpec(V4_POOL));
    state.allocate();
    state.allocate();
    assert.equal(state.allocate(), undefined);
    assert.equal(state.allocatedCount, 2);
  });

  test('peekFree does not take the block', () => {
    const state = new PoolState(PoolLayout.fromSpec(V4_POOL));
    assert.equal(state.peekFree()?.index, 0n);
    assert.equal(state.allocatedCount, 0);
  });

  test('setLayout with an appended subnet makes its blocks allocatable', () => {
    const state = new PoolState(PoolLayout.fromSpec(V4_POOL));
    state.allocate();
    state.allocate();
    state.setLayout(PoolLayout.fromSpec({ ...V4_POOL, subnets: [...V4_POOL.subnets, { ipv4: '10.5.0.0/30' }] }));
    assert.deepEqual(state.allocate(), { index: 2n, ipv4: '10.5.0.0/30' });
  });

  test('add rejects a negative index', () => {
    assert.throws(() => new PoolState(PoolLayout.fromSpec(V4_POOL)).add(-1n), RangeError);
  });

  test('100,000 allocations from fd00::/48 run in well under a second and memory proportional to them', () => {
    const state = new PoolState(PoolLayout.fromSpec(V6_POOL));
    const heapBefore = process.memoryUsage().heapUsed;
    assert.ok(cpuMs(() => { for (let i = 0; i < 100_000; i++) state.allocate(); }) < 1000, 'took too long');
    assert.equal(state.peekFree()?.index, 100_000n);
    // A Set entry costs tens of bytes; a bitset over 2^72 blocks could not exist at all.
    assert.ok(process.memoryUsage().heapUsed - heapBefore < 64 * 1024 * 1024, 'memory grew beyond the allocations');
  });
});

// docs/ipam-recovery.md#what-the-controller-never-hands-out: a free block that holds a live Pod's
// address is passed over and offered again once let go; a claim takes one index.
describe('PoolState: skipping and taking', () => {
  const layout = PoolLayout.fromSpec({ blockSizeBits: 5, subnets: [{ ipv4: '10.0.0.0/25' }] }); // 4 blocks
  test('allocate(skip) passes over refused blocks without giving them up', () => {
    const s = new PoolState(layout);
    const refused = new Set([0n, 1n]);
    assert.equal(s.allocate((b) => refused.has(b.index))?.index, 2n);
    assert.equal(s.allocate((b) => refused.has(b.index))?.index, 3n);
    assert.equal(s.allocate((b) => refused.has(b.index)), undefined, 'the rest are refused: out of blocks');
    assert.equal(s.allocate()?.index, 0n, 'offered again once let go');
  });
  test('take(index) takes a free index once', () => {
    const s = new PoolState(layout);
    assert.deepEqual(s.take(2n), { index: 2n, ipv4: '10.0.0.64/27' });
    assert.equal(s.take(2n), 'taken');
    assert.equal(s.take(4n), 'out-of-range');
    assert.equal(s.allocate()?.index, 0n);
    assert.equal(s.allocate()?.index, 1n);
    assert.equal(s.allocate()?.index, 3n);
  });
});

test('PoolLayout.indexOfAddress: the block index holding an address, across subnets', () => {
  const l = PoolLayout.fromSpec({ blockSizeBits: 5, subnets: [{ ipv4: '10.0.0.0/26', ipv6: 'fd00::/122' }, { ipv4: '10.9.0.0/27' }] });
  assert.equal(l.indexOfAddress('10.0.0.33'), 1n);
  assert.equal(l.indexOfAddress('fd00::21'), 1n);
  assert.equal(l.indexOfAddress('10.9.0.31'), 2n);
  assert.equal(l.indexOfAddress('10.9.0.32'), undefined);
  assert.equal(l.indexOfAddress('x'), undefined);
});
