import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { probeFeatures } from './features.js';
import { FALLBACK_RENAMES, FLOW_DEVICE, ensureFouPeer, fouIpproto, fouPeerLinkName, fouPeerRequest, initFou, isFouPeerLinkName, readFouPeers, type FouPeer } from './fou.js';
import { IpRunner } from './iproute2/ip-runner.js';
import { formatRequest } from './iproute2/rt-format.js';
import { NetlinkAgent } from './netlink-agent.js';
import { NetlinkExecutor } from './netlink-executor.js';
import { NetlinkError } from './netlink-error.js';
import { rt, type FouPortEntry, type RtRequest } from './rt-request.js';

const fouPeerAddLine = (p: FouPeer): string[] => formatRequest(fouPeerRequest(p));
import { TestNetnsSet, netnsSkipReason, type TestNetns } from '../../test/netns/test-netns.js';
import { kernelLacks, prerequisite } from '../../test/support/prerequisite.js';
import { SpawnCounter } from '../../test/support/spawn-count.js';

describe('FoU builders', () => {
  test('IPv4 peer links are named after the address bytes, as Coil names them', () => {
    assert.equal(fouPeerLinkName('10.68.0.114'), 'fou4_0a440072');
  });

  test('IPv6 peer links use the first 4 bytes of SHA-1 over the 16 address bytes', () => {
    const name = fouPeerLinkName('fd02::1');
    assert.match(name, /^fou6_[0-9a-f]{8}$/);
    assert.equal(fouPeerLinkName('FD02:0::1'), name);
    assert.ok(isFouPeerLinkName(name) && !isFouPeerLinkName('fou4_zz') && !isFouPeerLinkName('eth0'));
  });

  test('an IPv4 peer is ipip with ttl 225, encap fou, fixed or auto source port', () => {
    assert.deepEqual(fouPeerAddLine({ remote: '10.0.0.100', local: '10.0.0.1', port: 5555, sourcePort: 5555 }),
      ['link', 'add', 'name', 'fou4_0a000064', 'type', 'ipip', 'remote', '10.0.0.100', 'local', '10.0.0.1', 'ttl', '225',
        'encap', 'fou', 'encap-sport', '5555', 'encap-dport', '5555']);
    assert.ok(fouPeerAddLine({ remote: '10.0.0.100', local: '10.0.0.1', port: 5555, sourcePort: 'auto' }).join(' ').includes('encap-sport auto'));
  });

  test('an IPv6 peer is ip6tnl ip6ip6 without the encapsulation-limit option', () => {
    const line = fouPeerAddLine({ remote: 'fd00::100', local: 'fd00::1', port: 5555, sourcePort: 'auto', mtuBytes: 1452 }).join(' ');
    assert.match(line, /type ip6tnl mode ip6ip6 encaplimit none remote fd00::100 local fd00::1 ttl 225 encap fou encap-sport auto encap-dport 5555/);
    assert.match(line, /mtu 1452/);
  });

  test('a peer whose addresses differ in family is refused', () => {
    assert.throws(() => fouPeerAddLine({ remote: 'fd00::1', local: '10.0.0.1', port: 5555, sourcePort: 5555 }), TypeError);
  });

  test('receive ports: ipproto 4 for IPv4, ipproto 41 -6 for IPv6 (the fallback\'s lines of the typed requests)', () => {
    const port = (family: 4 | 6) => formatRequest(rt.fouPortAdd({ family, port: 5555, ipproto: fouIpproto(family) }));
    assert.deepEqual(port(4), ['fou', 'add', 'port', '5555', 'ipproto', '4']);
    assert.deepEqual(port(6), ['fou', 'add', 'port', '5555', 'ipproto', '41', '-6']);
    assert.deepEqual(formatRequest(rt.linkAddExternal(FLOW_DEVICE[6], 6)), ['link', 'add', 'name', 'coil_ipip6', 'type', 'ip6tnl', 'external']);
    assert.deepEqual(formatRequest(rt.linkSet('tunl0', { name: 'coil_tunl' })), ['link', 'set', 'dev', 'tunl0', 'name', 'coil_tunl']);
  });
});

