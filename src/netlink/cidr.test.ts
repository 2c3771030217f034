import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { formatCidr } from '../ipam/cidr.js';
import { parseRoutePrefix, routeKey, routeKeyOfDst } from './cidr.js';

describe('cidr', () => {
  test('parseRoutePrefix accepts network addresses of both families and bare addresses', () => {
    assert.deepEqual(parseRoutePrefix('10.0.0.32/27'), { family: 4, base: 0x0a000020n, prefix: 27 });
    assert.deepEqual(parseRoutePrefix('fd00:0::/120'), { family: 6, base: 0xfd00n << 112n, prefix: 120 });
    assert.equal(formatCidr(parseRoutePrefix('FD00::5')), 'fd00::5/128');
  });
  test('parseRoutePrefix refuses host bits, bad prefixes and garbage', () => {
    for (const bad of ['10.0.0.33/27', '10.0.0.0/33', 'fd00::1/64', '10.0.0.0/', '10.0.0.0/x', 'nope/8', '']) {
      assert.throws(() => parseRoutePrefix(bad), TypeError, bad);
    }
  });
  test('routeKey matches how ip -json prints dst', () => {
    assert.equal(routeKey(parseRoutePrefix('10.0.0.5/32')), '10.0.0.5');
    assert.equal(routeKey(parseRoutePrefix('fd00::5/128')), 'fd00::5');
    assert.equal(routeKey(parseRoutePrefix('0.0.0.0/0')), 'default');
    assert.equal(routeKeyOfDst('fd00:0:0::/64'), 'fd00::/64');
    assert.equal(formatCidr(parseRoutePrefix('10.0.0.5')), '10.0.0.5/32');
  });
});
