import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { IpRunner } from './iproute2/ip-runner.js';
import { policyRuleKey, policyRuleLine, syncPolicyRules, syncTableRoutes } from './fib-rules.js';
import { TestNetnsSet, netnsSkipReason, type TestNetns } from '../../test/netns/test-netns.js';
import { prerequisite } from '../../test/support/prerequisite.js';

describe('policy rule lines', () => {
  test('selectors come before lookup; keys normalise main and CIDRs', () => {
    assert.deepEqual(policyRuleLine('add', { priority: 2000, iif: 'eth0', table: 118 }), ['rule', 'add', 'prio', '2000', 'iif', 'eth0', 'lookup', '118']);
    assert.deepEqual(policyRuleLine('del', { priority: 1800, to: '169.254.0.0/16', table: 'main' }), ['rule', 'del', 'prio', '1800', 'to', '169.254.0.0/16', 'lookup', 'main']);
    assert.equal(policyRuleKey({ priority: 2000, to: 'FC00:0::/7', table: 254 }), policyRuleKey({ priority: 2000, to: 'fc00::/7', table: 'main' }));
  });
});

describe('policy sync in a real network namespace', { skip: prerequisite(netnsSkipReason()) }, () => {
  const ip = new IpRunner();
  const netns = new TestNetnsSet({ ip });
  let ns: TestNetns;
  before(async () => {
    ns = await netns.create('psync');
    await ip.batch([['link', 'add', 'd0', 'type', 'veth', 'peer', 'name', 'd1'], ['link', 'set', 'd0', 'up'], ['rule', 'add', 'prio', '3000', 'lookup', '200']], { netns: ns.path });
  });
  after(() => netns.cleanup());

  const desired = [
    { priority: 1800, to: '169.254.0.0/16', table: 'main' as const },
    { priority: 1900, table: 117 },
    { priority: 2000, to: '10.0.0.0/8', table: 'main' as const },
  ];

  test('adds the missing rules, then is a no-op, then removes what is no longer wanted, sparing rules outside the range', async () => {
    const range = { netns: ns.path, family: 4 as const, minPriority: 1800, maxPriority: 2100 };
    assert.deepEqual(await syncPolicyRules(ip, { ...range, desired }), { added: 3, deleted: 0 });
    assert.deepEqual(await syncPolicyRules(ip, { ...range, desired }), { added: 0, deleted: 0 });
    assert.deepEqual(await syncPolicyRules(ip, { ...range, desired: desired.slice(1) }), { added: 0, deleted: 1 });
    const rules = await ip.json<{ priority: number }[]>(['rule', 'show'], { netns: ns.path, family: 4 });
    assert.deepEqual(rules.map((r) => r.priority), [0, 1900, 2000, 3000, 32766, 32767]);
  });

  test('table routes: add with the protocol, keep foreign-protocol routes, delete extras', async () => {
    await ip.batch([['route', 'add', '192.0.2.0/24', 'dev', 'd0', 'table', '117']], { netns: ns.path });
    const o = { netns: ns.path, family: 4 as const, table: 117, protocol: 30 };
    assert.deepEqual(await syncTableRoutes(ip, { ...o, desired: [{ dst: '0.0.0.0/0', dev: 'd0' }, { dst: '198.51.100.0/24', dev: 'd0' }] }), { added: 2, deleted: 0 });
    assert.deepEqual(await syncTableRoutes(ip, { ...o, desired: [{ dst: '0.0.0.0/0', dev: 'd0' }] }), { added: 0, deleted: 1 });
    const routes = await ip.json<{ dst: string; protocol?: string }[]>(['route', 'show', 'table', '117'], { netns: ns.path });
    assert.deepEqual(routes.map((r) => `${r.dst} ${r.protocol ?? 'boot'}`).sort(), ['192.0.2.0/24 boot', 'default 30']);
  });
});
