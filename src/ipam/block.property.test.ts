import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { BlockAllocator } from './block.js';
import { checkNoDuplicateAddress } from './invariants.js';

interface Shape {
  readonly hostBits: number;
  readonly dual: boolean;
  readonly coolingMs: number;
}
/** allocate(key) or free(key), each step advancing the clock by `dtMs`. */
type Op = { kind: 'allocate' | 'free'; key: number; dtMs: number };

/**
 * A block of 1–16 addresses and a sequence over twice as many keys as addresses, allocating twice
 * as often as freeing, half of them starting from a full block, so next-fit wraps (where cooling
 * matters) often.
 */
const scenario: fc.Arbitrary<[Shape, Op[]]> = fc
  .record({ hostBits: fc.integer({ min: 0, max: 4 }), dual: fc.boolean(), coolingMs: fc.integer({ min: 0, max: 1000 }) })
  .chain((shape) => {
    const op = fc.record({
      kind: fc.constantFrom<Op['kind']>('allocate', 'allocate', 'free'),
      key: fc.integer({ min: 0, max: 2 << shape.hostBits }),
      dtMs: fc.integer({ min: 0, max: 400 }),
    });
    const fill = Array.from({ length: 1 << shape.hostBits }, (_, key): Op => ({ kind: 'allocate', key, dtMs: 0 }));
    return fc.tuple(
      fc.constant(shape),
      fc.oneof(
        fc.array(op, { maxLength: 200 }),
        fc.array(op, { maxLength: 200 }).map((rest) => [...fill, ...rest]),
      ),
    );
  });

function make(s: Shape): BlockAllocator {
  return new BlockAllocator({ ipv4: `10.0.0.0/${32 - s.hostBits}`, ...(s.dual && { ipv6: `fd00::/${128 - s.hostBits}` }), coolingMs: s.coolingMs });
}

describe('block allocator properties', () => {
  test('no address is ever held by two keys, and v4/v6 offsets match', () => {
    fc.assert(
      fc.property(scenario, ([s, sequence]) => {
        const a = make(s);
        const keys = new Set<string>();
        let now = 0;
        for (const op of sequence) {
          now += op.dtMs;
          const key = `c${op.key}:eth0`;
          keys.add(key);
          if (op.kind === 'allocate') a.allocate(key, now);
          else a.free(key, now);
          // Ask per key, not via allocations(): a double allocation would hide in the offset index.
          const held = [...keys].flatMap((k) => a.get(k) ?? []);
          const holders = held.flatMap((x) => [x.ipv4, x.ipv6].filter((v) => v !== undefined).map((address) => ({ owner: x.key, address })));
          assert.deepEqual(checkNoDuplicateAddress(holders), []);
          for (const x of held) if (s.dual) assert.equal(a.offsetOfAddress(x.ipv6!), x.offset);
          assert.equal(a.usedCount, held.length);
          assert.equal(a.allocations().length, held.length);
        }
      }),
    );
  });

  test('next-fit never hands out a cooling address', () => {
    fc.assert(
      fc.property(scenario, ([s, sequence]) => {
        const a = make(s);
        const freedAt = new Map<number, number>();
        let now = 0;
        for (const op of sequence) {
          now += op.dtMs;
          const key = `c${op.key}:eth0`;
          if (op.kind === 'free') {
            const held = a.get(key);
            if (a.free(key, now)) freedAt.set(held!.offset, now);
            continue;
          }
          const before = a.get(key);
          const got = a.allocate(key, now);
          if (got === undefined || before !== undefined) continue;
          const freed = freedAt.get(got.offset);
          assert.ok(freed === undefined || now - freed >= s.coolingMs, `offset ${got.offset} reused ${now - freed!} ms after free`);
        }
      }),
      // The interesting case (a recently freed offset scanned before an older, cooled one, after a
      // wrap) comes up in under half of 100 runs; 2000 make it near certain and take ~0.2 s.
      { numRuns: 2000 },
    );
  });

  test('allocation fails only when every address is held or cooling', () => {
    fc.assert(
      fc.property(scenario, ([s, sequence]) => {
        const a = make(s);
        let now = 0;
        for (const op of sequence) {
          now += op.dtMs;
          const key = `c${op.key}:eth0`;
          if (op.kind === 'free') a.free(key, now);
          else if (a.allocate(key, now) === undefined) assert.equal(a.freeCount(now), 0);
        }
      }),
    );
  });

  test('a fresh key gets the first usable offset after the previous allocation (next-fit)', () => {
    fc.assert(
      fc.property(scenario, ([s, sequence]) => {
        const a = make({ ...s, coolingMs: 0 });
        let last = -1;
        for (const [i, op] of sequence.entries()) {
          const key = `c${op.key}:eth0`;
          if (op.kind === 'free') {
            a.free(key, 0);
            continue;
          }
          if (a.get(key) !== undefined) continue;
          const taken = new Set(a.allocations().map((x) => x.offset));
          const got = a.allocate(key, 0);
          if (got === undefined) continue;
          let expected = (last + 1) % a.size;
          while (taken.has(expected)) expected = (expected + 1) % a.size;
          assert.equal(got.offset, expected, `step ${i}`);
          last = got.offset;
        }
      }),
    );
  });
});
