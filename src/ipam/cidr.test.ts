import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import {
  addressAt,
  cidrContains,
  cidrContainsAddress,
  CidrError,
  parseBlockField,
  cidrSize,
  cidrsOverlap,
  formatCidr,
  hasHostBitsSet,
  hostBits,
  lastAddress,
  offsetOf,
  parseAddress,
  parseCidr,
  parseCidrWithAddress,
  subnetAt,
  subnetCount,
  subnetIndexOf,
  tryParseCidr,
  type Cidr,
} from './cidr.js';

const c = parseCidr;

describe("parseCidr agrees with Go's net.ParseCIDR", () => {
  // Each row is what Go 1.26.8's net.ParseCIDR returned for the text (network, or an error):
  // leading zeros in the prefix length are accepted, anything but decimal digits is not.
  const GO: ReadonlyArray<readonly [string, string | undefined]> = [
    ['10.0.0.0/0024', '10.0.0.0/24'],
    ['10.0.0.0/000000000024', '10.0.0.0/24'],
    ['10.0.0.0/0000000000000000000024', '10.0.0.0/24'],
    ['10.0.0.0/00', '0.0.0.0/0'],
    ['fd00::/0064', 'fd00::/64'],
    ['fd00::/00000128', 'fd00::/128'],
    ['fd00::/0129', undefined],
    ['10.0.0.0/33', undefined],
    ['10.0.0.0/+24', undefined],
    ['10.0.0.0/', undefined],
    ['10.0.0.0/ 24', undefined],
    ['10.0.0.0/0x18', undefined],
    ['10.0.0.0/16777216', undefined],
    ['fe80::1%eth0/64', undefined],
    ['010.0.0.0/8', undefined],
  ];
  for (const [text, network] of GO) {
    test(`${text} → ${network ?? 'error'}`, () => {
      if (network === undefined) assert.throws(() => c(text), (e: unknown) => e instanceof CidrError && e.message === `invalid CIDR address: ${text}`);
      else assert.equal(formatCidr(c(text)), network);
    });
  }
});

describe('parseCidr', () => {
  test('reads an IPv4 CIDR', () => {
    assert.deepEqual(c('10.2.0.0/16'), { family: 4, base: 0x0a020000n, prefix: 16 });
  });

  test('reads an IPv6 CIDR', () => {
    assert.deepEqual(c('fd00::/48'), { family: 6, base: 0xfd00n << 112n, prefix: 48 });
  });

  test('clears host bits as Go ParseCIDR does', () => {
    assert.equal(formatCidr(c('10.0.0.1/24')), '10.0.0.0/24');
  });

  test('parseCidrWithAddress keeps the written address and flags host bits', () => {
    const p = parseCidrWithAddress('10.0.0.1/24');
    assert.equal(p.address, 0x0a000001n);
    assert.equal(p.hasHostBits, true);
    assert.equal(parseCidrWithAddress('10.0.0.0/24').hasHostBits, false);
  });

  test('an IPv4-mapped IPv6 CIDR is IPv6 with a 128-bit mask, as in Go', () => {
    assert.deepEqual(c('::ffff:10.0.0.0/104'), { family: 6, base: 0xffff0a000000n, prefix: 104 });
  });

  for (const text of ['10.0.0.0', '10.0.0.0/33', 'fd00::/129', '10.0.0.0/', '10.0.0.0/-1', '10.0.0.0/+8', '10.0.0.0/8/8', 'a.b.c.d/16', 'q293::/112', '/8', 'fe80::%eth0/64', '10.0.0.0/ 8']) {
    test(`rejects ${JSON.stringify(text)} with Go's message`, () => {
      assert.throws(() => c(text), (e: unknown) => e instanceof CidrError && e.message === `invalid CIDR address: ${text}` && e.input === text);
    });
  }

  test('tryParseCidr returns undefined on bad text', () => {
    assert.equal(tryParseCidr('bad'), undefined);
  });

  test('formatCidr writes IPv6 in RFC 5952 form', () => {
    assert.equal(formatCidr(c('FD02:0:0:0:0:0:0:200/127')), 'fd02::200/127');
  });
});

