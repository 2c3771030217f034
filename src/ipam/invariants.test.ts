import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { CidrError, cidrsOverlap, parseCidr } from './cidr.js';
import { checkNoDuplicateAddress, checkNoOverlap } from './invariants.js';

describe('checkNoOverlap', () => {
  test('disjoint blocks give no violation', () => {
    assert.deepEqual(checkNoOverlap(['10.0.0.0/27', '10.0.0.32/27', 'fd00::/120', 'fd00::100/120']), []);
  });

  test('a nested block is reported with both labels', () => {
    const v = checkNoOverlap([
      { label: 'pool-0', cidr: '10.0.0.0/24' },
      { label: 'pool-1', cidr: '10.0.0.32/27' },
    ]);
    assert.equal(v.length, 1);
    assert.equal(v[0]!.message, 'pool-1 (10.0.0.32/27) overlaps pool-0 (10.0.0.0/24)');
  });

  test('an identical IPv6 block is reported', () => {
    assert.equal(checkNoOverlap(['fd00::/120', 'fd00:0::/120']).length, 1);
  });

  test('IPv4 and IPv6 never overlap', () => {
    assert.deepEqual(checkNoOverlap(['0.0.0.0/0', '::/0']), []);
  });

  test('unparsable text is reported, not thrown', () => {
    assert.deepEqual(checkNoOverlap(['bad']).map((v) => v.kind), ['unparsable']);
  });

  test('every item that overlaps another appears in some violation', () => {
    const cidr = fc
      .record({ third: fc.integer({ min: 0, max: 3 }), fourth: fc.integer({ min: 0, max: 255 }), prefix: fc.integer({ min: 22, max: 32 }) })
      .map(({ third, fourth, prefix }) => `10.0.${third}.${fourth}/${prefix}`);
    fc.assert(
      fc.property(fc.array(cidr, { maxLength: 12 }), (texts) => {
        const items = texts.map((cidr, i) => ({ label: `#${i}`, cidr }));
        const named = new Set(checkNoOverlap(items).flatMap((v) => (v.kind === 'overlap' ? [v.a.label, v.b.label] : [])));
        items.forEach((x, i) => {
          const overlapsAny = items.some((y, j) => i !== j && cidrsOverlap(parseCidr(x.cidr), parseCidr(y.cidr)));
          assert.equal(named.has(x.label), overlapsAny, x.label);
        });
      }),
    );
  });
});

describe('checkNoDuplicateAddress', () => {
  test('distinct addresses give no violation', () => {
    assert.deepEqual(checkNoDuplicateAddress([{ owner: 'a', address: '10.0.0.1' }, { owner: 'b', address: '10.0.0.2' }]), []);
  });

  test('two spellings of one IPv6 address are one address held twice', () => {
    const v = checkNoDuplicateAddress([
      { owner: 'a', address: 'fd00::1' },
      { owner: 'b', address: 'FD00:0:0::0001' },
    ]);
    assert.deepEqual(v.map((x) => [x.address, x.owners]), [['fd00::1', ['a', 'b']]]);
  });

  test('an unparsable address throws CidrError', () => {
    assert.throws(() => checkNoDuplicateAddress([{ owner: 'a', address: 'x' }]), CidrError);
  });
});
