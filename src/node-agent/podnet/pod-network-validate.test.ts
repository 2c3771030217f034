import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { PodNetworkError, formatAlias, hostVethName, parseAlias } from './pod-network.js';
import { validateSetup } from './pod-network-validate.js';

const ok = { containerId: 'abc123', ifname: 'eth0', pool: 'default', ipv4: '10.0.0.5', hostIPv4: '192.168.0.1' };
const invalid = (e: unknown): boolean => e instanceof PodNetworkError && e.kind === 'invalid-argument';

describe('validateSetup', () => {
  test('canonicalises addresses and builds the alias', () => {
    const v = validateSetup('/run/netns/p', { ...ok, ipv6: 'FD00:0:0::5' });
    assert.equal(v.ipv6, 'fd00::5');
    assert.equal(v.alias, 'COIL:default:abc123:eth0');
  });
  test('refuses each malformed field', () => {
    const cases = [
      { ...ok, containerId: 'a b' }, { ...ok, containerId: '' }, { ...ok, ifname: 'averyveryverylongname' }, { ...ok, ifname: 'eth/0' },
      { ...ok, pool: 'Default' }, { ...ok, ipv4: 'fd00::1' }, { ...ok, ipv4: undefined }, { ...ok, hostIPv4: undefined },
      { ...ok, ipv6: '10.0.0.1' }, { ...ok, mtuBytes: 10 },
    ];
    for (const c of cases) assert.throws(() => validateSetup('/run/netns/p', c), invalid, JSON.stringify(c));
    assert.throws(() => validateSetup('relative/path', ok), invalid);
  });
});

describe('names', () => {
  test('host veth names are veth + 11 hex, deterministic per key', () => {
    assert.match(hostVethName('abc123', 'eth0'), /^veth[0-9a-f]{11}$/);
    assert.equal(hostVethName('abc123', 'eth0'), hostVethName('abc123', 'eth0'));
    assert.notEqual(hostVethName('abc123', 'eth0'), hostVethName('abc123', 'eth1'));
  });
  test('aliases round-trip and egress-only aliases parse with an empty pool', () => {
    assert.deepEqual(parseAlias(formatAlias('blue', 'c1', 'eth0')), { pool: 'blue', containerId: 'c1', ifname: 'eth0' });
    assert.deepEqual(parseAlias('COIL::uid-1:eth0'), { pool: '', containerId: 'uid-1', ifname: 'eth0' });
    assert.equal(parseAlias('something else'), undefined);
    assert.equal(parseAlias('COIL:p::eth0'), undefined);
  });
});
