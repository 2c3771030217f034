/**
 * Per-flow draining of a client pod's egress tunnel (docs/egress-failover.md#draining) in real
 * network namespaces, with each netfilter backend (nftables; iptables through iptables-nft and
 * iptables-legacy). A client pod C has two peer links, one per NAT pod NA and NB, each NAT pod
 * masquerading to an external host X from an address of its own, so X's server sees which NAT pod
 * a connection came through. A long-lived TCP connection is opened through NA; then the tunnel
 * moves to NB with NA draining: the connection keeps going through NA, a new one goes through NB;
 * at the drain's end NA's link goes, and with it its rule, table and mark.
 *
 * This kernel has no FoU: the peer links are stand-ins, veth pairs carrying the peer links' names
 * (`fou4_<hex>`), whose far ends are the NAT pods' netns (proxy ARP answers for X there). What
 * they stand in for is the link only: the marks, rules and tables, and how the kernel routes by
 * them, are the real ones; the tunnel's move on real FoU links, and a real NAT pod's drain, run in
 * egress-failover-vm.test.ts. The pins' tables and rules and the client's routes and rules go
 * through a NetlinkExecutor with the netlink agent (rtnetlink, as in coild; `ip` when
 * hack/build-cni.sh has not run), and a second FlowPins on `ip` alone reads them back. Root only;
 * skipped with the reason otherwise.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { after, before, describe, test } from 'node:test';
import type { NetfilterBackend } from '../../src/api/v2/keys.js';
import { fouPeerLinkName } from '../../src/netlink/fou.js';
import { IpRunner, spawnProcess, type ProcessSpawner } from '../../src/netlink/iproute2/ip-runner.js';
import { NetlinkAgent } from '../../src/netlink/netlink-agent.js';
import { NetlinkExecutor } from '../../src/netlink/netlink-executor.js';
import { readIptablesRules, type IptablesCommands } from '../../src/netlink/netfilter/iptables.js';
import { writeSysctl } from '../../src/netlink/sysctl.js';
import { sleep } from '../../src/runtime/clock.js';
import { EgressClient, planEgressClient } from '../../src/node-agent/egress/egress-client.js';
import { FlowPins } from '../../src/node-agent/egress/flow-pins.js';
import { OriginatingOnly } from '../../src/node-agent/egress/originating-only.js';
import { peerSeenBy, wire } from './egress-peer.js';
import { prerequisite } from '../support/prerequisite.js';
import { TestNetnsSet, netnsSkipReason, type TestNetns } from './test-netns.js';

const VARIANTS: ReadonlyArray<{ name: string; backend: NetfilterBackend; iptables?: IptablesCommands }> = [
  { name: 'nftables', backend: 'nftables' },
  { name: 'iptables (iptables-nft)', backend: 'iptables', iptables: { 4: 'iptables-nft', 6: 'ip6tables-nft' } },
  { name: 'iptables (iptables-legacy)', backend: 'iptables', iptables: { 4: 'iptables-legacy', 6: 'ip6tables-legacy' } },
];

const NAT_A = '10.64.0.1';
const NAT_B = '10.64.0.2';
const LINK_A = fouPeerLinkName(NAT_A);
const LINK_B = fouPeerLinkName(NAT_B);
/** X's service address, and the addresses NA and NB masquerade to. */
const TARGET = '203.0.113.1';
const SEEN_A = '192.0.2.1';
const SEEN_B = '198.51.100.1';

const GATEWAY = { egress: 'internet/nat', clusterIp: '10.96.0.100', destinations: ['0.0.0.0/0'], isSourcePortAuto: false };
const plan = (natPod: string, draining: string[] = []) => planEgressClient({ podIps: ['10.100.0.5'], port: 5555, gateways: [{ ...GATEWAY, natPod, draining }] });

