import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readAddrs } from './addr.js';
import { IpRunner } from './iproute2/ip-runner.js';
import { formatRequest } from './iproute2/rt-format.js';
import { readLinks } from './link.js';
import { rt } from './rt-request.js';
import { TestNetnsSet, netnsSkipReason, type TestNetns } from '../../test/netns/test-netns.js';
import { prerequisite } from '../../test/support/prerequisite.js';

describe('link and address requests as the fallback\'s ip lines', () => {
  test('a veth pair: MTU and MAC on each end and the peer netns last', () => {
    assert.deepEqual(formatRequest(rt.veth({ name: 'h0', peerName: 'eth0', peerNetns: '/run/netns/p', mtuBytes: 1400, mac: '02:00:00:00:00:01', peerMac: '02:00:00:00:00:02' })),
      ['link', 'add', 'h0', 'mtu', '1400', 'address', '02:00:00:00:00:01', 'type', 'veth', 'peer', 'name', 'eth0', 'mtu', '1400', 'address', '02:00:00:00:00:02', 'netns', '/run/netns/p']);
    assert.deepEqual(formatRequest(rt.veth({ name: 'h0', peerName: 'p0' })), ['link', 'add', 'h0', 'type', 'veth', 'peer', 'name', 'p0']);
  });
  test('link set and address add emit only the options given', () => {
    assert.deepEqual(formatRequest(rt.linkSet('h0', { alias: 'COIL:a:b:c', up: true })), ['link', 'set', 'dev', 'h0', 'alias', 'COIL:a:b:c', 'up']);
    assert.deepEqual(formatRequest(rt.addrAdd({ cidr: 'fe80::1/64', dev: 'h0', isNoDad: true })), ['addr', 'add', 'fe80::1/64', 'dev', 'h0', 'nodad']);
  });
});

describe('link and addr in a real network namespace', { skip: prerequisite(netnsSkipReason()) }, () => {
  const ip = new IpRunner();
  const netns = new TestNetnsSet({ ip });
  let a: TestNetns;
  let b: TestNetns;
  before(async () => { a = await netns.create('link'); b = await netns.create('link'); });
  after(() => netns.cleanup());

  test('a veth pair has its peer in the other netns, alias and addresses readable', async () => {
    await ip.apply([
      rt.veth({ name: 'h0', peerName: 'p0', peerNetns: b.path, mac: '02:00:00:00:00:0a', peerMac: '02:00:00:00:00:0b', mtuBytes: 1300 }),
      rt.linkSet('h0', { alias: 'COIL:x:y:p0', up: true }),
      rt.addrAdd({ cidr: 'fd00:1::1/128', dev: 'h0', isNoDad: true }),
    ], { netns: a.path });
    const [h0] = await readLinks(ip, { netns: a.path, dev: 'h0' });
    const [p0] = await readLinks(ip, { netns: b.path, dev: 'p0' });
    assert.deepEqual([h0?.address, h0?.mtu, h0?.ifalias, h0?.linkinfo?.info_kind], ['02:00:00:00:00:0a', 1300, 'COIL:x:y:p0', 'veth']);
    assert.deepEqual([p0?.address, p0?.mtu], ['02:00:00:00:00:0b', 1300]);
    assert.equal(typeof h0?.link_netnsid, 'number');
    const [addrs] = await readAddrs(ip, { netns: a.path, dev: 'h0' });
    assert.ok(addrs?.addr_info.some((x) => x.local === 'fd00:1::1' && x.prefixlen === 128 && !x.tentative));
  });

  test('del removes both ends', async () => {
    await ip.apply([rt.linkDel('h0')], { netns: a.path });
    assert.deepEqual((await readLinks(ip, { netns: b.path })).map((l) => l.ifname), ['lo']);
  });
});
