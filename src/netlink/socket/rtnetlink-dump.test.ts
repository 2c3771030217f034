/**
 * rtnetlink reads against `ip -json` itself, in real network namespaces: every dump of
 * rt-request.ts's RtDump, read through the netlink agent and through its `ip -json` command
 * (rt-format.ts: the oracle), gives the same entries in the fields coil's shapes declare — over
 * veths with aliases, link groups, a peer in another netns, a carrier-less link with a tentative
 * IPv6 address, routes in several tables and both families, and policy rules — and fails with the
 * same errno; and the reads start no `ip` process.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { IpRunner, spawnProcess, type ProcessSpawner } from '../iproute2/ip-runner.js';
import { NetlinkAgent } from '../netlink-agent.js';
import { NetlinkExecutor } from '../netlink-executor.js';
import { isNetlinkErrno } from '../netlink-error.js';
import type { RtDump } from '../rt-request.js';
import { TestNetnsSet, netnsSkipReason, type TestNetns } from '../../../test/netns/test-netns.js';
import { prerequisite } from '../../../test/support/prerequisite.js';

const agent = new NetlinkAgent();
const skip = prerequisite(netnsSkipReason() ?? (agent.isUsable ? undefined : `${agent.runtimePath} or ${agent.scriptPath} missing: run hack/build-cni.sh`));

/** The fields each shape declares (link.ts Link, addr.ts LinkAddresses/Address, route.ts Route, rule.ts Rule). */
const FIELDS: Record<RtDump['kind'], readonly string[]> = {
  links: ['ifindex', 'ifname', 'flags', 'mtu', 'operstate', 'link_type', 'address', 'group', 'ifalias', 'link_netnsid', 'linkinfo'],
  addrs: ['ifindex', 'ifname', 'address', 'addr_info'],
  routes: ['dst', 'dev', 'gateway', 'protocol', 'scope', 'table', 'type', 'prefsrc', 'metric', 'flags'],
  'route-get': ['dst', 'dev', 'gateway', 'protocol', 'scope', 'table', 'type', 'prefsrc', 'metric', 'flags'],
  rules: ['priority', 'src', 'srclen', 'dst', 'dstlen', 'iif', 'fwmark', 'fwmask', 'table'],
  // Read over generic netlink; compared in the FoU VM (src/netlink/fou.test.ts).
  'fou-ports': ['port', 'ipproto', 'gue', 'family'],
};
const ADDR_INFO_FIELDS = ['family', 'local', 'prefixlen', 'scope', 'tentative'];

/** `ip -json`'s entries cut down to the declared fields (ip prints many more). */
function project(kind: RtDump['kind'], entries: readonly Record<string, unknown>[]): unknown[] {
  const pick = (o: Record<string, unknown>, keys: readonly string[]) => Object.fromEntries(keys.filter((k) => o[k] !== undefined).map((k) => [k, o[k]]));
  return entries.map((e) => {
    const p = pick(e, FIELDS[kind]);
    if (kind === 'links' && p['linkinfo'] !== undefined) {
      const info = pick(p['linkinfo'] as Record<string, unknown>, ['info_kind', 'info_data']);
      // Only a tunnel's data is decoded (link.ts TunnelInfo).
      if (info['info_kind'] !== 'ipip' && info['info_kind'] !== 'ip6tnl') delete info['info_data'];
      else if (info['info_data'] !== undefined) {
        const data = pick(info['info_data'] as Record<string, unknown>, ['external', 'remote', 'local', 'encap']);
        if (data['encap'] !== undefined) data['encap'] = pick(data['encap'] as Record<string, unknown>, ['type', 'sport', 'dport']);
        info['info_data'] = data;
      }
      p['linkinfo'] = info;
    }
    if (kind === 'addrs') p['addr_info'] = (p['addr_info'] as Record<string, unknown>[]).map((a) => pick(a, ADDR_INFO_FIELDS));
    return p;
  });
}

