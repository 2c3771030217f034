import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { IpRunner, spawnProcess, type ProcessSpawner } from './iproute2/ip-runner.js';
import { formatRequest } from './iproute2/rt-format.js';
import { policyRuleKey, syncPolicyRules, syncTableRoutes, type PolicyRule } from './fib-rules.js';
import { NetlinkAgent } from './netlink-agent.js';
import { NetlinkExecutor } from './netlink-executor.js';
import { rt } from './rt-request.js';
import { TestNetnsSet, netnsSkipReason, type TestNetns } from '../../test/netns/test-netns.js';
import { prerequisite } from '../../test/support/prerequisite.js';

describe('policy rule requests', () => {
  test('as ip lines, selectors come before lookup; keys normalise main and CIDRs', () => {
    assert.deepEqual(formatRequest(rt.ruleAdd({ family: 4, priority: 2000, iif: 'eth0', table: 118 })), ['rule', 'add', 'prio', '2000', 'iif', 'eth0', 'lookup', '118']);
    assert.deepEqual(formatRequest(rt.ruleDel({ family: 4, priority: 1800, dst: '169.254.0.0/16', table: 254 })), ['rule', 'del', 'prio', '1800', 'to', '169.254.0.0/16', 'lookup', '254']);
    assert.deepEqual(formatRequest(rt.ruleDel({ family: 6, priority: 1700, fwmark: 512, fwmask: 65280, table: 300 })), ['rule', 'del', 'prio', '1700', 'fwmark', '512/65280', 'lookup', '300']);
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

  test('rules sync the same through rtnetlink (no process) as through ip, both families, every selector', { skip: prerequisite(new NetlinkAgent().isUsable ? undefined : 'no netlink agent: run hack/build-cni.sh') }, async () => {
    const spawned: string[][] = [];
    const counting: ProcessSpawner = (argv, input, t) => {
      spawned.push([...argv]);
      return spawnProcess(argv, input, t);
    };
    const agent = new NetlinkAgent();
    const kernel = new NetlinkExecutor({ rtnetlink: agent, ip: new IpRunner({ spawner: counting }) });
    try {
      const [a, b] = [await netns.create('rules-ip'), await netns.create('rules-rt')];
      const want: Record<4 | 6, PolicyRule[]> = {
        4: [{ priority: 1800, to: '169.254.0.0/16', table: 'main' }, { priority: 1801, to: '10.1.2.3/32', iif: 'lo', table: 118 }, { priority: 1802, fwmark: 2, table: 4242 }],
        6: [{ priority: 1800, to: 'fe80::/10', table: 'main' }, { priority: 1801, iif: 'lo', fwmark: 3, table: 119 }],
      };
      const extra = [['rule', 'add', 'prio', '1803', 'fwmark', '0x200/0xff00', 'lookup', '300'], ['rule', 'add', 'prio', '1804', 'to', '10.9.0.0/16', 'lookup', '117']];
      for (const ns of [a, b]) await ip.batch(extra, { netns: ns.path });
      const read = async (ns: TestNetns, family: 4 | 6) => ip.json<unknown[]>(['rule', 'show'], { netns: ns.path, family });
      for (const family of [4, 6] as const) {
        const o = { family, minPriority: 1800, maxPriority: 1900, desired: want[family] };
        const viaIp = await syncPolicyRules(ip, { ...o, netns: a.path });
        spawned.length = 0;
        const viaRt = await syncPolicyRules(kernel, { ...o, netns: b.path });
        assert.deepEqual(spawned, [], 'the rtnetlink path started a process');
        assert.deepEqual(viaRt, viaIp);
        assert.deepEqual(await read(b, family), await read(a, family));
        assert.deepEqual(await syncPolicyRules(kernel, { ...o, netns: b.path }), { added: 0, deleted: 0 });
      }
      assert.deepEqual((await read(b, 4)).map((r) => (r as { priority: number }).priority), [0, 1800, 1801, 1802, 32766, 32767]);
      for (const family of [4, 6] as const) assert.deepEqual(await syncPolicyRules(kernel, { family, minPriority: 1800, maxPriority: 1900, desired: [], netns: b.path }), { added: 0, deleted: want[family].length });
    } finally {
      agent.stop();
    }
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
