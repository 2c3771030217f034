import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { parseConfig } from './config.js';

describe('coil-controller Egress flags', () => {
  test('defaults: both parts on, port 5555, nftables, image from the Pod', () => {
    const c = parseConfig([], {});
    assert.deepEqual([c.enableIpam, c.enableEgress, c.egress], [true, true, { fouPort: 5555, backend: 'nftables' }]);
  });
  test('the chart args and explicit values are taken', () => {
    const c = parseConfig(['--enable-ipam=false', '--enable-egress=true', '--egress-port=6000', '--backend=iptables', '--egress-image=example.com/coil:1'], {});
    assert.deepEqual([c.enableIpam, c.enableEgress, c.egress], [false, true, { fouPort: 6000, backend: 'iptables', image: 'example.com/coil:1' }]);
  });
  test('bad values are refused naming the flag', () => {
    assert.throws(() => parseConfig(['--backend=pf'], {}), /--backend: expected iptables or nftables, got "pf"/);
    assert.throws(() => parseConfig(['--egress-port=70000'], {}), /--egress-port: invalid port "70000"/);
    assert.throws(() => parseConfig(['--enable-egress=maybe'], {}), /--enable-egress: expected true or false/);
    assert.throws(() => parseConfig(['--enable-ipam=false', '--enable-egress=false'], {}), /nothing to run/);
  });
});
