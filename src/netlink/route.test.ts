import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { IpRunner } from './iproute2/ip-runner.js';
import { readRoutes, readRoutesBothFamilies, route, routeGet } from './route.js';
import { TestNetnsSet, netnsSkipReason, type TestNetns } from '../../test/netns/test-netns.js';
import { prerequisite } from '../../test/support/prerequisite.js';

describe('route builders', () => {
  test('add emits via, dev, scope, proto and table in iproute2 order', () => {
    assert.deepEqual(route.add({ dst: '10.0.0.5/32', dev: 'v0', scope: 'link', protocol: 30, table: 116 }),
      ['route', 'add', '10.0.0.5/32', 'dev', 'v0', 'scope', 'link', 'proto', '30', 'table', '116']);
    assert.deepEqual(route.replace({ dst: '::/0', via: 'fe80::1', dev: 'eth0' }), ['route', 'replace', '::/0', 'via', 'fe80::1', 'dev', 'eth0']);
  });
});

describe('route reads in a real network namespace', { skip: prerequisite(netnsSkipReason()) }, () => {
  const ip = new IpRunner();
  const netns = new TestNetnsSet({ ip });
  let ns: TestNetns;
  before(async () => { ns = await netns.create('route'); });
  after(() => netns.cleanup());

  test('a table never created reads as empty', async () => {
    assert.deepEqual(await readRoutes(ip, { netns: ns.path, family: 4, table: 4242 }), []);
    assert.deepEqual(await readRoutes(ip, { netns: ns.path, family: 6, table: 4242 }), []);
  });

  test('routes of both families come back from one table', async () => {
    await ip.batch([route.add({ dst: '10.9.0.0/24', dev: 'lo', table: 200, protocol: 30 }), route.add({ dst: 'fd09::/64', dev: 'lo', table: 200 })], { netns: ns.path });
    const rs = await readRoutesBothFamilies(ip, { netns: ns.path, table: 200 });
    assert.deepEqual(rs.map((r) => [r.dst, r.protocol]), [['10.9.0.0/24', '30'], ['fd09::/64', undefined]]);
  });

  test('routeGet is undefined for an unreachable destination', async () => {
    assert.equal(await routeGet(ip, '192.0.0.10', { netns: ns.path }), undefined);
  });
});
