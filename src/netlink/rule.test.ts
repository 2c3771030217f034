import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { IpRunner } from './iproute2/ip-runner.js';
import { rt } from './rt-request.js';
import { readRules } from './rule.js';
import { TestNetnsSet, netnsSkipReason, type TestNetns } from '../../test/netns/test-netns.js';
import { prerequisite } from '../../test/support/prerequisite.js';

describe('rule in a real network namespace', { skip: prerequisite(netnsSkipReason()) }, () => {
  const ip = new IpRunner();
  const netns = new TestNetnsSet({ ip });
  let ns: TestNetns;
  before(async () => { ns = await netns.create('rule'); });
  after(() => netns.cleanup());

  test('a rule request of family 6 makes an IPv6 rule only', async () => {
    await ip.apply([rt.ruleAdd({ family: 6, priority: 2000, table: 116 })], { netns: ns.path });
    const v6 = await readRules(ip, { netns: ns.path, family: 6 });
    const v4 = await readRules(ip, { netns: ns.path, family: 4 });
    assert.deepEqual(v6.filter((r) => r.priority === 2000), [{ priority: 2000, src: 'all', table: '116' }]);
    assert.deepEqual(v4.filter((r) => r.priority === 2000), []);
  });

  test('del removes it', async () => {
    await ip.apply([rt.ruleDel({ family: 6, priority: 2000, table: 116 })], { netns: ns.path });
    assert.ok(!(await readRules(ip, { netns: ns.path, family: 6 })).some((r) => r.priority === 2000));
  });
});
