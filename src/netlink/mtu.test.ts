import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { IpRunner } from './iproute2/ip-runner.js';
import { detectMtu } from './mtu.js';
import { TestNetnsSet, netnsSkipReason, type TestNetns } from '../../test/netns/test-netns.js';
import { prerequisite } from '../../test/support/prerequisite.js';

describe('detectMtu in real network namespaces', { skip: prerequisite(netnsSkipReason()) }, () => {
  const ip = new IpRunner();
  const netns = new TestNetnsSet({ ip });
  let node: TestNetns;
  let peer: TestNetns;
  before(async () => { node = await netns.create('mtu'); peer = await netns.create('mtu'); });
  after(() => netns.cleanup());

  test('no route and no physical NIC: undefined (kernel default)', async () => {
    assert.equal(await detectMtu(ip, { netns: node.path }), undefined);
  });

  test('takes the MTU of the link the route to 192.0.0.10 uses', async () => {
    await ip.batch([
      ['link', 'add', 'up0', 'mtu', '1450', 'type', 'veth', 'peer', 'name', 'up1', 'netns', peer.path],
      ['link', 'add', 'other0', 'mtu', '1300', 'type', 'veth', 'peer', 'name', 'other1'],
      ['link', 'set', 'dev', 'up0', 'up'],
      ['addr', 'add', '198.51.100.2/24', 'dev', 'up0'],
      ['route', 'add', 'default', 'via', '198.51.100.1', 'dev', 'up0', 'onlink'],
    ], { netns: node.path });
    assert.equal(await detectMtu(ip, { netns: node.path }), 1450);
  });

  test('falls back to the IPv6 probe when IPv4 has no route', async () => {
    await ip.batch([['route', 'del', 'default'], ['route', 'add', '::/0', 'dev', 'up0']], { netns: node.path });
    assert.equal(await detectMtu(ip, { netns: node.path }), 1450);
  });
});
