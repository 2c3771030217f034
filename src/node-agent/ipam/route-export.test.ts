// Real-netns tests of IpRouteExporter (table 119) in a "host" netns created per suite.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { IpRunner } from '../../netlink/iproute2/ip-runner.js';
import { readRoutes } from '../../netlink/route.js';
import { TestNetnsSet, netnsSkipReason, type TestNetns } from '../../../test/netns/test-netns.js';
import { IpRouteExporter } from './route-export.js';
import { prerequisite } from '../../../test/support/prerequisite.js';

describe('IpRouteExporter in a real network namespace', { skip: prerequisite(netnsSkipReason()) }, () => {
  const ip = new IpRunner();
  const netns = new TestNetnsSet({ ip });
  let host: TestNetns;
  let exporter: IpRouteExporter;

  /** Table 119 as `dst dev proto` strings, both families. */
  const table119 = async (): Promise<string[]> => {
    const all = [...await readRoutes(ip, { netns: host.path, family: 4, table: 119 }), ...await readRoutes(ip, { netns: host.path, family: 6, table: 119 })];
    return all.map((r) => `${r.dst} ${r.dev ?? '-'} ${r.protocol ?? '-'}`).sort();
  };

  before(async () => {
    host = await netns.create('host');
    exporter = new IpRouteExporter({ ip, hostNetns: host.path });
  });
  after(() => netns.cleanup());

  test('sync adds each block as "dev lo proto 30" in table 119, IPv4 and IPv6', async () => {
    const change = await exporter.sync(['10.60.0.0/27', 'fd00:60::/120']);
    assert.deepEqual(change, { added: ['10.60.0.0/27', 'fd00:60::/120'], deleted: [] });
    assert.deepEqual(await table119(), ['10.60.0.0/27 lo 30', 'fd00:60::/120 lo 30']);
  });

  test('sync with the same set changes nothing', async () => {
    assert.deepEqual(await exporter.sync(['fd00:60:0::/120', '10.60.0.0/27']), { added: [], deleted: [] });
  });

  test('sync removes blocks no longer desired and adds new ones in one call', async () => {
    const change = await exporter.sync(['10.60.0.32/27', 'fd00:60::/120']);
    assert.deepEqual(change, { added: ['10.60.0.32/27'], deleted: ['10.60.0.0/27'] });
    assert.deepEqual(await table119(), ['10.60.0.32/27 lo 30', 'fd00:60::/120 lo 30']);
  });

  test('sync deletes foreign routes in table 119 and re-adds a desired prefix routed another way', async () => {
    await ip.batch([
      ['route', 'add', '10.61.0.0/24', 'dev', 'lo', 'table', '119'],
      ['route', 'add', '10.61.1.1/32', 'dev', 'lo', 'proto', '30', 'table', '119'],
      ['route', 'del', '10.60.0.32/27', 'table', '119'],
      ['route', 'add', '10.60.0.32/27', 'dev', 'lo', 'proto', 'static', 'table', '119'],
    ], { netns: host.path });
    const change = await exporter.sync(['10.60.0.32/27', 'fd00:60::/120']);
    assert.deepEqual(change, { added: ['10.60.0.32/27'], deleted: ['10.61.0.0/24', '10.61.1.1/32'] });
    assert.deepEqual(await table119(), ['10.60.0.32/27 lo 30', 'fd00:60::/120 lo 30']);
  });

  test('sync rejects a CIDR with host bits before changing anything', async () => {
    await assert.rejects(exporter.sync(['10.60.0.33/27']), TypeError);
    assert.deepEqual(await table119(), ['10.60.0.32/27 lo 30', 'fd00:60::/120 lo 30']);
  });

  test('overlapping syncs apply in call order', async () => {
    const a = exporter.sync(['10.62.0.0/27']);
    const b = exporter.sync(['10.62.0.32/27']);
    await Promise.all([a, b]);
    assert.deepEqual(await table119(), ['10.62.0.32/27 lo 30']);
    await exporter.sync(['10.60.0.32/27', 'fd00:60::/120']);
  });

  test('clear empties table 119 and is idempotent', async () => {
    assert.deepEqual(await exporter.clear(), { added: [], deleted: ['10.60.0.32/27', 'fd00:60::/120'] });
    assert.deepEqual(await table119(), []);
    assert.deepEqual(await exporter.clear(), { added: [], deleted: [] });
  });
});
