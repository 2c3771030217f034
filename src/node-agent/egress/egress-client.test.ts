import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { IpRunner } from '../../netlink/iproute2/ip-runner.js';
import { formatRequest } from '../../netlink/iproute2/rt-format.js';
import type { RtApplier, RtReader } from '../../netlink/rt-request.js';
import { parseRoutePrefix } from '../../netlink/cidr.js';
import { fouPeerLinkName, fouPeerRequest } from '../../netlink/fou.js';
import { EgressClient, FOU_OVERHEAD_BYTES, clientRules, isNarrowDestination, pinnedLinks, planEgressClient, retargetRequests } from './egress-client.js';

describe('egress client plan', () => {
  test('IPv4 rules are 1800 link-local, 1900 → 117, 2000–2002 private → main, 2100 → 118', () => {
    assert.deepEqual(clientRules(4).map((r) => `${r.priority} ${r.to ?? 'all'} ${r.table}`),
      ['1800 169.254.0.0/16 main', '1900 all 117', '2000 10.0.0.0/8 main', '2001 172.16.0.0/12 main', '2002 192.168.0.0/16 main', '2100 all 118']);
  });

  test('IPv6 rules use fe80::/10 and one private range fc00::/7 at 2000', () => {
    assert.deepEqual(clientRules(6).map((r) => `${r.priority} ${r.to ?? 'all'} ${r.table}`),
      ['1800 fe80::/10 main', '1900 all 117', '2000 fc00::/7 main', '2100 all 118']);
  });

  test('private destinations are narrow (117), others wide (118)', () => {
    const narrow = (text: string) => isNarrowDestination(parseRoutePrefix(text));
    assert.ok(narrow('172.20.0.0/16') && narrow('192.168.10.0/24') && narrow('fd00:1::/64'));
    assert.ok(!narrow('0.0.0.0/0') && !narrow('8.0.0.0/7') && !narrow('::/0'));
  });

  test('each gateway gets a peer to its ClusterIP and routes of its own family only', () => {
    const plan = planEgressClient({
      podIps: ['10.100.0.5', 'fd00::5'], port: 5555, linkMtuBytes: 1500,
      gateways: [
        { egress: 'internet/nat', clusterIp: '10.68.0.114', destinations: ['0.0.0.0/0', '::/0'], isSourcePortAuto: false },
        { egress: 'domestic/nat', clusterIp: 'fd02::1', destinations: ['192.168.10.0/24', 'fd10::/64', '2001:db8::/32'], isSourcePortAuto: true },
      ],
    });
    assert.deepEqual(plan.families, [4, 6]);
    assert.deepEqual(plan.peers[0], { remote: '10.68.0.114', local: '10.100.0.5', port: 5555, sourcePort: 5555, mtuBytes: 1500 - FOU_OVERHEAD_BYTES[4], name: 'fou4_0a440072', family: 4 });
    assert.equal(plan.peers[1]!.sourcePort, 'auto');
    assert.equal(plan.peers[1]!.mtuBytes, 1452);
    assert.deepEqual(plan.routes[4], { 118: [{ dst: '0.0.0.0/0', dev: 'fou4_0a440072' }] });
    const v6dev = plan.peers[1]!.remote === 'fd02::1' ? plan.routes[6][117]![0]!.dev : '';
    assert.deepEqual(plan.routes[6], { 117: [{ dst: 'fd10::/64', dev: v6dev }], 118: [{ dst: '2001:db8::/32', dev: v6dev }] });
  });

  test('the plan reads each address once: its peers carry their link name, family and canonical addresses for every step after', () => {
    const plan = planEgressClient({ podIps: ['FD00:0::5'], port: 5555, gateways: [{ egress: 'a/b', clusterIp: 'FD02:0::1', destinations: ['FD10::/64'], isSourcePortAuto: false }] });
    const peer = plan.peers[0]!;
    assert.deepEqual({ remote: peer.remote, local: peer.local, name: peer.name, family: peer.family }, { remote: 'fd02::1', local: 'fd00::5', name: fouPeerLinkName('fd02::1'), family: 6 });
    assert.deepEqual(plan.routes[6], { 117: [{ dst: 'FD10::/64', dev: peer.name }] });
    assert.deepEqual(pinnedLinks(plan), { 4: [], 6: [peer.name] });
    assert.equal(formatRequest(fouPeerRequest(peer)).join(' ').includes('remote fd02::1 local fd00::5'), true);
  });

  test('a gateway of a family the pod lacks is skipped (Coil ErrIPFamilyMismatch); none left means no rules', () => {
    const plan = planEgressClient({ podIps: ['10.100.0.5'], port: 5555, gateways: [{ egress: 'a/b', clusterIp: 'fd02::1', destinations: ['::/0'], isSourcePortAuto: false }] });
    assert.deepEqual(plan, { peers: [], drains: [], rules: { 4: [], 6: [] }, routes: { 4: {}, 6: {} }, families: [] });
  });

  test('a chosen NAT pod is the peer link\'s remote (its name, its routes); one of another family is ignored', () => {
    const gw = { egress: 'internet/nat', clusterIp: '10.68.0.114', destinations: ['0.0.0.0/0'], isSourcePortAuto: false };
    const plan = planEgressClient({ podIps: ['10.100.0.5'], port: 5555, gateways: [{ ...gw, natPod: '10.64.0.7' }] });
    assert.equal(plan.peers[0]!.remote, '10.64.0.7');
    assert.deepEqual(plan.routes[4], { 118: [{ dst: '0.0.0.0/0', dev: 'fou4_0a400007' }] });
    assert.equal(planEgressClient({ podIps: ['10.100.0.5'], port: 5555, gateways: [{ ...gw, natPod: 'fd00::7' }] }).peers[0]!.remote, '10.68.0.114');
  });

  test('retarget moves a tunnel in one batch of typed requests to the kernel applier: new link, up, route replace, old link deleted; refuses other changes', async () => {
    const batches: string[][] = [];
    const kernel: RtApplier & RtReader = { apply: async (requests) => { batches.push(requests.map((r) => formatRequest(r).join(' '))); }, dump: async () => assert.fail('retarget read the kernel') };
    const ip = { batch: async () => assert.fail('retarget started an ip process'), apply: async () => assert.fail('retarget went to ip, not the kernel applier') } as unknown as IpRunner;
    const client = new EgressClient({ ip, kernel, port: 5555 });
    const gw = { egress: 'internet/nat', clusterIp: '10.68.0.114', destinations: ['0.0.0.0/0', '172.20.0.0/16'], isSourcePortAuto: true };
    const plan = (natPod?: string, destinations = gw.destinations) => planEgressClient({ podIps: ['10.100.0.5'], port: 5555, gateways: [{ ...gw, destinations, ...(natPod ? { natPod } : {}) }] });
    assert.equal(await client.retarget('/run/netns/p', plan('10.64.0.7'), plan('10.64.0.8')), true);
    assert.deepEqual(batches, [[
      'link add name fou4_0a400008 type ipip remote 10.64.0.8 local 10.100.0.5 ttl 225 encap fou encap-sport auto encap-dport 5555',
      'link set dev fou4_0a400008 up',
      'route replace 172.20.0.0/16 dev fou4_0a400008 proto 30 table 117',
      'route replace 0.0.0.0/0 dev fou4_0a400008 proto 30 table 118',
      'link del dev fou4_0a400007',
    ]]);
    assert.equal(await client.retarget('/run/netns/p', plan(), plan('10.64.0.8')), true, 'from the ClusterIP to a NAT pod');
    assert.equal(await client.retarget('/run/netns/p', plan('10.64.0.7'), plan('10.64.0.8', ['0.0.0.0/0'])), false, 'destinations changed');
    assert.equal(await client.retarget('/run/netns/p', plan('10.64.0.7'), plan('10.64.0.7')), true);
    assert.equal(batches.length, 2);
  });
  test('the routes of 117/118 and the rules 1800–2100 are synced with typed requests through the kernel applier, not ip', async () => {
    const dumps: string[] = [];
    const applied: string[][] = [];
    const kernel: RtApplier & RtReader = {
      apply: async (requests) => { applied.push(requests.map((r) => formatRequest(r).join(' '))); },
      dump: async <T>(d: { kind: string }) => { dumps.push(JSON.stringify(d)); return [] as T[]; },
    };
    const ipCalls: string[] = [];
    const ip = {
      json: async (argv: string[]) => { ipCalls.push(argv.join(' ')); return []; },
      batch: async (lines: string[][]) => { ipCalls.push(...lines.map((l) => l.join(' '))); return ''; },
    } as unknown as IpRunner;
    const plan = planEgressClient({ podIps: ['10.100.0.5'], port: 5555, gateways: [{ egress: 'internet/nat', clusterIp: '10.68.0.114', destinations: ['0.0.0.0/0', '172.20.0.0/16'], isSourcePortAuto: false }] });
    await new EgressClient({ ip, kernel, port: 5555 }).applyRouting('/run/netns/p', plan);
    assert.deepEqual(dumps, ['{"kind":"routes","family":4,"table":117}', '{"kind":"routes","family":4,"table":118}', '{"kind":"routes","family":6,"table":117}',
      '{"kind":"routes","family":6,"table":118}', '{"kind":"rules","family":4}', '{"kind":"rules","family":6}']);
    assert.deepEqual(applied, [
      ['link set dev fou4_0a440072 up', 'route replace 172.20.0.0/16 dev fou4_0a440072 proto 30 table 117'],
      ['link set dev fou4_0a440072 up', 'route replace 0.0.0.0/0 dev fou4_0a440072 proto 30 table 118'],
      ['rule add prio 1800 to 169.254.0.0/16 lookup 254', 'rule add prio 1900 lookup 117', 'rule add prio 2000 to 10.0.0.0/8 lookup 254',
        'rule add prio 2001 to 172.16.0.0/12 lookup 254', 'rule add prio 2002 to 192.168.0.0/16 lookup 254', 'rule add prio 2100 lookup 118'],
    ]);
    assert.deepEqual(ipCalls, [], 'ip was asked');
  });

  test('a draining NAT pod keeps a peer link with no route in 117/118; both links are pinned; one that is the tunnel, or of another family, is no drain', () => {
    const gw = { egress: 'internet/nat', clusterIp: '10.68.0.114', destinations: ['0.0.0.0/0'], isSourcePortAuto: false };
    const plan = planEgressClient({ podIps: ['10.100.0.5'], port: 5555, linkMtuBytes: 1500, gateways: [{ ...gw, natPod: '10.64.0.8', draining: ['10.64.0.7', '10.64.0.8', 'fd00::7'] }] });
    assert.deepEqual(plan.drains, [{ remote: '10.64.0.7', local: '10.100.0.5', port: 5555, sourcePort: 5555, mtuBytes: 1472, name: 'fou4_0a400007', family: 4 }]);
    assert.deepEqual(plan.routes[4], { 118: [{ dst: '0.0.0.0/0', dev: 'fou4_0a400008' }] });
    assert.deepEqual(pinnedLinks(plan), { 4: ['fou4_0a400008', 'fou4_0a400007'], 6: [] });
  });

  test('retarget at a drain\'s start makes the new link and keeps the old one; at its end deletes the old one only', () => {
    const gw = { egress: 'internet/nat', clusterIp: '10.68.0.114', destinations: ['0.0.0.0/0'], isSourcePortAuto: true };
    const plan = (natPod: string, draining: string[] = []) => planEgressClient({ podIps: ['10.100.0.5'], port: 5555, gateways: [{ ...gw, natPod, draining }] });
    const lines = (from: ReturnType<typeof plan>, to: ReturnType<typeof plan>) => retargetRequests(from, to)?.map((r) => formatRequest(r).join(' '));
    assert.deepEqual(lines(plan('10.64.0.7'), plan('10.64.0.8', ['10.64.0.7'])), [
      'link add name fou4_0a400008 type ipip remote 10.64.0.8 local 10.100.0.5 ttl 225 encap fou encap-sport auto encap-dport 5555',
      'link set dev fou4_0a400008 up',
      'route replace 0.0.0.0/0 dev fou4_0a400008 proto 30 table 118',
    ]);
    assert.deepEqual(lines(plan('10.64.0.8', ['10.64.0.7']), plan('10.64.0.8')), ['link del dev fou4_0a400007']);
    // The tunnel's new NAT pod lost during the drain: back to the draining one, whose link exists.
    assert.deepEqual(lines(plan('10.64.0.8', ['10.64.0.7']), plan('10.64.0.7')), [
      'route replace 0.0.0.0/0 dev fou4_0a400007 proto 30 table 118', 'link del dev fou4_0a400008']);
  });
});
