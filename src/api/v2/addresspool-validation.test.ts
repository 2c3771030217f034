import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  findPoolOverlaps,
  validateAddressPoolSpec,
  validateAddressPoolUpdate,
  type AddressPoolSpecInput,
  type SubnetSetInput,
} from './addresspool-validation.js';
import { formatFieldError } from './field-error.js';

const messages = (errors: readonly Parameters<typeof formatFieldError>[0][]): string[] => errors.map(formatFieldError);
const spec = (blockSizeBits: number, ...subnets: SubnetSetInput[]): AddressPoolSpecInput => ({ blockSizeBits, subnets });

describe('validateAddressPoolSpec: Coil rules (docs/compatibility.md#addresspool-webhooks, addresspool_types_test.go)', () => {
  const valid: [string, AddressPoolSpecInput][] = [
    ['valid-ipv4', spec(2, { ipv4: '10.0.0.0/24' })],
    ['valid-ipv6', spec(2, { ipv6: 'fd02::/112' })],
    ['valid-dual', spec(2, { ipv4: '10.0.0.0/24', ipv6: 'fd02::/120' })],
    ['size-bits-0 with a /32', spec(0, { ipv4: '10.0.0.1/32' })],
    ['blockSizeBits omitted (default 5)', { subnets: [{ ipv4: '10.0.0.0/27' }] }],
  ];
  for (const [name, s] of valid) {
    test(`accepts ${name}`, () => {
      assert.deepEqual(messages(validateAddressPoolSpec(s)), []);
    });
  }

  const invalid: [string, AddressPoolSpecInput, string][] = [
    ['empty', spec(2, {}), 'spec.subnets[0]: Invalid value: "": invalid subnet'],
    ['invalid-ipv4', spec(2, { ipv4: 'a.b.c.d/16' }), 'spec.subnets[0]: Invalid value: "": invalid CIDR address: a.b.c.d/16'],
    ['invalid-ipv6', spec(2, { ipv6: 'q293::/112' }), 'spec.subnets[0]: Invalid value: "": invalid CIDR address: q293::/112'],
    ['invalid-dual-1', spec(2, { ipv4: '10.0.0.0/24', ipv6: 'q293::/120' }), 'spec.subnets[0]: Invalid value: "": invalid CIDR address: q293::/120'],
    ['invalid-dual-2', spec(2, { ipv4: 'a.b.c.d/16', ipv6: 'fd02::/120' }), 'spec.subnets[0]: Invalid value: "": invalid CIDR address: a.b.c.d/16'],
    ['dual-different-size', spec(2, { ipv4: '10.0.0.0/24', ipv6: 'fd02::/112' }), 'spec.subnets[0]: Invalid value: "": dual stack subnet must be the same size'],
    ['too-small-ipv4', spec(5, { ipv4: '10.0.0.0/30' }), 'spec.subnets[0]: Invalid value: "": too narrow subnet: 10.0.0.0/30'],
    ['too-small-ipv6', spec(5, { ipv6: 'fd02::/124' }), 'spec.subnets[0]: Invalid value: "": too narrow subnet: fd02::/124'],
    ['an IPv6 CIDR in the ipv4 field', spec(2, { ipv4: 'fd00::/120' }), 'spec.subnets[0]: Invalid value: "": invalid IPv4 subnet: fd00::/120'],
    ['an IPv4 CIDR in the ipv6 field', spec(2, { ipv6: '10.0.0.0/24' }), 'spec.subnets[0]: Invalid value: "": invalid IPv6 subnet: 10.0.0.0/24'],
    ['an IPv4-mapped CIDR in the ipv4 field', spec(2, { ipv4: '::ffff:10.0.0.0/120' }), 'spec.subnets[0]: Invalid value: "": invalid IPv4 subnet: ::ffff:10.0.0.0/120'],
  ];
  for (const [name, s, expected] of invalid) {
    test(`rejects ${name}: ${expected}`, () => {
      assert.deepEqual(messages(validateAddressPoolSpec(s)), [expected]);
    });
  }

  test('reports each bad item at its own index', () => {
    assert.deepEqual(messages(validateAddressPoolSpec(spec(2, { ipv4: '10.0.0.0/24' }, {}, { ipv4: 'x' }))), [
      'spec.subnets[1]: Invalid value: "": invalid subnet',
      'spec.subnets[2]: Invalid value: "": invalid CIDR address: x',
    ]);
  });

  test('rejects an empty subnet list as Required', () => {
    assert.deepEqual(messages(validateAddressPoolSpec(spec(5))), ['spec.subnets: Required: must have at least 1 item']);
  });
});

