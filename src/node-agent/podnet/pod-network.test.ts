// Real-netns tests of RtnetlinkPodNetwork: a "host" netns stands in for the node, so the machine's
// own routing is never touched. Needs root; skipped with the reason otherwise.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readAddrs } from '../../netlink/addr.js';
import { IpRunner } from '../../netlink/iproute2/ip-runner.js';
import { NetlinkAgent } from '../../netlink/netlink-agent.js';
import { NetlinkExecutor } from '../../netlink/netlink-executor.js';
import { readLinks } from '../../netlink/link.js';
import { readRoutes } from '../../netlink/route.js';
import { readRules } from '../../netlink/rule.js';
import { readSysctl, writeSysctl } from '../../netlink/sysctl.js';
import { TestNetnsSet, netnsSkipReason, type TestNetns } from '../../../test/netns/test-netns.js';
import { RtnetlinkPodNetwork } from './pod-network-rtnetlink.js';
import { PodNetworkError, hostVethName, type PodSetupOptions } from './pod-network.js';
import { prerequisite } from '../../../test/support/prerequisite.js';

const NODE_V4 = '192.168.50.1';
const NODE_V6 = 'fd50::1';

// Both ways coild applies the wiring: `ip -batch` processes, and the netlink agent (coild's default).
const agent = new NetlinkAgent();
for (const variant of ['ip processes', 'netlink agent'] as const) {
  const skip = prerequisite(netnsSkipReason() ?? (variant === 'netlink agent' && !agent.isUsable ? 'netlink agent not built: run hack/build-cni.sh' : undefined));
  describe(`RtnetlinkPodNetwork in real network namespaces (${variant})`, { skip }, () => {
    const ip = new IpRunner();
    const kernel = new NetlinkExecutor({ ip, ...(variant === 'netlink agent' ? { rtnetlink: agent } : {}) });
    const netns = new TestNetnsSet({ ip });
    let host: TestNetns;
    let pn: RtnetlinkPodNetwork;
    let seq = 0;

    /** A fresh pod netns and a unique container id. */
    const newPod = async (): Promise<{ ns: TestNetns; containerId: string }> =>
      ({ ns: await netns.create('pod'), containerId: `ctr${process.pid}x${++seq}` });
    const hostRoutes = async (family: 4 | 6) => readRoutes(ip, { netns: host.path, family, table: 116 });
    const hostVeths = async () => (await readLinks(ip, { netns: host.path })).filter((l) => l.linkinfo?.info_kind === 'veth');
    // One reply within 5 s, probing once a second (-w): right after a veth comes up the kernel
    // may drop the first packet (the carrier change is applied by linkwatch, deferred up to 1 s,
    // longer under load), so a single probe (-c1 -W1) failed ≈ 1 in 20 at load 15 on two bare
    // veth ends (2026-11-25). -w still fails a pod that never becomes reachable.
    const ping = (from: TestNetns, to: string) => ip.exec(['ping', '-c1', '-w5', to], { netns: from.path });

    before(async () => {
      host = await netns.create('host');
      pn = new RtnetlinkPodNetwork({ kernel, hostNetns: host.path });
      await pn.init();
    });
    after(async () => {
      agent.stop();
      await netns.cleanup();
    });

    test('init enables forwarding and adds "prio 2000 lookup 116" for IPv4 and IPv6', async () => {
      assert.equal(await readSysctl(ip, 'net.ipv4.ip_forward', { netns: host.path }), '1');
      assert.equal(await readSysctl(ip, 'net.ipv6.conf.all.forwarding', { netns: host.path }), '1');
      for (const family of [4, 6] as const) {
        const rules = await readRules(ip, { netns: host.path, family });
        assert.deepEqual(rules.filter((r) => r.priority === 2000).map((r) => r.table), ['116'], `IPv${family}`);
      }
    });

    if (variant === 'netlink agent') test('setup reaches the netlink agent in one request per pod (host side and pod side together)', async () => {
      const original = agent.batches.bind(agent);
      let requests = 0;
      agent.batches = (list) => { requests++; return original(list); };
      try {
        const { ns, containerId } = await newPod();
        await pn.setup(ns.path, { containerId, ifname: 'eth0', pool: 'default', ipv4: '10.50.0.250', hostIPv4: NODE_V4 });
        assert.equal(requests, 1, 'host side and pod side in one round trip');
        await pn.destroy(containerId, 'eth0');
      } finally {
        agent.batches = original;
      }
    });

    test('init run again adds no second rule', async () => {
      const res = await pn.init();
      assert.deepEqual(res.addedRuleFamilies, []);
    });

    test('IPv4-only setup: pod has the /32, a link route to the node IP and default via it; host routes it in table 116', async () => {
      const { ns, containerId } = await newPod();
      const res = await pn.setup(ns.path, { containerId, ifname: 'eth0', pool: 'default', ipv4: '10.50.0.2', hostIPv4: NODE_V4 });
      assert.deepEqual(res.ips, [{ address: '10.50.0.2/32', gateway: NODE_V4, interface: 0 }]);
      const [eth0] = await readAddrs(ip, { netns: ns.path, dev: 'eth0' });
      assert.deepEqual(eth0?.addr_info.filter((a) => a.family === 'inet').map((a) => `${a.local}/${a.prefixlen}`), ['10.50.0.2/32']);
      const podRoutes = await readRoutes(ip, { netns: ns.path, family: 4 });
      assert.ok(podRoutes.some((r) => r.dst === NODE_V4 && r.dev === 'eth0' && r.scope === 'link'));
      assert.ok(podRoutes.some((r) => r.dst === 'default' && r.gateway === NODE_V4 && r.dev === 'eth0'));
      const hr = (await hostRoutes(4)).find((r) => r.dst === '10.50.0.2');
      assert.deepEqual([hr?.dev, hr?.protocol, hr?.scope], [res.hostIfname, '30', 'link']);
      const [veth] = await readAddrs(ip, { netns: host.path, dev: res.hostIfname });
      assert.ok(veth?.addr_info.some((a) => a.local === NODE_V4 && a.prefixlen === 32), 'node IPv4 /32 on the host veth');
    });

    test('IPv6-only setup: pod has the /128 and default via fe80::1; host routes it in table 116', async () => {
      const { ns, containerId } = await newPod();
      const res = await pn.setup(ns.path, { containerId, ifname: 'eth0', pool: 'v6', ipv6: 'fd00:50::2' });
      assert.deepEqual(res.ips, [{ address: 'fd00:50::2/128', gateway: 'fe80::1', interface: 0 }]);
      const [eth0] = await readAddrs(ip, { netns: ns.path, dev: 'eth0' });
      assert.ok(eth0?.addr_info.some((a) => a.local === 'fd00:50::2' && a.prefixlen === 128 && !a.tentative));
      assert.ok(!eth0?.addr_info.some((a) => a.family === 'inet'), 'no IPv4 address');
      const podRoutes = await readRoutes(ip, { netns: ns.path, family: 6 });
      assert.ok(podRoutes.some((r) => r.dst === 'default' && r.gateway === 'fe80::1' && r.dev === 'eth0'));
      const hr = (await hostRoutes(6)).find((r) => r.dst === 'fd00:50::2');
      assert.deepEqual([hr?.dev, hr?.protocol], [res.hostIfname, '30']);
    });

    test('dual-stack setup: result interfaces and MACs match the kernel', async () => {
      const { ns, containerId } = await newPod();
      const res = await pn.setup(ns.path, {
        containerId, ifname: 'eth0', pool: 'default', ipv4: '10.50.0.3', ipv6: 'fd00:50::3', hostIPv4: NODE_V4, hostIPv6: NODE_V6,
      });
      assert.equal(res.hostIfname, hostVethName(containerId, 'eth0'));
      assert.equal(res.hostIfname.length, 15);
      const [pod] = await readLinks(ip, { netns: ns.path, dev: 'eth0' });
      const [hostLink] = await readLinks(ip, { netns: host.path, dev: res.hostIfname });
      assert.deepEqual(res.interfaces, [
        { name: 'eth0', mac: pod?.address, sandbox: ns.path },
        { name: res.hostIfname, mac: hostLink?.address },
      ]);
      assert.equal(hostLink?.ifalias, `COIL:default:${containerId}:eth0`);
      assert.deepEqual(res.ips.map((i) => i.address), ['10.50.0.3/32', 'fd00:50::3/128']);
      const [veth] = await readAddrs(ip, { netns: host.path, dev: res.hostIfname });
      assert.ok(veth?.addr_info.some((a) => a.local === NODE_V6 && a.prefixlen === 128), 'node IPv6 /128 on the host veth');
      assert.ok(veth?.addr_info.some((a) => a.local === 'fe80::1' && !a.tentative), 'gateway link-local usable at once');
    });

    test('every veth end gets its own locally administered unicast MAC', async () => {
      const macs: string[] = [];
      for (let i = 0; i < 3; i++) {
        const { ns, containerId } = await newPod();
        const res = await pn.setup(ns.path, { containerId, ifname: 'eth0', pool: 'default', ipv4: `10.50.0.${20 + i}`, hostIPv4: NODE_V4 });
        macs.push(...res.interfaces.map((x) => x.mac));
      }
      assert.equal(new Set(macs).size, 6, macs.join(' '));
      for (const mac of macs) {
        assert.match(mac, /^([0-9a-f]{2}:){5}[0-9a-f]{2}$/);
        assert.equal(parseInt(mac.slice(0, 2), 16) & 0x03, 0x02, `${mac}: locally administered, unicast`);
      }
    });

    test('two pods on the node ping each other over IPv4 and IPv6', async () => {
      const a = await newPod();
      const b = await newPod();
      const opts = (n: number): Omit<PodSetupOptions, 'containerId'> =>
        ({ ifname: 'eth0', pool: 'default', ipv4: `10.50.1.${n}`, ipv6: `fd00:50:1::${n}`, hostIPv4: NODE_V4 });
      await pn.setup(a.ns.path, { containerId: a.containerId, ...opts(1) });
      await pn.setup(b.ns.path, { containerId: b.containerId, ...opts(2) });
      await ping(a.ns, '10.50.1.2');
      await ping(b.ns, '10.50.1.1');
      await ping(a.ns, 'fd00:50:1::2');
      await ping(b.ns, 'fd00:50:1::1');
    });

    test('destroy disconnects at once (routes gone, not listed, check fails) and a second destroy succeeds', async () => {
      const { ns, containerId } = await newPod();
      const res = await pn.setup(ns.path, { containerId, ifname: 'eth0', pool: 'default', ipv4: '10.50.0.4', ipv6: 'fd00:50::4', hostIPv4: NODE_V4 });
      await pn.destroy(containerId, 'eth0');
      assert.ok(!(await hostRoutes(4)).some((r) => r.dst === '10.50.0.4'));
      assert.ok(!(await hostRoutes(6)).some((r) => r.dst === 'fd00:50::4'));
      assert.ok(!(await pn.list()).some((e) => e.containerId === containerId));
      assert.deepEqual(await pn.check({ containerId, ifname: 'eth0' }), [`host veth ${res.hostIfname} not found`]);
      await pn.destroy(containerId, 'eth0');
    });

    test('destroyed veths are deleted on both sides by the reaper', async () => {
      const { ns, containerId } = await newPod();
      const res = await pn.setup(ns.path, { containerId, ifname: 'eth0', pool: 'default', ipv4: '10.50.0.12', hostIPv4: NODE_V4 });
      await pn.destroy(containerId, 'eth0');
      await pn.reap();
      assert.ok(!(await hostVeths()).some((l) => l.ifname === res.hostIfname));
      assert.deepEqual(await readLinks(ip, { netns: ns.path }).then((ls) => ls.map((l) => l.ifname)), ['lo']);
      await pn.destroy(containerId, 'eth0');
    });

    test('setup right after destroy of the same key succeeds before the reaper ran', async () => {
      const { ns, containerId } = await newPod();
      const o = { containerId, ifname: 'eth0', pool: 'default', ipv4: '10.50.0.13', hostIPv4: NODE_V4 };
      await pn.setup(ns.path, o);
      await pn.destroy(containerId, 'eth0');
      await pn.setup(ns.path, o);
      assert.deepEqual(await pn.check({ containerId, ifname: 'eth0', netnsPath: ns.path, ipv4: '10.50.0.13' }), []);
      await pn.reap();
      assert.deepEqual(await pn.check({ containerId, ifname: 'eth0', netnsPath: ns.path, ipv4: '10.50.0.13' }), [], 'the reaper spared the new veth');
    });

    test('destroy also removes a link that carries the alias under another name (Coil-made veth)', async () => {
      const { ns, containerId } = await newPod();
      await ip.batch([
        ['link', 'add', 'vethgo0', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns.path],
        ['link', 'set', 'dev', 'vethgo0', 'alias', `COIL:default:${containerId}:eth0`, 'up'],
      ], { netns: host.path });
      await pn.destroy(containerId, 'eth0');
      await pn.reap();
      assert.ok(!(await hostVeths()).some((l) => l.ifname === 'vethgo0'));
    });

    test('check passes on a set-up pod and reports a deleted veth', async () => {
      const { ns, containerId } = await newPod();
      const res = await pn.setup(ns.path, { containerId, ifname: 'eth0', pool: 'default', ipv4: '10.50.0.5', ipv6: 'fd00:50::5', hostIPv4: NODE_V4 });
      const expect = { containerId, ifname: 'eth0', netnsPath: ns.path, ipv4: '10.50.0.5', ipv6: 'fd00:50::5' };
      assert.deepEqual(await pn.check(expect), []);
      assert.deepEqual(await pn.check({ ...expect, ipv4: '10.50.0.99' }), [
        'no route to 10.50.0.99 via ' + res.hostIfname + ' in table 116', 'eth0 lacks address 10.50.0.99']);
      await ip.batch([['link', 'del', 'dev', res.hostIfname]], { netns: host.path });
      assert.deepEqual(await pn.check(expect), [`host veth ${res.hostIfname} not found`]);
    });

    test('check reports a pod netns that no longer exists', async () => {
      const { ns, containerId } = await newPod();
      await pn.setup(ns.path, { containerId, ifname: 'eth0', pool: 'default', ipv4: '10.50.0.14', hostIPv4: NODE_V4 });
      const gone = `${ns.path}-gone`;
      assert.deepEqual(await pn.check({ containerId, ifname: 'eth0', netnsPath: gone, ipv4: '10.50.0.14' }), [`eth0 not found in ${gone}`]);
    });

    test('setup with an invalid address fails before touching the kernel', async () => {
      const { ns, containerId } = await newPod();
      await assert.rejects(pn.setup(ns.path, { containerId, ifname: 'eth0', pool: 'default', ipv4: '10.50.0.300', hostIPv4: NODE_V4 }),
        (e: unknown) => e instanceof PodNetworkError && e.kind === 'invalid-argument' && /ipv4/.test(e.message));
      await assert.rejects(pn.setup(ns.path, { containerId, ifname: 'eth0', pool: 'default', ipv4: '10.50.0.6' }),
        (e: unknown) => e instanceof PodNetworkError && /hostIPv4/.test(e.message));
      assert.ok(!(await hostVeths()).some((l) => l.ifname === hostVethName(containerId, 'eth0')));
    });

    test('setup fails when ifname is taken in the pod netns and leaves nothing', async () => {
      const { ns, containerId } = await newPod();
      await ip.batch([['link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'other0']], { netns: ns.path });
      await assert.rejects(pn.setup(ns.path, { containerId, ifname: 'eth0', pool: 'default', ipv4: '10.50.0.7', hostIPv4: NODE_V4 }),
        (e: unknown) => e instanceof PodNetworkError && e.kind === 'kernel' && /already exists/.test(e.message));
      assert.ok(!(await hostVeths()).some((l) => l.ifname === hostVethName(containerId, 'eth0')));
      assert.ok(!(await hostRoutes(4)).some((r) => r.dst === '10.50.0.7'));
    });

    test('setup failing inside the pod (IPv6 disabled there) removes the host veth and its routes', async () => {
      const { ns, containerId } = await newPod();
      await writeSysctl(ip, 'net.ipv6.conf.default.disable_ipv6', '1', { netns: ns.path });
      await assert.rejects(pn.setup(ns.path, { containerId, ifname: 'eth0', pool: 'default', ipv4: '10.50.0.8', ipv6: 'fd00:50::8', hostIPv4: NODE_V4 }),
        (e: unknown) => e instanceof PodNetworkError && /pod side failed/.test(e.message));
      assert.ok(!(await hostVeths()).some((l) => l.ifname === hostVethName(containerId, 'eth0')));
      assert.ok(!(await hostRoutes(4)).some((r) => r.dst === '10.50.0.8'));
      assert.ok(!(await hostRoutes(6)).some((r) => r.dst === 'fd00:50::8'));
    });

    test('setup failing midway on the host (pod IP already routed) removes its veth and keeps the other pod', async () => {
      const a = await newPod();
      const b = await newPod();
      const ra = await pn.setup(a.ns.path, { containerId: a.containerId, ifname: 'eth0', pool: 'default', ipv4: '10.50.0.9', hostIPv4: NODE_V4 });
      await assert.rejects(pn.setup(b.ns.path, { containerId: b.containerId, ifname: 'eth0', pool: 'default', ipv4: '10.50.0.9', hostIPv4: NODE_V4 }),
        (e: unknown) => e instanceof PodNetworkError && /host side failed/.test(e.message));
      assert.ok(!(await hostVeths()).some((l) => l.ifname === hostVethName(b.containerId, 'eth0')));
      assert.deepEqual(await readLinks(ip, { netns: b.ns.path }).then((ls) => ls.map((l) => l.ifname)), ['lo']);
      assert.equal((await hostRoutes(4)).find((r) => r.dst === '10.50.0.9')?.dev, ra.hostIfname);
    });

    test('setup of a key already set up replaces the stale veth', async () => {
      const { ns, containerId } = await newPod();
      const o = { containerId, ifname: 'eth0', pool: 'default', ipv4: '10.50.0.10', hostIPv4: NODE_V4 };
      const first = await pn.setup(ns.path, o);
      const second = await pn.setup(ns.path, o);
      assert.equal(second.hostIfname, first.hostIfname);
      assert.equal((await hostVeths()).filter((l) => l.ifname === first.hostIfname).length, 1);
      const [pod] = await readLinks(ip, { netns: ns.path, dev: 'eth0' });
      assert.equal(pod?.address, second.interfaces[0].mac);
      assert.deepEqual(await pn.check({ containerId, ifname: 'eth0', netnsPath: ns.path, ipv4: '10.50.0.10' }), []);
    });

    test('setup applies the given MTU to both ends', async () => {
      const { ns, containerId } = await newPod();
      const res = await pn.setup(ns.path, { containerId, ifname: 'eth0', pool: 'default', ipv4: '10.50.0.11', hostIPv4: NODE_V4, mtuBytes: 1400 });
      assert.equal((await readLinks(ip, { netns: ns.path, dev: 'eth0' }))[0]?.mtu, 1400);
      assert.equal((await readLinks(ip, { netns: host.path, dev: res.hostIfname }))[0]?.mtu, 1400);
    });

    test('20 concurrent setups and destroys on one node all succeed', async () => {
      const pods = await Promise.all(Array.from({ length: 20 }, () => newPod()));
      const results = await Promise.all(pods.map((p, i) => pn.setup(p.ns.path, {
        containerId: p.containerId, ifname: 'eth0', pool: 'default', ipv4: `10.50.3.${i + 1}`, ipv6: `fd00:50:3::${i + 1}`, hostIPv4: NODE_V4,
      })));
      assert.equal(new Set(results.map((r) => r.hostIfname)).size, 20);
      const checks = await Promise.all(pods.map((p, i) => pn.check({ containerId: p.containerId, ifname: 'eth0', netnsPath: p.ns.path, ipv4: `10.50.3.${i + 1}`, ipv6: `fd00:50:3::${i + 1}` })));
      assert.deepEqual(checks.flat(), []);
      await ping(pods[0]!.ns, '10.50.3.20');
      await Promise.all(pods.map((p) => pn.destroy(p.containerId, 'eth0')));
      await pn.reap();
      const left = new Set((await hostVeths()).map((l) => l.ifname));
      assert.ok(results.every((r) => !left.has(r.hostIfname)));
    });

    test('list recovers pool, container id, ifname and IPs of every pod interface', async () => {
      const { ns, containerId } = await newPod();
      const res = await pn.setup(ns.path, { containerId, ifname: 'net1', pool: 'blue', ipv4: '10.50.2.1', ipv6: 'fd00:50:2::1', hostIPv4: NODE_V4 });
      const entries = await pn.list();
      const mine = entries.find((e) => e.containerId === containerId);
      assert.deepEqual({ ...mine, netnsId: undefined }, {
        pool: 'blue', containerId, ifname: 'net1', hostIfname: res.hostIfname, ipv4: '10.50.2.1', ipv6: 'fd00:50:2::1', netnsId: undefined,
      });
      assert.equal(typeof mine?.netnsId, 'number');
      await pn.reap();
      assert.equal(entries.length, (await hostVeths()).length, 'one entry per live coil veth');
    });

    test('a shared SNAT address routed via a pod (an Egress\'s active NAT pod, egress/snat-routes.ts) is not taken for the pod\'s own address', async () => {
      const { ns, containerId } = await newPod();
      await pn.setup(ns.path, { containerId, ifname: 'eth0', pool: 'default', ipv4: '10.50.5.1', ipv6: 'fd00:50:5::1', hostIPv4: NODE_V4 });
      // Lower than the pod's addresses, so the kernel's dump lists them first.
      await ip.batch([['route', 'add', '10.0.0.9/32', 'via', '10.50.5.1', 'proto', '30', 'table', '116'], ['route', 'add', '2001:db8::10/128', 'via', 'fd00:50:5::1', 'proto', '30', 'table', '116']], { netns: host.path });
      const want = { ipv4: '10.50.5.1', ipv6: 'fd00:50:5::1' };
      const listed = (await pn.list()).find((e) => e.containerId === containerId);
      assert.deepEqual({ ipv4: listed?.ipv4, ipv6: listed?.ipv6 }, want);
      const inspected = await pn.inspect(containerId, 'eth0');
      assert.deepEqual({ ipv4: inspected?.ipv4, ipv6: inspected?.ipv6 }, want);
    });

    test('deinit (uninstall) removes the pod-table rule and every table-116 route, both families; a second deinit is a no-op', async () => {
      const { ns, containerId } = await newPod();
      await pn.setup(ns.path, { containerId, ifname: 'eth0', pool: 'default', ipv4: '10.50.3.1', ipv6: 'fd00:50:3::1', hostIPv4: NODE_V4 });
      assert.ok((await hostRoutes(4)).length > 0 && (await hostRoutes(6)).length > 0);
      await pn.deinit();
      await pn.deinit();
      for (const family of [4, 6] as const) {
        assert.deepEqual((await readRules(ip, { netns: host.path, family })).filter((r) => r.priority === 2000), [], `IPv${family} rule`);
        assert.deepEqual(await hostRoutes(family), [], `IPv${family} table 116`);
      }
      await pn.init(); // as it was, for any test after this one
    });
  });
}