describe('sizes and membership', () => {
  test('hostBits and cidrSize of a /24 are 8 and 256', () => {
    assert.equal(hostBits(c('10.0.0.0/24')), 8);
    assert.equal(cidrSize(c('10.0.0.0/24')), 256n);
  });

  test('cidrSize of ::/0 is 2^128', () => {
    assert.equal(cidrSize(c('::/0')), 1n << 128n);
  });

  test('lastAddress is the broadcast address for IPv4', () => {
    assert.equal(lastAddress(c('10.0.0.0/24')), parseAddress('10.0.0.255').value);
  });

  test('cidrContainsAddress includes both ends and excludes the other family', () => {
    const net = c('10.0.0.0/24');
    assert.equal(cidrContainsAddress(net, parseAddress('10.0.0.0')), true);
    assert.equal(cidrContainsAddress(net, parseAddress('10.0.0.255')), true);
    assert.equal(cidrContainsAddress(net, parseAddress('10.0.1.0')), false);
    assert.equal(cidrContainsAddress(net, parseAddress('::a00:0')), false);
  });

  test('cidrContains holds for a sub-prefix and not the other way round', () => {
    assert.equal(cidrContains(c('10.0.0.0/16'), c('10.0.3.0/24')), true);
    assert.equal(cidrContains(c('10.0.3.0/24'), c('10.0.0.0/16')), false);
  });

  const overlapCases: [string, string, boolean][] = [
    ['10.0.0.0/24', '10.0.0.0/24', true],
    ['10.0.0.0/16', '10.0.255.0/24', true],
    ['10.0.0.0/24', '10.0.1.0/24', false],
    ['fd00::/48', 'fd00:0:0:1::/64', true],
    ['fd00::/64', 'fd00:0:0:1::/64', false],
    ['0.0.0.0/0', '::/0', false],
  ];
  for (const [a, b, expected] of overlapCases) {
    test(`cidrsOverlap(${a}, ${b}) is ${expected}`, () => {
      assert.equal(cidrsOverlap(c(a), c(b)), expected);
      assert.equal(cidrsOverlap(c(b), c(a)), expected);
    });
  }

  test('hasHostBitsSet is false for a network address', () => {
    assert.equal(hasHostBitsSet(4, 0x0a000000n, 24), false);
    assert.equal(hasHostBitsSet(4, 0x0a000001n, 24), true);
  });

  test('addressAt and offsetOf are inverse and bounded', () => {
    const net = c('fd02::200/126');
    assert.equal(addressAt(net, 3n), parseAddress('fd02::203').value);
    assert.equal(addressAt(net, 4n), undefined);
    assert.equal(addressAt(net, -1n), undefined);
    assert.equal(offsetOf(net, parseAddress('fd02::202')), 2n);
    assert.equal(offsetOf(net, parseAddress('fd02::204')), undefined);
  });
});

describe('splitting', () => {
  test('subnetAt carves the n-th piece', () => {
    assert.equal(formatCidr(subnetAt(c('10.2.0.0/16'), 27, 3n)!), '10.2.0.96/27');
  });

  test('subnetAt on fd00::/48 into /120s reaches the last of 2^72 pieces without listing them', () => {
    const net = c('fd00::/48');
    assert.equal(subnetCount(net, 120), 1n << 72n);
    assert.equal(formatCidr(subnetAt(net, 120, (1n << 72n) - 1n)!), 'fd00::ffff:ffff:ffff:ffff:ff00/120');
    assert.equal(subnetAt(net, 120, 1n << 72n), undefined);
  });

  test('subnetCount refuses a piece wider than the prefix', () => {
    assert.throws(() => subnetCount(c('10.0.0.0/24'), 16), RangeError);
  });

  test('subnetIndexOf is undefined outside the prefix', () => {
    assert.equal(subnetIndexOf(c('10.0.0.0/24'), c('10.0.1.0/27')), undefined);
  });

  test('subnetIndexOf inverts subnetAt for random prefixes', () => {
    const arb = fc
      .record({ base: fc.bigInt({ min: 0n, max: (1n << 128n) - 1n }), prefix: fc.integer({ min: 0, max: 128 }) })
      .chain(({ base, prefix }) =>
        fc.integer({ min: prefix, max: Math.min(128, prefix + 90) }).chain((sub) =>
          fc.record({
            net: fc.constant<Cidr>(parseCidr(`${formatV6(base)}/${prefix}`)),
            sub: fc.constant(sub),
            index: fc.bigInt({ min: 0n, max: (1n << BigInt(sub - prefix)) - 1n }),
          }),
        ),
      );
    fc.assert(
      fc.property(arb, ({ net, sub, index }) => {
        const piece = subnetAt(net, sub, index)!;
        assert.ok(cidrContains(net, piece));
        assert.equal(subnetIndexOf(net, piece), index);
      }),
    );
  });
});

function formatV6(value: bigint): string {
  return value.toString(16).padStart(32, '0').match(/.{4}/g)!.join(':');
}

describe('parseBlockField: an AddressBlock field as Coil\'s coild reads it (net.ParseCIDR, To16/To4)', () => {
  test('an ipv6 in IPv4 form is the IPv4-mapped prefix', () => {
    assert.equal(formatCidr(parseBlockField(6, '10.9.0.0/29')), '::ffff:10.9.0.0/125');
    assert.equal(formatCidr(parseBlockField(6, '10.9.0.8/32')), '::ffff:10.9.0.8/128');
  });
  test('an ipv4 in IPv4-mapped form is the IPv4 prefix', () => {
    assert.equal(formatCidr(parseBlockField(4, '::ffff:10.9.0.0/125')), '10.9.0.0/29');
  });
  test('each family as written is unchanged', () => {
    assert.equal(formatCidr(parseBlockField(4, '10.2.0.32/27')), '10.2.0.32/27');
    assert.equal(formatCidr(parseBlockField(6, 'fd00::20/123')), 'fd00::20/123');
  });
  test('an IPv6 prefix that is no IPv4 one in the ipv4 field, or text that does not parse, is a CidrError', () => {
    assert.throws(() => parseBlockField(4, 'fd00::/120'), CidrError);
    assert.throws(() => parseBlockField(4, '::ffff:0.0.0.0/64'), CidrError);
    assert.throws(() => parseBlockField(6, 'garbage'), CidrError);
  });
});