/** X's server: answers every chunk with the peer address it sees. */
const SERVER = `require('net').createServer((c)=>{c.on('data',()=>c.write(c.remoteAddress+'\\n'));c.on('error',()=>{})})
.listen(+process.argv[2],process.argv[1],()=>console.log('ready'));`;
/** A long-lived connection: a chunk every 50 ms; `dump` prints the answers seen and the error, if any. */
const STREAM = `const c=require('net').connect(+process.argv[2],process.argv[1]);const s={answers:0,last:'',err:''};let buf='';
c.on('connect',()=>setInterval(()=>c.write('x'),50));c.on('data',(b)=>{buf+=b;const l=buf.split('\\n');buf=l.pop();for(const x of l){s.answers++;s.last=x}});
c.on('error',(e)=>{s.err=e.code||String(e)});c.on('close',()=>{if(!s.err)s.err='closed'});
process.stdin.on('data',(d)=>{if(d.toString().includes('dump'))console.log(JSON.stringify(s))});`;

interface StreamState { answers: number; last: string; err: string }

class Stream {
  private readonly p: ChildProcess;
  private out = '';
  constructor(ns: TestNetns, port: number) {
    this.p = spawn('ip', ['netns', 'exec', ns.name, process.execPath, '-e', STREAM, TARGET, String(port)], { stdio: ['pipe', 'pipe', 'inherit'] });
    this.p.stdout!.on('data', (b: Buffer) => { this.out += b.toString(); });
  }
  async state(): Promise<StreamState> {
    const before = this.out.length;
    this.p.stdin!.write('dump\n');
    for (let i = 0; i < 200 && !this.out.slice(before).includes('\n'); i++) await sleep(10);
    return JSON.parse(this.out.slice(before).split('\n')[0]!) as StreamState;
  }
  /** Waits until the stream got `n` more answers (or failed). */
  async more(n: number): Promise<StreamState> {
    const start = (await this.state()).answers;
    for (let i = 0; i < 100; i++) {
      const s = await this.state();
      if (s.err || s.answers >= start + n) return s;
      await sleep(50);
    }
    return this.state();
  }
  stop(): void {
    this.p.kill();
  }
}