describe('FoU in a real network namespace', { skip: prerequisite(netnsSkipReason()) }, () => {
  const ip = new IpRunner();
  const netns = new TestNetnsSet({ ip });
  let ns: TestNetns;
  let skip: string | undefined;
  before(async () => {
    const f = await probeFeatures(ip);
    const missing = (['fou', 'ipip', 'ip6tnl'] as const).filter((k) => !f[k]);
    skip = kernelLacks(missing, 'test/netns/egress-fou-vm.test.ts');
    ns = await netns.create('fou');
  });
  after(() => netns.cleanup());

  test('initFou is idempotent and creates the flow-based devices; peers are recreated when the source port changes', async (t) => {
    if (skip) return t.skip(skip);
    await ip.batch([['link', 'add', 'veth-a', 'type', 'veth', 'peer', 'name', 'veth-b'], ['addr', 'add', '10.9.0.1/24', 'dev', 'veth-a'], ['link', 'set', 'veth-a', 'up']], { netns: ns.path });
    for (let i = 0; i < 2; i++) await initFou({ kernel: ip, ip }, { netns: ns.path, port: 5555, families: [4], modprobePath: null });
    const links = await ip.json<{ ifname: string; flags: string[] }[]>(['link', 'show'], { netns: ns.path });
    assert.ok(links.some((l) => l.ifname === FLOW_DEVICE[4] && l.flags.includes('UP')));
    const peer = { remote: '10.9.0.2', local: '10.9.0.1', port: 5555, sourcePort: 5555 as const };
    assert.deepEqual(await ensureFouPeer(ip, peer, await readFouPeers(ip, { netns: ns.path }), { netns: ns.path }), { name: 'fou4_0a090002', created: true });
    assert.equal((await ensureFouPeer(ip, peer, await readFouPeers(ip, { netns: ns.path }), { netns: ns.path })).created, false);
    const auto = { ...peer, sourcePort: 'auto' as const };
    assert.equal((await ensureFouPeer(ip, auto, await readFouPeers(ip, { netns: ns.path }), { netns: ns.path })).created, true);
    const [read] = await readFouPeers(ip, { netns: ns.path });
    assert.deepEqual({ ...read, isUp: undefined }, { name: 'fou4_0a090002', family: 4, remote: '10.9.0.2', local: '10.9.0.1', sourcePort: 0, isUp: undefined });
  });

  // The typed request a tunnel's move sends through rtnetlink (EgressClient.retarget) must make
  // the link `ip` makes of fouPeerAddLine, attribute for attribute (iproute2's link_iptnl.c and
  // link_ip6tnl.c defaults included); and where the kernel cannot make it, fail as clearly.
  test('a FoU peer link and route replace by rtnetlink (the netlink agent) equal what ip makes of the same requests, v4 and v6; refused alike without FoU', async (t) => {
    const agent = new NetlinkAgent();
    if (!agent.isUsable) return t.skip(prerequisite(`${agent.runtimePath} or ${agent.scriptPath} missing: run hack/build-cni.sh`));
    const viaAgent = new NetlinkExecutor({ rtnetlink: agent, ip });
    const [a, b] = [await netns.create('fou-ip'), await netns.create('fou-rt')];
    try {
      const peers: FouPeer[] = [
        { remote: '10.9.0.2', local: '10.9.0.1', port: 5555, sourcePort: 5555 },
        { remote: '10.9.0.3', local: '10.9.0.1', port: 5555, sourcePort: 'auto', mtuBytes: 1472 },
        { remote: 'fd09::2', local: 'fd09::1', port: 5555, sourcePort: 'auto', mtuBytes: 1452 },
        { remote: 'fd09::3', local: 'fd09::1', port: 6000, sourcePort: 6001 },
      ];
      const requests: RtRequest[] = [
        ...peers.flatMap((p) => [fouPeerRequest(p), rt.linkSet(fouPeerLinkName(p.remote), { up: true })]),
        rt.routeReplace({ dst: '198.51.100.0/24', dev: fouPeerLinkName('10.9.0.2'), protocol: 30, table: 118 }),
        // replaced in place, as a tunnel's move does
        rt.routeReplace({ dst: '198.51.100.0/24', dev: fouPeerLinkName('10.9.0.3'), protocol: 30, table: 118 }),
        rt.routeReplace({ dst: '172.20.0.0/16', dev: fouPeerLinkName('10.9.0.2'), protocol: 30, table: 117 }),
        rt.routeReplace({ dst: '2001:db8::/32', dev: fouPeerLinkName('fd09::2'), protocol: 30, table: 118 }),
        rt.routeReplace({ dst: 'fd10::/64', dev: fouPeerLinkName('fd09::2'), protocol: 30, table: 117 }),
        rt.linkDel(fouPeerLinkName('fd09::3')),
      ];
      if (skip) {
        // No FoU, ipip or ip6tnl here: both paths fail at the link's request, with the kernel's words.
        const errs = [];
        for (const [x, ns] of [[ip, a], [viaAgent, b]] as const) {
          const err = await x.apply(requests, { netns: ns.path }).then(() => undefined, (e: unknown) => e);
          assert.ok(err instanceof NetlinkError, String(err));
          assert.match(err.message, /link add name fou4_0a090002 type ipip remote 10\.9\.0\.2 local 10\.9\.0\.1 ttl 225 encap fou encap-sport 5555 encap-dport 5555/);
          errs.push({ line: err.failedRequest, errno: err.errno });
        }
        assert.deepEqual(errs[1], errs[0]);
        assert.equal(errs[1]!.line, 1);
        return;
      }
      await ip.apply(requests, { netns: a.path });
      await viaAgent.apply(requests, { netns: b.path });
      // What differs by nature: indexes, state timers, and the random permanent address the
      // kernel gives each ip6tnl device (seen differing between the two namespaces in the VM).
      const strip = (x: unknown): unknown => JSON.parse(JSON.stringify(x, (k, v: unknown) => (['ifindex', 'link_index', 'operstate', 'stats64', 'permaddr'].includes(k) ? undefined : v)));
      const state = async (ns: TestNetns) => ({
        links: strip(await ip.json(['-d', 'link', 'show'], { netns: ns.path })),
        routes: strip(await Promise.all(['-4', '-6'].flatMap((f) => ['117', '118'].map((tb) => ip.json([f, 'route', 'show', 'table', tb], { netns: ns.path }))))),
      });
      const [fromIp, fromAgent] = [await state(a), await state(b)];
      assert.deepEqual(fromAgent, fromIp);
      assert.equal((await readFouPeers(ip, { netns: b.path })).length, 3);
      assert.match(JSON.stringify(fromAgent.routes), /"dev":"fou4_0a090003"/);
    } finally {
      agent.stop();
    }
  });

  // initFou and the peer-link reads through the netlink agent (genetlink `fou` for the ports,
  // rtnetlink for the flow devices, the fallback devices' renames and the link dump) must leave
  // and read the kernel as `ip` does, and start no `ip` process; without FoU both fail alike.
  test('initFou, readFouPeers and ensureFouPeer by rtnetlink and genetlink (the netlink agent) equal ip\'s, start no ip; refused alike without FoU', async (t) => {
    const agent = new NetlinkAgent();
    if (!agent.isUsable) return t.skip(prerequisite(`${agent.runtimePath} or ${agent.scriptPath} missing: run hack/build-cni.sh`));
    const spawns = new SpawnCounter();
    const viaAgent = new NetlinkExecutor({ rtnetlink: agent, ip: spawns.ip });
    const [a, b] = [await netns.create('init-ip'), await netns.create('init-rt')];
    try {
      const init = (kernel: typeof ip | NetlinkExecutor, ns: TestNetns) => initFou({ kernel, ip: kernel === ip ? ip : viaAgent.ip },
        { netns: ns.path, port: 5555, families: [4, 6], modprobePath: null });
      if (skip) {
        // No FoU here: the receive ports' read fails on both paths, naming the `fou` family.
        for (const [k, ns] of [[ip, a], [viaAgent, b]] as const) {
          const err = await init(k, ns).then(() => undefined, (e: unknown) => e);
          assert.ok(err instanceof NetlinkError, String(err));
          assert.match(err.message, /fou|talking to the kernel/i);
        }
        assert.deepEqual(spawns.of('ip'), []);
        return;
      }
      for (const ns of [a, b]) {
        await ip.batch([['link', 'add', 'veth-a', 'type', 'veth', 'peer', 'name', 'veth-b'], ['addr', 'add', '10.9.0.1/24', 'dev', 'veth-a'],
          ['addr', 'add', 'fd09::1/64', 'dev', 'veth-a', 'nodad'], ['link', 'set', 'veth-a', 'up']], { netns: ns.path });
      }
      // The kernel's fallback devices appear in every netns once ipip/ip6_tunnel are loaded.
      for (let i = 0; i < 2; i++) {
        await init(ip, a);
        await init(viaAgent, b);
      }
      const peers: FouPeer[] = [
        { remote: '10.9.0.2', local: '10.9.0.1', port: 5555, sourcePort: 5555 },
        { remote: 'fd09::2', local: 'fd09::1', port: 5555, sourcePort: 'auto', mtuBytes: 1452 },
      ];
      for (const p of peers) {
        await ensureFouPeer(ip, p, await readFouPeers(ip, { netns: a.path }), { netns: a.path });
        await ensureFouPeer(viaAgent, p, await readFouPeers(viaAgent, { netns: b.path }), { netns: b.path });
      }
      const strip = (x: unknown): unknown => JSON.parse(JSON.stringify(x, (k, v: unknown) => (['ifindex', 'link_index', 'operstate', 'stats64', 'permaddr', 'address', 'broadcast', 'addr_info'].includes(k) ? undefined : v)));
      const state = async (ns: TestNetns) => ({
        ports: await ip.json<FouPortEntry[]>(['fou', 'show'], { netns: ns.path }),
        links: strip(await ip.json(['-d', 'link', 'show'], { netns: ns.path })),
      });
      const [fromIp, fromAgent] = [await state(a), await state(b)];
      assert.deepEqual(fromAgent, fromIp);
      assert.deepEqual(fromIp.ports.map((p) => [p.port, p.family]).sort(), [[5555, 'inet'], [5555, 'inet6']]);
      const names = (fromIp.links as { ifname: string }[]).map((l) => l.ifname);
      for (const [from, to] of FALLBACK_RENAMES) assert.ok(!names.includes(from) && names.includes(to), `${from} renamed ${to}: ${names.join(' ')}`);
      // The reads: the genetlink port dump and the link dump give what ip -json gives.
      assert.deepEqual(await viaAgent.dump({ kind: 'fou-ports' }, { netns: b.path }), fromAgent.ports);
      assert.deepEqual(await readFouPeers(viaAgent, { netns: b.path }), await readFouPeers(ip, { netns: b.path }));
      assert.deepEqual((await readFouPeers(viaAgent, { netns: b.path })).map((l) => [l.name, l.remote, l.local, l.sourcePort]),
        [['fou4_0a090002', '10.9.0.2', '10.9.0.1', 5555], [fouPeerLinkName('fd09::2'), 'fd09::2', 'fd09::1', 0]]);
      assert.deepEqual(spawns.of('ip'), [], 'no ip process on the typed path');
    } finally {
      agent.stop();
    }
  });
});
