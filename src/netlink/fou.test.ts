import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { probeFeatures } from './features.js';
import { FLOW_DEVICE, ensureFouPeer, fouPeerAddLine, fouPeerLinkName, fouPortLine, initFou, isFouPeerLinkName, parseFouShow, readFouPeers } from './fou.js';
import { IpRunner } from './ip-runner.js';
import { TestNetnsSet, netnsSkipReason, type TestNetns } from '../../test/netns/test-netns.js';
import { prerequisite } from '../../test/support/prerequisite.js';

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

  test('receive ports: ipproto 4 for IPv4, ipproto 41 -6 for IPv6; ip fou show is parsed back', () => {
    assert.deepEqual(fouPortLine(5555, 4), ['fou', 'add', 'port', '5555', 'ipproto', '4']);
    assert.deepEqual(fouPortLine(5555, 6), ['fou', 'add', 'port', '5555', 'ipproto', '41', '-6']);
    assert.deepEqual(parseFouShow('port 5555 ipproto 4\nport 5555 ipproto 41 -6\n'), [{ port: 5555, family: 4 }, { port: 5555, family: 6 }]);
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
    skip = missing.length > 0 ? `this kernel lacks ${missing.join(', ')} (FoU tunnels need them; the VM test covers them)` : undefined;
    ns = await netns.create('fou');
  });
  after(() => netns.cleanup());

  test('initFou is idempotent and creates the flow-based devices; peers are recreated when the source port changes', async (t) => {
    if (skip) return t.skip(skip);
    await ip.batch([['link', 'add', 'veth-a', 'type', 'veth', 'peer', 'name', 'veth-b'], ['addr', 'add', '10.9.0.1/24', 'dev', 'veth-a'], ['link', 'set', 'veth-a', 'up']], { netns: ns.path });
    for (let i = 0; i < 2; i++) await initFou(ip, { netns: ns.path, port: 5555, families: [4], modprobePath: null });
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
});
