import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { FLOW_PIN_MAX_SLOT, assignPinSlots, pinMark, pinTable, slotOfTable } from './flow-pin-slots.js';

describe('flow pin slots', () => {
  test('a slot gives the mark 0x636f0000 | slot and the table 117000 + slot, and back', () => {
    assert.equal(pinMark(1), 0x636f0001);
    assert.equal(pinMark(0xffff), 0x636fffff);
    assert.equal(pinTable(3), 117003);
    assert.equal(slotOfTable(117003), 3);
    for (const t of [117000, 117000 + 0x10000, 118, 1002]) assert.equal(slotOfTable(t), undefined, String(t));
  });

  test('links keep the slots they hold; new links take the first free ones after the highest held', () => {
    const got = assignPinSlots(['fou4_a', 'fou4_b', 'fou4_c'], new Map([['fou4_a', 2], ['fou4_gone', 5]]));
    assert.deepEqual([...got], [['fou4_a', 2], ['fou4_b', 6], ['fou4_c', 7]]);
    assert.deepEqual([...assignPinSlots(['x', 'y'], new Map())], [['x', 1], ['y', 2]]);
  });

  test('slots wrap past the highest and skip those held', () => {
    const got = assignPinSlots(['a', 'b', 'c'], new Map([['a', FLOW_PIN_MAX_SLOT], ['b', 1]]));
    assert.deepEqual([...got], [['a', FLOW_PIN_MAX_SLOT], ['b', 1], ['c', 2]]);
  });

  test('every link gets a distinct slot in range, and a held one is kept (random holdings)', () => {
    const name = fc.stringMatching(/^fou4_[0-9a-f]{8}$/);
    fc.assert(fc.property(fc.uniqueArray(name, { maxLength: 20 }), fc.array(fc.tuple(name, fc.integer({ min: 1, max: FLOW_PIN_MAX_SLOT })), { maxLength: 20 }), (links, held) => {
      const existing = new Map(held);
      const got = assignPinSlots(links, existing);
      assert.deepEqual([...got.keys()], links);
      const slots = [...got.values()];
      assert.equal(new Set(slots).size, slots.length);
      for (const s of slots) assert.ok(s >= 1 && s <= FLOW_PIN_MAX_SLOT);
      const taken = new Set<number>();
      for (const l of links) {
        const s = existing.get(l);
        if (s !== undefined && !taken.has(s)) { assert.equal(got.get(l), s); taken.add(s); }
      }
    }), { numRuns: 300 });
  });

  test('more links than slots is an error', () => {
    assert.throws(() => assignPinSlots(Array.from({ length: FLOW_PIN_MAX_SLOT + 1 }, (_, i) => `l${i}`), new Map()), RangeError);
  });
});