for (const variant of VARIANTS) describe(`per-flow egress drain: ${variant.name}`, { skip: prerequisite(netnsSkipReason()) }, () => {
  const ip = new IpRunner();
  const netns = new TestNetnsSet({ ip });
  const agent = new NetlinkAgent();
  /** The programs the client and its pins start, by name (nsenter's program when run in a netns). */
  const started: string[] = [];
  const counting: ProcessSpawner = (argv, input, t) => {
    const program = argv[0]?.endsWith('nsenter') ? argv[argv.indexOf('--') + 1] : argv[0];
    started.push(program?.split('/').pop() ?? '');
    return spawnProcess(argv, input, t);
  };
  const counted = new IpRunner({ spawner: counting });
  const kernel = new NetlinkExecutor({ ip: counted, rtnetlink: agent });
  const pins = new FlowPins({ ip: counted, kernel, backend: variant.backend, ...(variant.iptables ? { iptables: variant.iptables } : {}) });
  const client = new EgressClient({ ip: counted, kernel, port: 5555, modprobePath: null, flowPins: { enabled: true, applier: pins } });
  const servers: ChildProcess[] = [];
  let c: TestNetns;
  let x: TestNetns;
  let port = 9300;

  const rules = async (): Promise<string[]> =>
    (await ip.json<Array<{ priority: number; fwmark?: string; table: string }>>(['rule', 'show'], { netns: c.path, family: 4 }))
      .filter((r) => r.priority === 1700).map((r) => `1700 fwmark ${r.fwmark} lookup ${r.table}`);
  const table = async (id: number): Promise<string[]> =>
    (await ip.json<Array<{ dst: string; dev: string }>>(['route', 'show', 'table', String(id)], { netns: c.path, family: 4 }).catch(() => []))
      .map((r) => `${r.dst} dev ${r.dev}`);
  const marks = async (): Promise<string[]> => {
    if (variant.backend === 'iptables') {
      return (await readIptablesRules(ip, 'mangle', { family: 4, netns: c.path, commands: variant.iptables! })).map((r) => `-A ${r.chain} ${r.text}`);
    }
    const { stdout } = await ip.exec(['nft', 'list', 'ruleset', 'ip'], { netns: c.path });
    return stdout.split('\n').map((l) => l.trim()).filter((l) => l.includes('comment "coil-flow-pin'));
  };
  const serve = async (p: number): Promise<void> => {
    const srv = spawn('ip', ['netns', 'exec', x.name, process.execPath, '-e', SERVER, TARGET, String(p)], { stdio: ['ignore', 'pipe', 'inherit'] });
    servers.push(srv);
    await new Promise<void>((resolve, reject) => {
      srv.stdout!.on('data', (b: Buffer) => { if (b.toString().includes('ready')) resolve(); });
      srv.on('exit', (code) => reject(new Error(`server exited ${code}`)));
    });
  };

  before(async () => {
    c = await netns.create('fd-pod');
    x = await netns.create('fd-out');
    const na = await netns.create('fd-nat-a');
    const nb = await netns.create('fd-nat-b');
    await wire(ip, c, LINK_A, na, 'c');
    await wire(ip, c, LINK_B, nb, 'c');
    await wire(ip, na, 'eth0', x, 'a');
    await wire(ip, nb, 'eth0', x, 'b');
    // The pod's eth0, to a node that plays no part here: it carries the pod's address.
    await wire(ip, c, 'eth0', await netns.create('fd-node'), 'n-c');
    await ip.batch([['addr', 'add', '10.100.0.5/32', 'dev', 'eth0']], { netns: c.path });
    for (const [n, own, xSide] of [[na, SEEN_A, '192.0.2.100'], [nb, SEEN_B, '198.51.100.100']] as const) {
      await ip.batch([['addr', 'add', `${own}/24`, 'dev', 'eth0'], ['route', 'add', '10.100.0.5/32', 'dev', 'c'], ['route', 'add', `${TARGET}/32`, 'via', xSide]], { netns: n.path });
      await writeSysctl(ip, 'net.ipv4.ip_forward', '1', { netns: n.path });
      await writeSysctl(ip, 'net.ipv4.conf.c.proxy_arp', '1', { netns: n.path });
      await ip.exec(['nft', '-f', '-'], { netns: n.path, input: 'table ip nat {\n chain post { type nat hook postrouting priority srcnat; oifname "eth0" masquerade; }\n}\n' });
    }
    await ip.batch([['addr', 'add', `${TARGET}/32`, 'dev', 'lo'], ['addr', 'add', '192.0.2.100/24', 'dev', 'a'], ['addr', 'add', '198.51.100.100/24', 'dev', 'b']], { netns: x.path });
    for (const k of ['all', 'default']) await writeSysctl(ip, `net.ipv4.conf.${k}.rp_filter`, '0', { netns: c.path });
    await client.applyRouting(c.path, plan(NAT_A));
    await client.syncFlowPins(c.path, plan(NAT_A));
  });
  after(async () => {
    for (const s of servers) s.kill();
    agent.stop();
    await netns.cleanup();
  });

  test('the tunnel\'s link is pinned: a slot, its rule, its table and its mark', async () => {
    assert.deepEqual(await rules(), ['1700 fwmark 0x636f0001 lookup 117001']);
    assert.deepEqual(await table(117001), [`default dev ${LINK_A}`]);
    assert.deepEqual(await table(118), [`default dev ${LINK_A}`]);
    assert.deepEqual(await marks(), variant.backend === 'iptables'
      ? [`-A OUTPUT -m connmark --mark 0x636f0000/0xffff0000 -j CONNMARK --restore-mark --nfmask 0xffffffff --ctmask 0xffffffff`,
        `-A POSTROUTING -o ${LINK_A} -p tcp -m connmark --mark 0x0 -j CONNMARK --set-xmark 0x636f0001/0xffffffff`]
      : [`meta l4proto tcp ct mark 0x00000000 ct mark set oifname map { "${LINK_A}" : 0x636f0001 } comment "coil-flow-pin"`,
        'ct mark 0x636f0000/16 meta mark set ct mark comment "coil-flow-pin-restore"']);
    assert.equal(await peerSeenBy(x, TARGET, port++, c), SEEN_A, 'a connection goes through NA');
  });

  test('drain: a connection opened before keeps going through the draining NAT pod, a new one goes to the new one; at the drain\'s end the old link, rule, table and mark go', async () => {
    const p = port++;
    await serve(p);
    const old = new Stream(c, p);
    try {
      let s = await old.more(3);
      assert.deepEqual([s.err, s.last], ['', SEEN_A], 'the long-lived connection runs through NA');

      // The drain starts: 117/118 move to NB's link (what retarget's batch does on FoU), NA's stays.
      started.length = 0;
      await client.applyRouting(c.path, plan(NAT_B, [NAT_A]));
      await client.syncFlowPins(c.path, plan(NAT_B, [NAT_A]));
      if (agent.isUsable) {
        // Routes, rules, the pins' tables and rules as typed requests (no ip); the pin sync's netfilter half stays a program.
        assert.deepEqual(started.filter((p) => p === 'ip'), [], `the move's routing and pin sync started ip: ${started.join(' ')}`);
        console.log(`# processes of the drain's start (routing and pin sync, ${variant.name}): ${started.join(' ') || 'none'}`);
      }
      assert.deepEqual(await table(118), [`default dev ${LINK_B}`]);
      assert.deepEqual(await rules(), ['1700 fwmark 0x636f0001 lookup 117001', '1700 fwmark 0x636f0002 lookup 117002']);
      assert.deepEqual(await table(117002), [`default dev ${LINK_B}`]);
      s = await old.more(10);
      assert.deepEqual([s.err, s.last], ['', SEEN_A], 'the connection opened before the drain still goes through NA');
      assert.equal(await peerSeenBy(x, TARGET, port++, c), SEEN_B, 'a connection opened during the drain goes through NB');
      s = await old.more(3);
      assert.deepEqual([s.err, s.last], ['', SEEN_A], 'and the old one still through NA');

      // A coild restart reads every link's slot back and changes nothing.
      const again = new FlowPins({ ip, backend: variant.backend, ...(variant.iptables ? { iptables: variant.iptables } : {}) });
      assert.deepEqual([...await again.current(c.path, 4)].sort(), [[LINK_A, 1], [LINK_B, 2]]);
      const before = await marks();
      await again.apply(c.path, { 4: [LINK_B, LINK_A], 6: [] });
      assert.deepEqual(await marks(), before);

      // The drain ends (NA stopped serving): its link goes — on FoU in retarget's batch; here the stand-in.
      await ip.batch([['link', 'del', 'dev', LINK_A]], { netns: c.path });
      await client.syncFlowPins(c.path, plan(NAT_B));
      assert.deepEqual(await rules(), ['1700 fwmark 0x636f0002 lookup 117002']);
      assert.deepEqual(await table(117001), []);
      assert.ok(!(await marks()).some((l) => l.includes(LINK_A)), `NA's mark is gone: ${(await marks()).join('\n')}`);
      s = await old.more(1);
      assert.notEqual(s.last === SEEN_A && !s.err, true, 'the connection went on through NA after its link was gone');
    } finally {
      old.stop();
    }
    assert.equal(await peerSeenBy(x, TARGET, port++, c), SEEN_B, 'after the drain, connections go through NB');
  });

  test('no egress left: pinning is removed, marks and all', async () => {
    await client.remove(c.path);
    assert.deepEqual(await rules(), []);
    assert.deepEqual(await table(117002), []);
    assert.deepEqual(await marks(), []);
  });

  test('IPv6: a peer link gets its slot, rule, table and mark the same way, and loses them', async () => {
    const link6 = fouPeerLinkName('fd64::1');
    await wire(ip, c, link6, await netns.create('fd-nat6'), 'c');
    const rules6 = async () => (await ip.json<Array<{ priority: number; fwmark?: string; table: string }>>(['rule', 'show'], { netns: c.path, family: 6 }))
      .filter((r) => r.priority === 1700).map((r) => `1700 fwmark ${r.fwmark} lookup ${r.table}`);
    const marks6 = async () => (variant.backend === 'iptables'
      ? (await readIptablesRules(ip, 'mangle', { family: 6, netns: c.path, commands: variant.iptables! })).map((r) => `-A ${r.chain} ${r.text}`)
      : (await ip.exec(['nft', 'list', 'ruleset', 'ip6'], { netns: c.path })).stdout.split('\n').map((l) => l.trim()).filter((l) => l.includes('comment "coil-flow-pin')));
    const slots = await pins.apply(c.path, { 4: [], 6: [link6] });
    const s = slots[6].get(link6)!;
    assert.deepEqual(await rules6(), [`1700 fwmark 0x${(0x636f0000 + s).toString(16)} lookup ${117000 + s}`]);
    assert.deepEqual((await ip.json<Array<{ dst: string; dev: string }>>(['route', 'show', 'table', String(117000 + s)], { netns: c.path, family: 6 })).map((r) => `${r.dst} dev ${r.dev}`), [`default dev ${link6}`]);
    assert.equal((await marks6()).filter((l) => l.includes(link6)).length, 1);
    await pins.remove(c.path);
    assert.deepEqual(await rules6(), []);
    assert.deepEqual(await marks6(), []);
  });

  test('originating-only in the same netns, on the same backend: each one\'s sync and removal leaves the other\'s rules alone', async () => {
    const oo = new OriginatingOnly({ ip, backend: variant.backend, ...(variant.iptables ? { iptables: variant.iptables } : {}) });
    await wire(ip, c, LINK_A, await netns.create('fd-nat-a2'), 'c');
    // originating-only takes a pod link with a global address and routes.
    await ip.batch([['route', 'add', '10.100.0.1/32', 'dev', 'eth0', 'scope', 'link']], { netns: c.path });
    const ooRules = async () => (await ip.json<Array<{ priority: number }>>(['rule', 'show'], { netns: c.path, family: 4 })).filter((r) => r.priority === 1000).length;
    const ooMarks = async () => (variant.backend === 'iptables'
      ? (await readIptablesRules(ip, 'mangle', { family: 4, netns: c.path, commands: variant.iptables! })).filter((r) => r.chain === 'INPUT').length
      : (await ip.exec(['nft', 'list', 'ruleset', 'ip'], { netns: c.path })).stdout.split('\n').filter((l) => l.includes('comment "coil-input-')).length);
    const ours = async () => (await marks()).filter((l) => l.includes(LINK_A)).length;
    await pins.apply(c.path, { 4: [LINK_A], 6: [] });
    await oo.apply(c.path, [4]);
    await pins.apply(c.path, { 4: [LINK_A], 6: [] });
    assert.deepEqual([await ooRules(), await ooMarks(), (await rules()).length, await ours()], [1, 1, 1, 1], 'both in place after each other\'s sync');
    await oo.remove(c.path);
    assert.deepEqual([await ooRules(), await ooMarks(), (await rules()).length, await ours()], [0, 0, 1, 1], 'originating-only\'s removal kept the pins');
    await oo.apply(c.path, [4]);
    await pins.remove(c.path);
    assert.deepEqual([await ooRules(), await ooMarks(), (await rules()).length, await ours()], [1, 1, 0, 0], 'the pins\' removal kept originating-only');
    await oo.remove(c.path);
  });
});
