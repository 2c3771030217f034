import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { FakePodNetwork } from './pod-network.fake.js';
import { PodNetworkError } from '../../src/node-agent/podnet/pod-network.js';

describe('FakePodNetwork', () => {
  test('setup, list, check and destroy agree like the real one', async () => {
    const pn = new FakePodNetwork();
    const res = await pn.setup('/run/netns/p', { containerId: 'c1', ifname: 'eth0', pool: 'default', ipv4: '10.0.0.5', hostIPv4: '192.168.0.1' });
    assert.deepEqual(res.ips, [{ address: '10.0.0.5/32', gateway: '192.168.0.1', interface: 0 }]);
    assert.deepEqual(await pn.list(), [{ pool: 'default', containerId: 'c1', ifname: 'eth0', hostIfname: res.hostIfname, ipv4: '10.0.0.5' }]);
    assert.deepEqual(await pn.check({ containerId: 'c1', ifname: 'eth0', ipv4: '10.0.0.5' }), []);
    await pn.destroy('c1', 'eth0');
    await pn.destroy('c1', 'eth0');
    assert.deepEqual(await pn.check({ containerId: 'c1', ifname: 'eth0' }), [`host veth ${res.hostIfname} not found`]);
  });

  test('an injected failure wires nothing', async () => {
    const pn = new FakePodNetwork();
    pn.failNextSetup(new Error('boom'));
    await assert.rejects(pn.setup('/run/netns/p', { containerId: 'c1', ifname: 'eth0', pool: 'default', ipv6: 'fd00::1' }), PodNetworkError);
    assert.deepEqual(await pn.list(), []);
  });
});
