import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { IpRunner } from './iproute2/ip-runner.js';
import { NetlinkError } from './netlink-error.js';
import { readSysctl, writeSysctl } from './sysctl.js';
import { TestNetnsSet, netnsSkipReason, type TestNetns } from '../../test/netns/test-netns.js';
import { prerequisite } from '../../test/support/prerequisite.js';

describe('sysctl', () => {
  test('malformed keys are refused before any I/O', async () => {
    const ip = new IpRunner();
    for (const bad of ['net/ipv4/ip_forward', 'net.ipv4.ip_forward=1', '../etc', 'single']) {
      await assert.rejects(writeSysctl(ip, bad, '1', { netns: '/run/netns/none' }), TypeError, bad);
    }
  });
});

describe('sysctl in a real network namespace', { skip: prerequisite(netnsSkipReason()) }, () => {
  const ip = new IpRunner();
  const netns = new TestNetnsSet({ ip });
  let ns: TestNetns;
  before(async () => { ns = await netns.create('sysctl'); });
  after(() => netns.cleanup());

  test('a write inside the netns is read back there and not seen in this process netns', async () => {
    const own = await readSysctl(ip, 'net.ipv4.ip_forward');
    await writeSysctl(ip, 'net.ipv4.ip_forward', own === '1' ? '0' : '1', { netns: ns.path });
    assert.equal(await readSysctl(ip, 'net.ipv4.ip_forward', { netns: ns.path }), own === '1' ? '0' : '1');
    assert.equal(await readSysctl(ip, 'net.ipv4.ip_forward'), own);
  });

  test('a missing key is a NetlinkError', async () => {
    await assert.rejects(writeSysctl(ip, 'net.ipv4.conf.nosuch0.forwarding', '1', { netns: ns.path }), NetlinkError);
    await assert.rejects(readSysctl(ip, 'net.ipv4.conf.nosuch0.forwarding'), NetlinkError);
  });
});