describe('validateAddressPoolSpec: our rules', () => {
  test('rejects blockSizeBits above 16', () => {
    assert.deepEqual(messages(validateAddressPoolSpec(spec(17, { ipv4: '10.0.0.0/8' }))), [
      'spec.blockSizeBits: Invalid value: 17: must be an integer between 0 and 16, inclusive',
    ]);
  });

  test('accepts blockSizeBits 16', () => {
    assert.deepEqual(validateAddressPoolSpec(spec(16, { ipv4: '10.0.0.0/8' })), []);
  });

  test('rejects a negative blockSizeBits', () => {
    assert.deepEqual(messages(validateAddressPoolSpec(spec(-1, { ipv4: '10.0.0.0/8' }))), [
      'spec.blockSizeBits: Invalid value: -1: must be an integer between 0 and 16, inclusive',
    ]);
  });

  test('rejects host bits in an IPv4 CIDR and suggests the network', () => {
    assert.deepEqual(messages(validateAddressPoolSpec(spec(5, { ipv4: '10.0.0.1/24' }))), [
      'spec.subnets[0].ipv4: Invalid value: "10.0.0.1/24": host bits are set; did you mean 10.0.0.0/24',
    ]);
  });

  test('rejects host bits in an IPv6 CIDR and suggests the network in canonical form', () => {
    assert.deepEqual(messages(validateAddressPoolSpec(spec(5, { ipv6: 'fd00:0::1/112' }))), [
      'spec.subnets[0].ipv6: Invalid value: "fd00:0::1/112": host bits are set; did you mean fd00::/112',
    ]);
  });

  test('rejects an item whose families differ from the first item', () => {
    assert.deepEqual(messages(validateAddressPoolSpec(spec(5, { ipv4: '10.0.0.0/24' }, { ipv6: 'fd00::/120' }))), [
      'spec.subnets[1]: Invalid value: {"ipv6":"fd00::/120"}: must have the same address families as spec.subnets[0] (ipv4), not ipv6',
    ]);
  });

  test('rejects a single-stack item in a dual-stack pool', () => {
    assert.deepEqual(messages(validateAddressPoolSpec(spec(5, { ipv4: '10.0.0.0/24', ipv6: 'fd00::/120' }, { ipv4: '10.1.0.0/24' }))), [
      'spec.subnets[1]: Invalid value: {"ipv4":"10.1.0.0/24"}: must have the same address families as spec.subnets[0] (ipv4 and ipv6), not ipv4',
    ]);
  });

  test('rejects a subnet overlapping an earlier one, naming both indexes', () => {
    assert.deepEqual(messages(validateAddressPoolSpec(spec(5, { ipv4: '10.0.0.0/16' }, { ipv4: '10.0.1.0/24' }))), [
      'spec.subnets[1].ipv4: Invalid value: "10.0.1.0/24": overlaps spec.subnets[0].ipv4 (10.0.0.0/16)',
    ]);
  });

  test('reports an overlap on the later item even when it is the wider one', () => {
    assert.deepEqual(messages(validateAddressPoolSpec(spec(5, { ipv4: '10.0.1.0/24' }, { ipv4: '10.0.0.0/16' }))), [
      'spec.subnets[1].ipv4: Invalid value: "10.0.0.0/16": overlaps spec.subnets[0].ipv4 (10.0.1.0/24)',
    ]);
  });

  test('rejects an overlap in the IPv6 half of dual-stack items', () => {
    assert.deepEqual(
      messages(validateAddressPoolSpec(spec(5, { ipv4: '10.0.0.0/24', ipv6: 'fd00::/120' }, { ipv4: '10.1.0.0/24', ipv6: 'fd00::/120' }))),
      ['spec.subnets[1].ipv6: Invalid value: "fd00::/120": overlaps spec.subnets[0].ipv6 (fd00::/120)'],
    );
  });

  test('does not report overlaps of an item that already failed a Coil rule', () => {
    assert.deepEqual(messages(validateAddressPoolSpec(spec(5, { ipv4: '10.0.0.0/16' }, { ipv4: '10.0.0.0/30' }))), [
      'spec.subnets[1]: Invalid value: "": too narrow subnet: 10.0.0.0/30',
    ]);
  });

  test('treats null fields as absent', () => {
    assert.deepEqual(validateAddressPoolSpec({ blockSizeBits: 5, subnets: [{ ipv4: '10.0.0.0/24', ipv6: null }] }), []);
  });
});

