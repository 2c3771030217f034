import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { BlockAllocator, BlockAllocatorError, DEFAULT_COOLING_MS } from './block.js';
import { CidrError } from './cidr.js';
import { cpuMs } from '../../test/fakes/timing.js';

// Coil's allocator_test.go blocks: 4 addresses in each family.
const V4 = { ipv4: '10.2.3.0/30' };
const V6 = { ipv6: 'fd02::/126' };
const DUAL = { ...V4, ...V6 };

describe('BlockAllocator: construction', () => {
  test('a /30 has 4 usable offsets, network and last included', () => {
    const a = new BlockAllocator(V4);
    assert.equal(a.size, 4);
    assert.equal(a.freeCount(0), 4);
  });

  test('cooling defaults to 30 s', () => {
    assert.equal(new BlockAllocator(V4).coolingMs, DEFAULT_COOLING_MS);
    assert.equal(DEFAULT_COOLING_MS, 30_000);
  });

  const bad: [string, object, new (...args: never[]) => Error][] = [
    ['no CIDR', {}, BlockAllocatorError],
    ['an IPv6 CIDR in ipv4', { ipv4: 'fd00::/126' }, CidrError],
    ['dual stack of different sizes', { ipv4: '10.0.0.0/30', ipv6: 'fd00::/120' }, BlockAllocatorError],
    ['a negative coolingMs', { ...V4, coolingMs: -1 }, BlockAllocatorError],
    ['more than 2^32 addresses', { ipv6: 'fd00::/64' }, BlockAllocatorError],
    ['unparsable text', { ipv4: 'x' }, CidrError],
  ];
  for (const [name, options, error] of bad) {
    test(`refuses ${name}`, () => {
      assert.throws(() => new BlockAllocator(options), error);
    });
  }
});

// Coil's controller writes the blocks of a pool range `::ffff:10.9.0.0/120` with ipv6 `10.9.0.0/29`
// (Go prints a mapped address as IPv4); Coil's coild reads that as 8 addresses (net.ParseCIDR).
describe('BlockAllocator: an ipv6 written in IPv4 form (Coil\'s controller, IPv4-mapped pool)', () => {
  test('is the IPv4-mapped prefix: 8 addresses ::ffff:10.9.0.0 …', () => {
    const a = new BlockAllocator({ ipv6: '10.9.0.0/29', coolingMs: 0 });
    assert.equal(a.size, 8);
    assert.deepEqual(a.allocate('c1', 0), { key: 'c1', offset: 0, ipv6: '::ffff:10.9.0.0' });
    assert.equal(a.offsetOfAddress('::ffff:10.9.0.7'), 7);
  });

  test('sits beside the ipv4 of a dual-stack block of the same size', () => {
    const a = new BlockAllocator({ ipv4: '10.1.0.8/29', ipv6: '10.9.0.0/29', coolingMs: 0 });
    assert.deepEqual(a.allocate('c1', 0), { key: 'c1', offset: 0, ipv4: '10.1.0.8', ipv6: '::ffff:10.9.0.0' });
  });

  test('an ipv4 written in IPv4-mapped form is the IPv4 prefix (Go: To4 of a mapped address)', () => {
    assert.equal(new BlockAllocator({ ipv4: '::ffff:10.1.0.0/125' }).size, 8);
  });
});

describe('BlockAllocator: allocation', () => {
  // Expected addresses per family, after registering offsets 0 and 2 as Coil's test does.
  const families: [string, object, { ipv4?: string; ipv6?: string }][] = [
    ['v4', V4, { ipv4: '10.2.3.1' }],
    ['v6', V6, { ipv6: 'fd02::1' }],
    ['dual', DUAL, { ipv4: '10.2.3.1', ipv6: 'fd02::1' }],
  ];
  for (const [name, options, expected] of families) {
    test(`${name}: with offsets 0 and 2 registered, the next allocation wraps to offset 1 in every family`, () => {
      const a = new BlockAllocator(options);
      a.register('c0:eth0', 0);
      a.register('c2:eth0', 2);
      a.allocate('c3:eth0', 0); // takes 3, after the highest registered offset
      assert.deepEqual(a.allocate('c1:eth0', 0), { key: 'c1:eth0', offset: 1, ...expected });
    });
  }

  test('the first allocation takes offset 0, the network address', () => {
    assert.deepEqual(new BlockAllocator(V4).allocate('a:eth0', 0), { key: 'a:eth0', offset: 0, ipv4: '10.2.3.0' });
  });

  test('allocating an existing key returns the same addresses', () => {
    const a = new BlockAllocator(DUAL);
    const first = a.allocate('a:eth0', 0);
    assert.deepEqual(a.allocate('a:eth0', 5), first);
    assert.equal(a.usedCount, 1);
  });

  test('a full block gives undefined', () => {
    const a = new BlockAllocator(V4);
    for (const k of ['a', 'b', 'c', 'd']) assert.ok(a.allocate(k, 0));
    assert.equal(a.allocate('e', 0), undefined);
  });

  test('next-fit: a freed address is not the next one handed out (Coil #234)', () => {
    const a = new BlockAllocator({ ...V4, coolingMs: 0 });
    a.allocate('a', 0);
    a.allocate('b', 0);
    a.free('a', 0);
    assert.equal(a.allocate('c', 0)?.offset, 2);
  });

  test('next-fit wraps around to the start of the block', () => {
    const a = new BlockAllocator({ ...V4, coolingMs: 0 });
    for (const k of ['a', 'b', 'c', 'd']) a.allocate(k, 0);
    a.free('b', 0);
    assert.equal(a.allocate('e', 0)?.offset, 1);
  });

  test('a cooling address is not reused even when it is the only free one', () => {
    const a = new BlockAllocator({ ...V4, coolingMs: 1000 });
    for (const k of ['a', 'b', 'c', 'd']) a.allocate(k, 0);
    a.free('b', 100);
    assert.equal(a.allocate('e', 1099), undefined);
    assert.equal(a.freeCount(1099), 0);
    assert.equal(a.coolingCount(1099), 1);
  });

  test('a cooled address is reusable once coolingMs has passed since it was freed', () => {
    const a = new BlockAllocator({ ...V4, coolingMs: 1000 });
    for (const k of ['a', 'b', 'c', 'd']) a.allocate(k, 0);
    a.free('b', 100);
    assert.equal(a.allocate('e', 1100)?.offset, 1);
  });

  test('next-fit skips a cooling address after the cursor and takes a cooled one beyond it', () => {
    const a = new BlockAllocator({ ...V4, coolingMs: 1000 });
    for (const k of ['a', 'b', 'c', 'd']) a.allocate(k, 0);
    a.free('b', 0); // offset 1, cooled by t=1000
    a.free('a', 1500); // offset 0, cooling until t=2500
    assert.equal(a.allocate('e', 1600)?.offset, 1);
  });

  test('coolingMs 0 disables cooling', () => {
    const a = new BlockAllocator({ ...V4, coolingMs: 0 });
    for (const k of ['a', 'b', 'c', 'd']) a.allocate(k, 0);
    a.free('c', 0);
    assert.equal(a.allocate('e', 0)?.offset, 2);
  });
});

