import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { addressBytes, canonicalAddress, canonicalAddressOrText, CidrError, formatAddress, parseAddress, tryCanonicalAddress, tryParseAddress } from './ip-address.js';

describe('parseAddress', () => {
  const valid: [string, 4 | 6, bigint][] = [
    ['0.0.0.0', 4, 0n],
    ['10.2.3.4', 4, 0x0a020304n],
    ['255.255.255.255', 4, 0xffffffffn],
    ['::', 6, 0n],
    ['::1', 6, 1n],
    ['fd00::', 6, 0xfd00n << 112n],
    ['FD00:0:0:0:0:0:0:1', 6, (0xfd00n << 112n) | 1n],
    ['1:2:3:4:5:6:7:8', 6, 0x00010002000300040005000600070008n],
    ['::ffff:10.0.0.1', 6, 0xffff0a000001n],
    ['64:ff9b::192.0.2.33', 6, (0x64ff9bn << 96n) | 0xc0000221n],
    ['1::', 6, 1n << 112n],
  ];
  for (const [text, family, value] of valid) {
    test(`reads ${text} as IPv${family} ${value.toString(16)}`, () => {
      assert.deepEqual(parseAddress(text), { family, value });
    });
  }

  // Each is rejected by Go's netip.ParseAddr too, so our webhook agrees with Coil's.
  const invalid = [
    '', '10.0.0', '10.0.0.0.0', '256.0.0.0', '010.0.0.1', '1.2.3.-4', 'a.b.c.d', ' 10.0.0.1',
    ':::', '1:::2', '1::2::3', '12345::', 'g::', '1:2:3:4:5:6:7', '1:2:3:4:5:6:7:8:9', '1:2:3:4:5:6:7::8',
    '::1.2.3.4:5', '1.2.3.4::', 'fe80::1%eth0', ':1::', '1:2:3:4:5:6:7:',
  ];
  for (const text of invalid) {
    test(`rejects ${JSON.stringify(text)} with a CidrError naming the text`, () => {
      assert.throws(() => parseAddress(text), (e: unknown) => e instanceof CidrError && e.message === `invalid IP address: ${text}`);
    });
  }

  test('tryParseAddress returns undefined instead of throwing', () => {
    assert.equal(tryParseAddress('nope'), undefined);
  });
});

describe('formatAddress', () => {
  // Expected strings are Go's netip.Addr.String output (RFC 5952).
  const cases: [string, string][] = [
    ['10.2.3.4', '10.2.3.4'],
    ['0:0:0:0:0:0:0:0', '::'],
    ['0:0:0:0:0:0:0:1', '::1'],
    ['fd00:0:0:0:0:0:0:0', 'fd00::'],
    ['FD02:0000:0000:0000:0000:0000:0000:0200', 'fd02::200'],
    ['1:0:0:1:0:0:0:1', '1:0:0:1::1'],
    ['1:0:0:0:1:0:0:1', '1::1:0:0:1'],
    ['1:0:1:1:1:1:1:1', '1:0:1:1:1:1:1:1'],
    ['2001:db8:0:0:1:0:0:1', '2001:db8::1:0:0:1'],
    ['0:0:0:0:0:ffff:a00:1', '::ffff:10.0.0.1'],
    ['1:2:3:4:5:6:7:8', '1:2:3:4:5:6:7:8'],
  ];
  for (const [input, expected] of cases) {
    test(`writes ${input} as ${expected}`, () => {
      assert.equal(canonicalAddress(input), expected);
    });
  }

  test('tryCanonicalAddress gives undefined, canonicalAddressOrText the text as given, for what is not an address', () => {
    assert.equal(tryCanonicalAddress('FD00:0::01'), 'fd00::1');
    assert.equal(tryCanonicalAddress('010.0.0.1'), undefined);
    assert.equal(canonicalAddressOrText('FD00:0::01'), 'fd00::1');
    assert.equal(canonicalAddressOrText('010.0.0.1'), '010.0.0.1');
    assert.equal(canonicalAddressOrText(undefined), undefined);
  });

  test('throws RangeError for a value wider than the family', () => {
    assert.throws(() => formatAddress(4, 1n << 32n), RangeError);
  });

  test('parse(format(x)) is x for every IPv6 value', () => {
    fc.assert(
      fc.property(fc.bigInt({ min: 0n, max: (1n << 128n) - 1n }), (value) => {
        assert.deepEqual(parseAddress(formatAddress(6, value)), { family: 6, value });
      }),
    );
  });

  test('IPv6 output never shortens a single zero group and uses :: at most once', () => {
    const group = fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 0xffff }));
    fc.assert(
      fc.property(fc.array(group, { minLength: 8, maxLength: 8 }), (groups) => {
        const value = groups.reduce((acc, g) => (acc << 16n) | BigInt(g), 0n);
        const text = formatAddress(6, value);
        assert.ok(text.split('::').length <= 2, text);
        if (text.includes('::') && !text.startsWith('::ffff:')) {
          const shown = text.split(/::|:/).filter((s) => s !== '').length;
          assert.ok(8 - shown >= 2, `${text} shortens fewer than two groups`);
        }
      }),
    );
  });
});

describe('addressBytes', () => {
  test('gives the address in network byte order, 4 or 16 bytes', () => {
    assert.deepEqual([...addressBytes(parseAddress('10.68.0.114'))], [10, 68, 0, 114]);
    assert.deepEqual([...addressBytes(parseAddress('fd02::1'))], [0xfd, 0x02, ...new Array<number>(13).fill(0), 1]);
    assert.deepEqual([...addressBytes(parseAddress('::'))], new Array<number>(16).fill(0));
  });
});
