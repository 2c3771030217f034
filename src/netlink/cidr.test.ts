import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { canonicalAddress, formatCidr, parseCidr, routeKey, routeKeyOfDst } from './cidr.js';

describe('cidr', () => {
  test('canonicalAddress compresses IPv6 and refuses ambiguous IPv4 (leading zeros)', () => {
    assert.equal(canonicalAddress('2001:DB8:0:0::1'), '2001:db8::1');
    assert.throws(() => canonicalAddress('010.001.0.9'), TypeError);
    assert.throws(() => canonicalAddress('10.0.0.256'), TypeError);
  });
  test('parseCidr accepts network addresses of both families and bare addresses', () => {
    assert.deepEqual(parseCidr('10.0.0.32/27'), { family: 4, address: '10.0.0.32', prefixBits: 27 });
    assert.deepEqual(parseCidr('fd00:0::/120'), { family: 6, address: 'fd00::', prefixBits: 120 });
    assert.deepEqual(parseCidr('fd00::5'), { family: 6, address: 'fd00::5', prefixBits: 128 });
  });
  test('parseCidr refuses host bits, bad prefixes and garbage', () => {
    for (const bad of ['10.0.0.33/27', '10.0.0.0/33', 'fd00::1/64', '10.0.0.0/', '10.0.0.0/x', 'nope/8', '']) {
      assert.throws(() => parseCidr(bad), TypeError, bad);
    }
  });
  test('routeKey matches how ip -json prints dst', () => {
    assert.equal(routeKey(parseCidr('10.0.0.5/32')), '10.0.0.5');
    assert.equal(routeKey(parseCidr('fd00::5/128')), 'fd00::5');
    assert.equal(routeKey(parseCidr('0.0.0.0/0')), 'default');
    assert.equal(routeKeyOfDst('fd00:0:0::/64'), 'fd00::/64');
    assert.equal(formatCidr(parseCidr('10.0.0.5')), '10.0.0.5/32');
  });
});