describe('BlockAllocator: free, register, reserve', () => {
  test('free of an unknown key is a no-op returning false', () => {
    const a = new BlockAllocator(V4);
    assert.equal(a.free('nope', 0), false);
    assert.equal(a.freeCount(0), 4);
  });

  test('free twice returns true then false', () => {
    const a = new BlockAllocator(V4);
    a.allocate('a', 0);
    assert.equal(a.free('a', 0), true);
    assert.equal(a.free('a', 0), false);
  });

  test('the block is empty again once every key is freed', () => {
    const a = new BlockAllocator(V4);
    a.allocate('a', 0);
    assert.equal(a.isEmpty, false);
    a.free('a', 0);
    assert.equal(a.isEmpty, true);
  });

  const registers: [string, (a: BlockAllocator) => unknown, string][] = [
    ['a free offset', (a) => a.register('x', 3), 'registered'],
    ['the same key and offset again', (a) => a.register('a', 0), 'already-registered'],
    ['an offset held by another key', (a) => a.register('x', 0), 'offset-taken'],
    ['a key holding another offset', (a) => a.register('a', 3), 'key-taken'],
    ['an offset past the block', (a) => a.register('x', 4), 'out-of-range'],
    ['a fractional offset', (a) => a.register('x', 1.5), 'out-of-range'],
  ];
  for (const [name, act, kind] of registers) {
    test(`register of ${name} gives ${kind}`, () => {
      const a = new BlockAllocator(V4);
      a.allocate('a', 0);
      assert.equal((act(a) as { kind: string }).kind, kind);
    });
  }

  test('register clears the cooling of its offset', () => {
    const a = new BlockAllocator(V4);
    a.allocate('a', 0);
    a.free('a', 0);
    a.register('b', 0);
    assert.equal(a.coolingCount(0), 0);
  });

  test('offsetOfAddress finds offsets in either family and ignores foreign addresses', () => {
    const a = new BlockAllocator(DUAL);
    assert.equal(a.offsetOfAddress('10.2.3.2'), 2);
    assert.equal(a.offsetOfAddress('fd02::3'), 3);
    assert.equal(a.offsetOfAddress('192.168.0.1'), undefined);
    assert.equal(a.offsetOfAddress('fe03::1'), undefined);
    assert.equal(a.offsetOfAddress('junk'), undefined);
  });

  test('a reserved block allocates nothing, is never empty, and has no free addresses', () => {
    const a = new BlockAllocator(V4);
    a.reserveAll();
    assert.equal(a.allocate('a', 0), undefined);
    assert.equal(a.isEmpty, false);
    assert.equal(a.freeCount(0), 0);
    assert.equal(a.isReserved, true);
  });

  test('allocations lists every key by ascending offset', () => {
    const a = new BlockAllocator(V4);
    a.register('z', 3);
    a.register('y', 1);
    assert.deepEqual(a.allocations().map((x) => [x.key, x.offset, x.ipv4]), [['y', 1, '10.2.3.1'], ['z', 3, '10.2.3.3']]);
  });

  test('a full /16 block reports exhaustion quickly', () => {
    const a = new BlockAllocator({ ipv4: '10.0.0.0/16', coolingMs: 0 });
    for (let i = 0; i < a.size; i++) a.allocate(`k${i}`, 0);
    let extra: ReturnType<typeof a.allocate> | 'unset' = 'unset';
    assert.ok(cpuMs(() => { extra = a.allocate('extra', 0); }) < 50);
    assert.equal(extra, undefined);
  });
});