describe('validateAddressPoolUpdate', () => {
  const old = spec(5, { ipv4: '10.0.0.0/24' });

  test('accepts an unchanged spec', () => {
    assert.deepEqual(validateAddressPoolUpdate(old, old), []);
  });

  test('accepts an appended valid subnet', () => {
    assert.deepEqual(validateAddressPoolUpdate(old, spec(5, { ipv4: '10.0.0.0/24' }, { ipv4: '10.1.0.0/24' })), []);
  });

  test('forbids changing blockSizeBits', () => {
    assert.deepEqual(messages(validateAddressPoolUpdate(old, spec(4, { ipv4: '10.0.0.0/24' }))), ['spec.blockSizeBits: Forbidden: unchangeable']);
  });

  test('treats an omitted blockSizeBits as the default 5', () => {
    assert.deepEqual(validateAddressPoolUpdate({ subnets: old.subnets }, old), []);
  });

  test('forbids removing subnets', () => {
    assert.deepEqual(messages(validateAddressPoolUpdate(spec(5, { ipv4: '10.0.0.0/24' }, { ipv4: '10.1.0.0/24' }), old)), [
      'spec.subnets: Forbidden: unshrinkable',
    ]);
  });

  test('forbids changing an existing subnet', () => {
    assert.deepEqual(messages(validateAddressPoolUpdate(old, spec(5, { ipv4: '10.0.0.0/23' }))), ['spec.subnets[0]: Forbidden: unchangeable']);
  });

  test('forbids adding a family to an existing subnet', () => {
    assert.deepEqual(messages(validateAddressPoolUpdate(old, spec(5, { ipv4: '10.0.0.0/24', ipv6: 'fd00::/120' }))), [
      'spec.subnets[0]: Forbidden: unchangeable',
    ]);
  });

  test('validates appended subnets as on create, at their own index', () => {
    assert.deepEqual(messages(validateAddressPoolUpdate(old, spec(5, { ipv4: '10.0.0.0/24' }, { ipv4: '10.1.0.0/30' }))), [
      'spec.subnets[1]: Invalid value: "": too narrow subnet: 10.1.0.0/30',
    ]);
  });

  test('rejects an appended subnet overlapping an existing one', () => {
    assert.deepEqual(messages(validateAddressPoolUpdate(old, spec(5, { ipv4: '10.0.0.0/24' }, { ipv4: '10.0.0.128/25' }))), [
      'spec.subnets[1].ipv4: Invalid value: "10.0.0.128/25": overlaps spec.subnets[0].ipv4 (10.0.0.0/24)',
    ]);
  });

  test('rejects an appended subnet of another family', () => {
    assert.deepEqual(messages(validateAddressPoolUpdate(old, spec(5, { ipv4: '10.0.0.0/24' }, { ipv6: 'fd00::/120' }))), [
      'spec.subnets[1]: Invalid value: {"ipv6":"fd00::/120"}: must have the same address families as spec.subnets[0] (ipv4), not ipv6',
    ]);
  });

  test('does not re-check existing subnets that Coil accepted (host bits, overlap, large blockSizeBits)', () => {
    const legacy = spec(20, { ipv4: '10.0.0.1/8' }, { ipv4: '10.0.0.0/9' });
    assert.deepEqual(validateAddressPoolUpdate(legacy, spec(20, ...legacy.subnets!, { ipv4: '11.0.0.0/8' })), []);
  });
});

describe('findPoolOverlaps', () => {
  const others = [
    { name: 'other', spec: spec(5, { ipv4: '10.0.0.0/16', ipv6: 'fd00::/112' }) },
    { name: 'third', spec: spec(5, { ipv4: '10.9.0.0/16' }) },
  ];

  test('names the other pool and its subnet', () => {
    assert.deepEqual(messages(findPoolOverlaps('mine', spec(5, { ipv4: '10.0.3.0/24' }), others)), [
      'spec.subnets[0].ipv4: Invalid value: "10.0.3.0/24": overlaps 10.0.0.0/16 of AddressPool "other" (spec.subnets[0].ipv4)',
    ]);
  });

  test('reports each family separately', () => {
    assert.deepEqual(messages(findPoolOverlaps('mine', spec(5, { ipv4: '10.5.0.0/24', ipv6: 'fd00::100/120' }), others)), [
      'spec.subnets[0].ipv6: Invalid value: "fd00::100/120": overlaps fd00::/112 of AddressPool "other" (spec.subnets[0].ipv6)',
    ]);
  });

  test('reports overlaps with several pools', () => {
    assert.equal(findPoolOverlaps('mine', spec(5, { ipv4: '10.0.0.0/8' }), others).length, 2);
  });

  test('ignores a pool of the same name (the old version of an updated pool)', () => {
    assert.deepEqual(findPoolOverlaps('other', spec(5, { ipv4: '10.0.0.0/16' }), others), []);
  });

  test('accepts disjoint pools', () => {
    assert.deepEqual(findPoolOverlaps('mine', spec(5, { ipv4: '10.1.0.0/16', ipv6: 'fd01::/112' }), others), []);
  });

  test('skips items before fromIndex, so an update does not trip on old overlaps', () => {
    assert.deepEqual(findPoolOverlaps('mine', spec(5, { ipv4: '10.0.0.0/24' }, { ipv4: '10.1.0.0/24' }), others, 1), []);
  });
});