describe('rtnetlink dumps against ip -json in real network namespaces', { skip }, () => {
  const netns = new TestNetnsSet();
  const spawned: string[][] = [];
  const counting: ProcessSpawner = (argv, input, t) => {
    spawned.push([...argv]);
    return spawnProcess(argv, input, t);
  };
  const ip = new IpRunner();
  const kernel = new NetlinkExecutor({ rtnetlink: agent, ip: new IpRunner({ spawner: counting }) });
  let host: TestNetns;
  let pod: TestNetns;

  before(async () => {
    host = await netns.create('dump-host');
    pod = await netns.create('dump-pod');
    await ip.batch([
      ['link', 'add', 'veth-a', 'mtu', '1450', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', pod.path],
      ['link', 'set', 'dev', 'veth-a', 'alias', 'COIL:default:ctr-1:eth0', 'up'],
      ['addr', 'add', '10.250.0.9/32', 'dev', 'veth-a'],
      ['addr', 'add', 'fe80::1/64', 'dev', 'veth-a', 'nodad'],
      ['route', 'add', '10.64.0.5/32', 'dev', 'veth-a', 'scope', 'link', 'proto', '30', 'table', '116'],
      ['route', 'add', 'fd00::5/128', 'dev', 'veth-a', 'proto', '30', 'table', '116'],
      ['route', 'add', '10.100.0.0/27', 'dev', 'lo', 'proto', '30', 'table', '119'],
      ['route', 'add', 'fd00:100::/120', 'dev', 'lo', 'proto', '30', 'table', '119'],
      // Retired (down, in the reaper's group), and a veth whose peer is down: carrier-less, so its
      // IPv6 address stays tentative (DAD waits for a carrier).
      ['link', 'add', 'veth-r', 'type', 'veth', 'peer', 'name', 'veth-rp'],
      ['link', 'set', 'dev', 'veth-r', 'down', 'group', '1129269580'],
      ['link', 'add', 'veth-n', 'address', '02:00:00:00:00:0a', 'type', 'veth', 'peer', 'name', 'veth-np'],
      ['link', 'set', 'dev', 'veth-n', 'up'],
      ['addr', 'add', 'fd00:9::1/64', 'dev', 'veth-n'],
      ['addr', 'add', '192.0.2.1/24', 'dev', 'veth-n'],
      ['route', 'add', '198.51.100.0/24', 'via', '192.0.2.254', 'dev', 'veth-n', 'onlink'],
      ['rule', 'add', 'prio', '2000', 'lookup', '116'],
      ['rule', 'add', 'from', '10.1.0.0/16', 'prio', '2100', 'lookup', '117'],
      ['rule', 'add', 'from', '10.1.0.7', 'prio', '2200', 'lookup', 'main'],
      // The egress client's and NAT pod's selectors: a destination, an input interface, a mark (full and partial mask).
      ['rule', 'add', 'to', '169.254.0.0/16', 'prio', '1800', 'lookup', 'main'],
      ['rule', 'add', 'to', '10.1.2.3', 'prio', '1801', 'lookup', '118'],
      ['rule', 'add', 'iif', 'veth-a', 'prio', '2300', 'lookup', '118'],
      ['rule', 'add', 'fwmark', '0x2', 'prio', '2400', 'lookup', '4242'],
      ['rule', 'add', 'fwmark', '0x200/0xff00', 'prio', '2401', 'lookup', '300'],
    ], { netns: host.path });
    await ip.batch([['rule', 'add', 'prio', '2000', 'lookup', '116'], ['rule', 'add', 'from', 'fd00::/64', 'prio', '2100', 'lookup', '117'],
      ['rule', 'add', 'to', 'fe80::/10', 'prio', '1800', 'lookup', 'main'], ['rule', 'add', 'fwmark', '3', 'iif', 'veth-a', 'prio', '2400', 'lookup', '119']], { netns: host.path, family: 6 });
    await ip.batch([
      ['link', 'set', 'dev', 'eth0', 'up'],
      ['addr', 'add', '10.64.0.5/32', 'dev', 'eth0'],
      ['addr', 'add', 'fd00::5/128', 'dev', 'eth0', 'nodad'],
      ['route', 'add', '10.250.0.9/32', 'dev', 'eth0', 'scope', 'link'],
      ['route', 'add', 'default', 'via', '10.250.0.9', 'dev', 'eth0'],
    ], { netns: pod.path });
    await ip.batch([['route', 'add', '::/0', 'via', 'fe80::1', 'dev', 'eth0']], { netns: pod.path });
  });
  after(async () => {
    agent.stop();
    await netns.cleanup();
  });

  const dumps: RtDump[] = [
    { kind: 'links' }, { kind: 'links', dev: 'veth-a' }, { kind: 'links', dev: 'veth-r' },
    { kind: 'addrs' }, { kind: 'addrs', dev: 'veth-n' },
    { kind: 'routes', family: 4 }, { kind: 'routes', family: 6 },
    { kind: 'routes', family: 4, table: 116 }, { kind: 'routes', family: 6, table: 116 },
    { kind: 'routes', family: 4, table: 119 }, { kind: 'routes', family: 6, table: 119 },
    { kind: 'routes', family: 4, table: 255 }, { kind: 'routes', family: 4, table: 116, dev: 'veth-a' },
    { kind: 'routes', family: 4, table: 4242 },
    { kind: 'rules', family: 4 }, { kind: 'rules', family: 6 },
    // detectMtu's probes, a pod (table 116 through the rule), a gateway, a local address, the node's own.
    { kind: 'route-get', address: '192.0.0.10' }, { kind: 'route-get', address: '2001:1::2' }, { kind: 'route-get', address: '10.64.0.5' },
    { kind: 'route-get', address: '198.51.100.7' }, { kind: 'route-get', address: '10.250.0.9' }, { kind: 'route-get', address: 'fd00::5' },
  ];

  test('every dump reads what ip -json prints, in the declared fields, in the same order, with no ip process', async () => {
    for (const ns of [host, pod]) {
      for (const d of dumps) {
        if (ns === pod && 'dev' in d) continue;
        if (d.kind === 'route-get' && !(await ip.dump(d, { netns: ns.path }).then(() => true, () => false))) {
          // Unreachable here (no default route in this netns): both fail alike.
          await assert.rejects(kernel.dump(d, { netns: ns.path }), /unreachable/i, `${ns.name} ${JSON.stringify(d)}`);
          continue;
        }
        spawned.length = 0;
        const viaRtnetlink = await kernel.dump<Record<string, unknown>>(d, { netns: ns.path });
        assert.deepEqual(spawned, [], `${JSON.stringify(d)} started a process`);
        const viaIp = await ip.dump<Record<string, unknown>>(d, { netns: ns.path });
        assert.deepEqual(viaRtnetlink, project(d.kind, viaIp), `${ns.name} ${JSON.stringify(d)}`);
      }
    }
    // The cases are there (not two empty lists compared).
    const links = await kernel.dump<Record<string, unknown>>({ kind: 'links' }, { netns: host.path });
    assert.ok(links.some((l) => l['ifalias'] === 'COIL:default:ctr-1:eth0' && typeof l['link_netnsid'] === 'number'));
    assert.ok(links.some((l) => l['group'] === '1129269580'));
    assert.ok(links.some((l) => (l['flags'] as string[]).includes('NO-CARRIER')));
    const addrs = await kernel.dump<{ addr_info: Record<string, unknown>[] }>({ kind: 'addrs', dev: 'veth-n' }, { netns: host.path });
    assert.ok(addrs[0]!.addr_info.some((a) => a['tentative'] === true));
    assert.equal((await kernel.dump({ kind: 'routes', family: 6, table: 116 }, { netns: host.path })).length, 1);
    const rules = await kernel.dump<Record<string, unknown>>({ kind: 'rules', family: 4 }, { netns: host.path });
    assert.ok(rules.some((r) => r['dst'] === '169.254.0.0' && r['dstlen'] === 16) && rules.some((r) => r['iif'] === 'veth-a') && rules.some((r) => r['fwmask'] === '0xff00'));
    assert.deepEqual(await kernel.dump({ kind: 'route-get', address: '10.64.0.5' }, { netns: host.path }), [{ dst: '10.64.0.5', dev: 'veth-a', table: '116', prefsrc: '10.250.0.9', flags: [] }]);
  });

  test('fails as ip does: a missing link ENODEV, a missing netns ENOENT', async () => {
    for (const d of [{ kind: 'links', dev: 'nosuch0' }, { kind: 'addrs', dev: 'nosuch0' }, { kind: 'routes', family: 4, dev: 'nosuch0' }] as RtDump[]) {
      for (const reader of [kernel, ip]) {
        await assert.rejects(reader.dump(d, { netns: host.path }), (e: unknown) => isNetlinkErrno(e, 'ENODEV'), JSON.stringify(d));
      }
    }
    for (const reader of [kernel, ip]) {
      await assert.rejects(reader.dump({ kind: 'links' }, { netns: '/run/netns/coiltest-missing-netns' }), (e: unknown) => isNetlinkErrno(e, 'ENOENT'));
    }
  });

  test('without a usable backend, reads go to ip -json', async () => {
    const fallback = new NetlinkExecutor({ rtnetlink: new NetlinkAgent({ runtimePath: '/nonexistent/coil' }), ip: new IpRunner({ spawner: counting }) });
    spawned.length = 0;
    const links = await fallback.dump({ kind: 'links', dev: 'veth-a' }, { netns: host.path });
    assert.equal(spawned.length, 1);
    assert.equal(links.length, 1);
  });
});
