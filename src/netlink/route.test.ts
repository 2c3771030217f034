import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { IpRunner } from './iproute2/ip-runner.js';
import { formatRequest } from './iproute2/rt-format.js';
import { readRoutes, readRoutesBothFamilies, routeGet } from './route.js';
import { rt } from './rt-request.js';
import { TestNetnsSet, netnsSkipReason, type TestNetns } from '../../test/netns/test-netns.js';
import { prerequisite } from '../../test/support/prerequisite.js';

describe('route requests as the fallback\'s ip lines', () => {
  test('add emits via, dev, scope, proto, src, metric, onlink and table in iproute2 order', () => {
    assert.deepEqual(formatRequest(rt.routeAdd({ dst: '10.0.0.5/32', dev: 'v0', scope: 'link', protocol: 30, table: 116 })),
      ['route', 'add', '10.0.0.5/32', 'dev', 'v0', 'scope', 'link', 'proto', '30', 'table', '116']);
    assert.deepEqual(formatRequest(rt.routeReplace({ dst: '::/0', via: 'fe80::1', dev: 'eth0' })), ['route', 'replace', '::/0', 'via', 'fe80::1', 'dev', 'eth0']);
    assert.deepEqual(formatRequest(rt.routeReplace({ dst: '0.0.0.0/0', via: '192.0.2.1', dev: 'eth0', prefsrc: '192.0.2.9', metric: 100, isOnlink: true, table: 1002 })),
      ['route', 'replace', '0.0.0.0/0', 'via', '192.0.2.1', 'dev', 'eth0', 'src', '192.0.2.9', 'metric', '100', 'onlink', 'table', '1002']);
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
    await ip.apply([rt.routeAdd({ dst: '10.9.0.0/24', dev: 'lo', table: 200, protocol: 30 }), rt.routeAdd({ dst: 'fd09::/64', dev: 'lo', table: 200 })], { netns: ns.path });
    const rs = await readRoutesBothFamilies(ip, { netns: ns.path, table: 200 });
    assert.deepEqual(rs.map((r) => [r.dst, r.protocol]), [['10.9.0.0/24', '30'], ['fd09::/64', undefined]]);
  });

  test('routeGet is undefined for an unreachable destination', async () => {
    assert.equal(await routeGet(ip, '192.0.0.10', { netns: ns.path }), undefined);
  });
});
