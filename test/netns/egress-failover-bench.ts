/**
 * Benchmark (not a test): what a client pod sees when the NAT pod its egress tunnel uses is lost,
 * on coil's path (coild probes the NAT pods and moves the tunnel itself) and on Coil's path (the
 * tunnel points at the Service ClusterIP; kube-proxy moves it once Kubernetes removed the
 * endpoint). Needs FoU: runs in the stock-kernel VM,
 *   flock /tmp/coil-heavy.lock hack/fou-vm.sh -- node dist/hack/bench/egress-failover.js (this file is its testbed)
 *
 * Topology (`--family 4`, the default; `--family 6` the same with IPv6 addresses: fd01:k::2,
 * fd02:k::2, 2001:db8:100::2, ClusterIP fd96::100): the VM's own netns is the node N (this process runs there, as coild does) and
 * routes between a client pod C (10.1.0.2), three NAT pods E1–E3 (10.2.k.2, each on its own veth,
 * set up by the code coil-egress runs in its pod: FoU receive port, NAT rules, return rule, a
 * peer link to the client) and an external target X (198.51.100.2), which can route only to the
 * NAT pods, so an answer proves the tunnel and the NAT. N plays kube-proxy for the ClusterIP
 * 10.96.0.100:5555 (nftables DNAT, the endpoint chosen by a hash of the client address: Coil's
 * default sessionAffinity ClientIP).
 *
 * coil's path runs the real EgressWatcher, NatSteering, NatProber and EgressClient; only the API
 * server is a stand-in (EndpointSlices, the Egress, its Service and the pod held in memory and
 * edited as the EndpointSlice controller would). Coil's path: the tunnel to the ClusterIP; at
 * the loss plus `-d` ms (what Kubernetes takes to remove the endpoint: not measurable here, see
 * docs/egress-failover.md) the DNAT drops the endpoint and its UDP conntrack entries are flushed,
 * as kube-proxy does.
 *
 * Three client pods C1–C3 (10.1.k.2, each on its own veth), chosen so that coil's rendezvous
 * hashing gives each a different NAT pod first. Each sends a UDP probe every 10 ms to X, which
 * echoes it, and keeps `-s` TCP streams to X open (16 bytes every 50 ms, echoed). Per run, for
 * the client(s) whose NAT pod was lost: the outage (the longest run of unanswered probes, from the
 * last answered probe before it to the first answered after) and the probes lost, and what became
 * of their streams (kept, reset after how long, or hung); for the other clients: probes lost and
 * streams disturbed (an error or an echo gap over 300 ms), which must both be 0.
 *
 * Kinds of loss (`-k`, comma-separated): `node-lost` (the NAT pod's link goes down: no answer at
 * all, as a lost node or a partition), `graceful` (the pod's endpoint turns terminating, then,
 * 1 s later, not serving and its link goes down: a graceful deletion after its grace period, as a
 * scale-down deletes a pod; 0.5 s into the drain each client opens one more TCP stream, to a port
 * of X that first names the address it sees, i.e. the NAT pod it went through: `new +N ms via
 * <NAT pod>` in its streams), `scale-up` (the Egress runs two NAT pods, E3 is added: on coil's
 * path its slice endpoint appears, on Coil's the DNAT gets the third endpoint; the lost column
 * names the added pod and the outage should be 0).
 *
 * `sigkill` and `sigstop` hit the NAT pod's process, not its data path: each NAT pod runs a
 * long-lived process in its netns (a stand-in for coil-egress, named `coil-egress-standin`: coil-
 * egress's own entrypoint needs an API server), while its data path is kernel state in the netns
 * (FoU port, NAT rules and conntrack, peer links) that survives the process, as on a node, where
 * the pod sandbox (and its netns) stays. `sigkill`: kubelet sees the exit and the endpoint turns
 * not ready (not serving, not terminating) `--k8s-not-ready-ms` later; the container is restarted
 * `--k8s-restart-ms` after the kill (a new stand-in, and coil-egress's setup run again, as its
 * start does); it would turn ready again after its readiness probe passes (after the window).
 * `sigstop`: the readiness probe fails `--k8s-readiness-fail-ms` later (Kubernetes' defaults for
 * the NAT pods' probe, which sets neither: failureThreshold 3 × periodSeconds 10 s = 30 s) and the
 * endpoint turns not ready; the liveness probe's kill and restart come later still (after the
 * window). On Coil's path kube-proxy then drops the endpoint and flushes its UDP conntrack entries,
 * as for a lost pod. The delays are parameters: the real-node lab measures Kubernetes' own.
 *
 * `steady`: no loss at all for `--steady-s` seconds, under the clients' load and `--burn` busy
 * processes: coild's false failovers (must be 0) and its probes' round trips, for the rule that
 * declares a NAT pod down (`-f`, unanswered probes in a row; default: the prober's).
 *
 * The tunnel's move goes through rtnetlink (coild's NetlinkExecutor with its netlink agent,
 * warmed before the loss as coild's pod wiring keeps it warm) or, with `-m ip`, one `ip -batch`
 * process per client pod (the fallback).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import type { V1EndpointSlice, V1Pod, V1Service } from '@kubernetes/client-node';
import { Registry } from 'prom-client';
import { Kinds } from '../../src/api/v2/kinds.js';
import type { Egress } from '../../src/api/v2/egress.js';
import { FouServer } from '../../src/egress-agent/fou-server.js';
import { IptablesNat } from '../../src/egress-agent/nat-iptables.js';
import { NftablesNat } from '../../src/egress-agent/nat-nftables.js';
import { IpRunner } from '../../src/netlink/iproute2/ip-runner.js';
import { NetlinkAgent } from '../../src/netlink/netlink-agent.js';
import { NetlinkExecutor } from '../../src/netlink/netlink-executor.js';
import { writeSysctl } from '../../src/netlink/sysctl.js';
import { EgressClient, planEgressClient } from '../../src/node-agent/egress/egress-client.js';
import { EgressWatcher } from '../../src/node-agent/egress/egress-watcher.js';
import { NatSteering } from '../../src/node-agent/egress/nat-steering.js';
import { FlowPins } from '../../src/node-agent/egress/flow-pins.js';
import { rendezvousChoice } from '../../src/node-agent/egress/nat-pod-choice.js';
import { KeyedMutex } from '../../src/node-agent/podnet/keyed-mutex.js';
import { SpawnHelper } from '../../src/node-agent/podnet/spawn-helper.js';
import type { EventRecorder } from '../../src/runtime/event-recorder.js';
import { createLogger, silentLogger } from '../../src/runtime/logging.js';
import { sleep } from '../../src/runtime/clock.js';
import { TestNetnsSet, type TestNetns } from './test-netns.js';
import { wire } from './egress-peer.js';
import { ApiStandIn, ask, inNetns, type ClientPod } from './egress-testbed.js';

const { values: args } = parseArgs({ options: {
  kinds: { type: 'string', short: 'k', default: 'node-lost,graceful,scale-up' },
  repeat: { type: 'string', short: 'n', default: '3' },
  streams: { type: 'string', short: 's', default: '2' },
  'coil-delay': { type: 'string', short: 'd', default: '0' },
  /** Unanswered probes in a row that make a NAT pod down (coild's NatProber); default: its own. */
  'probe-fail-after': { type: 'string', short: 'f' },
  /** How coild moves a tunnel: `rtnetlink` (its NetlinkExecutor and agent) or `ip` (one ip -batch process). */
  move: { type: 'string', short: 'm', default: 'rtnetlink' },
  'k8s-not-ready-ms': { type: 'string', default: '1000' },
  'k8s-restart-ms': { type: 'string', default: '1000' },
  'k8s-readiness-fail-ms': { type: 'string', default: '30000' },
  'steady-s': { type: 'string', default: '60' },
  burn: { type: 'string', default: '0' },
  /** The address family of every pod, the ClusterIP, the target and so of the tunnels. */
  family: { type: 'string', default: '4' },
  verbose: { type: 'boolean', short: 'v', default: false },
} });
const KINDS = args.kinds.split(',').map((k) => k.trim()).filter(Boolean);
const COIL_DELAY_MS = Number(args['coil-delay']);
const REPEAT = Number(args.repeat);
const STREAMS = Number(args.streams);
/** A flag's value as a whole number ≥ `min`. @throws Error naming the flag otherwise */
function count(flag: string, text: string | undefined, min = 0): number {
  const v = Number(text);
  if (text === undefined || !/^\d+$/.test(text) || v < min) throw new Error(`--${flag}: a whole number ≥ ${min} expected, got ${JSON.stringify(text)}`);
  return v;
}
const FAIL_AFTER = args['probe-fail-after'] === undefined ? undefined : count('probe-fail-after', args['probe-fail-after'], 1);
const NOT_READY_MS = count('k8s-not-ready-ms', args['k8s-not-ready-ms']);
const RESTART_MS = count('k8s-restart-ms', args['k8s-restart-ms']);
const READINESS_FAIL_MS = count('k8s-readiness-fail-ms', args['k8s-readiness-fail-ms']);
const STEADY_MS = count('steady-s', args['steady-s'], 1) * 1000;
const BURN = count('burn', args.burn);
count('repeat', args.repeat, 1);
count('streams', args.streams);
count('coil-delay', args['coil-delay']);
if (args.family !== '4' && args.family !== '6') throw new Error(`--family: 4 or 6 expected, got ${JSON.stringify(args.family)}`);
const V6 = args.family === '6';
if (args.move !== 'rtnetlink' && args.move !== 'ip') throw new Error(`--move: rtnetlink or ip expected, got ${JSON.stringify(args.move)}`);
const KNOWN_KINDS = ['node-lost', 'graceful', 'scale-up', 'sigkill', 'sigstop', 'steady'];
for (const k of KINDS) if (!KNOWN_KINDS.includes(k)) throw new Error(`--kinds: unknown kind ${JSON.stringify(k)} (known: ${KNOWN_KINDS.join(', ')})`);

const ip = new IpRunner({ timeoutMs: 60_000 });
/** coild's own way of starting `ip` under Node (its spawn helper), for coild's part of the bench. */
const helper = new SpawnHelper();
const coildIp = new IpRunner({ timeoutMs: 60_000, spawner: helper.spawner });
/** coild's NetlinkExecutor: rtnetlink through its agent (the Bun runtime inside dist/bin/coil), else ip. */
const agent = new NetlinkAgent();
const coildKernel = new NetlinkExecutor({ ip: coildIp, ...(args.move === 'rtnetlink' ? { rtnetlink: agent } : {}) });
const netns = new TestNetnsSet({ ip });
/** The addresses of the family: NAT pod k's and its node side's, client k's and its node side's, with their prefix length. */
const A = V6
  ? { clusterIp: 'fd96::100', target: '2001:db8:100::2', targetGw: '2001:db8:100::1', targetNet: '2001:db8:100::/64', natNet: 'fd02::/16', bits: 64, any: '::/0',
    nat: (k: number) => `fd02:${k}::2`, natGw: (k: number) => `fd02:${k}::1`, client: (k: number) => `fd01:${k}::2`, clientGw: (k: number) => `fd01:${k}::1` }
  : { clusterIp: '10.96.0.100', target: '198.51.100.2', targetGw: '198.51.100.1', targetNet: '198.51.100.0/24', natNet: '10.2.0.0/16', bits: 24, any: 'default',
    nat: (k: number) => `10.2.${k}.2`, natGw: (k: number) => `10.2.${k}.1`, client: (k: number) => `10.1.${k}.2`, clientGw: (k: number) => `10.1.${k}.1` };
/** `addr add` of an address with its prefix (IPv6 without duplicate address detection, which would hold it for a second or two). */
const addrAdd = (address: string, dev: string): string[] => ['addr', 'add', `${address}/${A.bits}`, 'dev', dev, ...(V6 ? ['nodad'] : [])];
/** conntrack(8)'s family option (it lists IPv4 only unless told). */
const CT_FAMILY = ['-f', V6 ? 'ipv6' : 'ipv4'];
const CLUSTER_IP = A.clusterIp;
const TARGET = A.target;
const NAT = [A.nat(1), A.nat(2), A.nat(3)];
const WINDOW_MS = 4_000;
/**
 * How long after a window's end its probes are read: a probe sent just before the end is still on
 * its way back at the end, and read at once it would count as lost.
 */
const SETTLE_MS = 300;
const started = Date.now();
const log = (s: string) => { if (args.verbose) console.error(`[${((Date.now() - started) / 1000).toFixed(1)} s] ${s}`); };

/** The UDP and TCP echo at X; on 7009 the TCP echo first names the address it sees (the NAT pod's). */
const ECHO = `const s=require('dgram').createSocket('udp6');s.on('message',(m,r)=>s.send(m,r.port,r.address));const net=require('net');
net.createServer((c)=>{c.on('error',()=>{});c.write(c.remoteAddress.replace(/^::ffff:/,'')+'\\n');c.pipe(c);}).listen(7009);
net.createServer((c)=>{c.on('error',()=>{});c.pipe(c);}).listen(7008,()=>s.bind(7007,()=>console.log('ready')));`;
/** A client pod: the 10 ms UDP probe and N TCP streams; `dump` on stdin prints what it saw. */
const CLIENT_PROGRAM = `const dgram=require('dgram'),net=require('net');const [target,n]=[process.argv[1],+process.argv[2]];
const s=dgram.createSocket(target.includes(':')?'udp6':'udp4');const sent=[],got={};let seq=0;
s.on('message',(m)=>{const k=m.readUInt32BE(0);if(!(k in got))got[k]=Date.now();});
const streams=[];
const open=(st,port)=>{const c=net.connect(port,target,()=>{setInterval(()=>{if(!st.errAt&&!st.closedAt)c.write('0123456789abcdef')},50);});
 c.on('data',(b)=>{if(port===7009&&!st.via){st.via=b.toString().split('\\n')[0];return;}st.echo.push(Date.now())});c.on('error',(e)=>{st.err=e.code;st.errAt=Date.now();});c.on('close',()=>{if(!st.closedAt)st.closedAt=Date.now();});};
for(let i=0;i<n;i++){const st={echo:[],err:'',errAt:0,closedAt:0};streams.push(st);open(st,7008);}
const late=[];
s.bind(0,()=>{console.log('ready');setInterval(()=>{const b=Buffer.alloc(8);b.writeUInt32BE(++seq,0);sent.push([seq,Date.now()]);s.send(b,7007,target,()=>{});},10);});
process.stdin.on('data',(d)=>{for(const l of d.toString().split('\\n')){if(l==='dump')console.log(JSON.stringify({sent,got,streams,late}));if(l==='open'){const st={echo:[],err:'',errAt:0,closedAt:0,via:'',openedAt:Date.now()};late.push(st);open(st,7009);}if(l==='quit')process.exit(0);}});`;

interface Dump {
  sent: Array<[number, number]>; got: Record<string, number>; streams: Array<{ echo: number[]; err: string; errAt: number; closedAt: number }>;
  /** Streams opened on `open` (to 7009, which names the NAT pod's address first): `via`. */
  late: Array<{ echo: number[]; err: string; errAt: number; closedAt: number; via: string; openedAt: number }>;
}

/** What one client saw in [t0, t0 + WINDOW_MS]. */
interface Seen {
  outageMs: number; lost: number; sent: number; streams: string[]; disturbed: number;
  /** The client program's own longest pause between two probe sends: a CPU stall of the VM, not the network. */
  stallMs: number;
  /**
   * The longest round trip of an answered probe in the window: a probe held up, not lost, means
   * a process or the VM stalled (a blocked path drops packets, it does not queue them for long).
   */
  maxRttMs: number;
  /** Probes answered in the 2 s before the loss (0: the path never worked). */
  answeredBefore: number;
  /** Streams opened during the window: `new +N ms via <NAT pod>: kept | reset +M ms (…) | closed +M ms | hung`. */
  late: string[];
}

/**
 * The outage is the longest run of unanswered probes, from the send time of the last answered
 * probe before it to that of the first answered after it (nothing got through in between), 0 when
 * every probe was answered, Infinity when the window ends unanswered. A stream is `kept` (echoes
 * never paused over 300 ms), `reset +N ms` (an error N ms after t0), `closed +N ms`, `paused N ms`
 * or `hung` (no echo in the window's last second).
 */
function measure(d: Dump, t0: number, windowMs = WINDOW_MS): Seen {
  const end = t0 + windowMs;
  const inWindow = d.sent.filter(([, t]) => t >= t0 && t <= end);
  const lost = inWindow.filter(([s]) => !(s in d.got)).length;
  let outageMs = 0;
  let lastOk: number | undefined = [...d.sent].reverse().find(([s, t]) => t < t0 && s in d.got)?.[1];
  let gap = false;
  for (const [s, t] of inWindow) {
    if (!(s in d.got)) { gap = true; continue; }
    if (gap && lastOk !== undefined) outageMs = Math.max(outageMs, t - lastOk);
    gap = false;
    lastOk = t;
  }
  if (gap) outageMs = Infinity;
  let stallMs = 0;
  for (let i = 1; i < inWindow.length; i++) stallMs = Math.max(stallMs, inWindow[i]![1] - inWindow[i - 1]![1]);
  const maxRttMs = Math.max(0, ...inWindow.filter(([s]) => s in d.got).map(([s, t]) => d.got[s]! - t));
  const answeredBefore = d.sent.filter(([s, t]) => t >= t0 - 2_000 && t < t0 && s in d.got).length;
  const streams = d.streams.map((st) => {
    if (st.errAt && st.errAt >= t0) return `reset +${st.errAt - t0} ms (${st.err})`;
    if (st.closedAt && st.closedAt >= t0) return `closed +${st.closedAt - t0} ms`;
    if (st.errAt || st.closedAt) return 'failed before the loss';
    const echoes = [t0, ...st.echo.filter((t) => t >= t0 && t <= end)];
    if (echoes[echoes.length - 1]! < end - 1_000) return 'hung';
    let maxGap = 0;
    for (let i = 1; i < echoes.length; i++) maxGap = Math.max(maxGap, echoes[i]! - echoes[i - 1]!);
    // An echo gap that a stall of the client, of X or of the VM explains (seen as the client's
    // own pause between sends, or as a probe answered late) is not the network's.
    return maxGap > 300 + Math.max(stallMs, maxRttMs) ? `paused ${maxGap} ms` : 'kept';
  });
  const late = (d.late ?? []).map((st) => {
    const what = st.errAt ? `reset +${st.errAt - t0} ms (${st.err})` : st.closedAt ? `closed +${st.closedAt - t0} ms`
      : (st.echo[st.echo.length - 1] ?? 0) < end - 1_000 ? 'hung' : 'kept';
    return `new +${st.openedAt - t0} ms via ${st.via || '?'}: ${what}`;
  });
  return { outageMs, lost, sent: inWindow.length, streams, disturbed: streams.filter((x) => x !== 'kept').length, stallMs, maxRttMs, answeredBefore, late };
}

/** kube-proxy's DNAT of the ClusterIP over `endpoints`, by a hash of the client address (ClientIP affinity). */
async function setDnat(node: TestNetns, endpoints: readonly string[]): Promise<void> {
  const map = endpoints.map((e, i) => `${i} : ${e}`).join(', ');
  await ip.exec(['nft', '-f', '-'], { netns: node.path, input: [
    `table ${V6 ? 'ip6' : 'ip'} kube-proxy`, `flush table ${V6 ? 'ip6' : 'ip'} kube-proxy`, `table ${V6 ? 'ip6' : 'ip'} kube-proxy {`, ' chain pre {', '  type nat hook prerouting priority dstnat; policy accept;',
    `  ${V6 ? 'ip6' : 'ip'} daddr ${CLUSTER_IP} udp dport 5555 dnat to jhash ${V6 ? 'ip6' : 'ip'} saddr mod ${endpoints.length} map { ${map} }`, ' }', '}', ''].join('\n') });
}

/** The NAT pod kube-proxy's DNAT sends `client`'s tunnel to (its conntrack entry's reply source). */
async function dnatTarget(client: string): Promise<string | undefined> {
  const { stdout } = await ip.exec(['conntrack', '-L', ...CT_FAMILY, '-p', 'udp', '-s', client, '-d', CLUSTER_IP]).catch(() => ({ stdout: '' }));
  return /src=\S+ dst=\S+ sport=\d+ dport=\d+ .*?src=(\S+)/.exec(stdout)?.[1];
}

function slice(conditions: Record<string, { serving: boolean; terminating: boolean }>): V1EndpointSlice {
  return { metadata: { namespace: 'internet', name: 'nat-abcde', labels: { 'kubernetes.io/service-name': 'nat', 'app.kubernetes.io/name': 'coil', 'app.kubernetes.io/component': 'egress' } },
    addressType: V6 ? 'IPv6' : 'IPv4', endpoints: NAT.filter((a) => conditions[a]).map((a) => ({ addresses: [a], conditions: conditions[a] })) };
}

interface Row {
  path: string; kind: string; lost: string; onLost: Seen[]; others: Seen[]; detectMs?: number; movedMs?: number;
  /** coild's failovers (a NAT pod declared down while its slice said serving) and its probes' round trips. */
  probes?: ProbeStats;
}

/** What coild's prober saw in a run (from its metrics). */
interface ProbeStats { failovers: number; answered: number; over25ms: number; over100ms: number; over250ms: number }

/**
 * The run's failovers and probe round trips from coild's own metrics
 * (`coil_coild_egress_failovers_total`, `coil_coild_egress_probe_rtt_seconds`).
 */
async function probeStats(registry: Registry): Promise<ProbeStats> {
  const values = async (name: string) => (await registry.getSingleMetric(name)?.get())?.values ?? [];
  const failovers = (await values('coil_coild_egress_failovers_total')).reduce((a, v) => a + v.value, 0);
  const rtt = await values('coil_coild_egress_probe_rtt_seconds');
  const bucket = (le: number | string) => rtt.filter((v) => (v as { metricName?: string }).metricName?.endsWith('_bucket') && v.labels.le === le).reduce((a, v) => a + v.value, 0);
  const answered = bucket('+Inf');
  return { failovers, answered, over25ms: answered - bucket(0.025), over100ms: answered - bucket(0.1), over250ms: answered - bucket(0.25) };
}

/**
 * The NAT pods' processes: one long-lived process per NAT pod in its netns, a stand-in for
 * coil-egress (named `coil-egress-standin`), so SIGKILL and SIGSTOP hit a real process there
 * while the data path stays kernel state.
 */
function startNatProcess(ns: TestNetns): ChildProcess {
  return spawn('ip', ['netns', 'exec', ns.name, 'bash', '-c', 'exec -a coil-egress-standin sleep infinity'], { stdio: 'ignore' });
}

/** Client addresses 10.1.k.2 (fd01:k::2) whose rendezvous first choices are NAT[0], NAT[1], NAT[2]. */
function pickClients(): string[] {
  const out: string[] = [];
  for (const nat of NAT) {
    for (let k = 1; k < 250; k++) {
      const a = A.client(k);
      if (!out.includes(a) && rendezvousChoice(a, NAT) === nat) { out.push(a); break; }
    }
  }
  return out;
}

async function main(): Promise<Row[]> {
  await ip.exec(['ip', 'netns', 'attach', 'coilbench-node', String(process.pid)]);
  const n: TestNetns = { name: 'coilbench-node', path: '/run/netns/coilbench-node' };
  // A lost node is its link set down, and up again for the next run: IPv6 drops a link's
  // addresses when it goes down unless told to keep them.
  if (V6) for (const scope of ['all', 'default']) await writeSysctl(ip, `net.ipv6.conf.${scope}.keep_addr_on_down`, '1');
  const x = await netns.create('x');
  const es = [await netns.create('e1'), await netns.create('e2'), await netns.create('e3')];
  const clients: ClientPod[] = [];
  for (const [i, address] of pickClients().entries()) {
    const ns = await netns.create(`c${i + 1}`);
    const k = Number(V6 ? address.split(':')[1] : address.split('.')[2]);
    await wire(ip, ns, 'eth0', n, `n-c${i + 1}`);
    await ip.batch([addrAdd(A.clientGw(k), `n-c${i + 1}`)], { netns: n.path });
    await ip.batch([addrAdd(address, 'eth0'), ['route', 'add', A.any, 'via', A.clientGw(k)]], { netns: ns.path });
    clients.push({ ns, address, index: i });
  }
  await wire(ip, x, 'eth0', n, 'n-x');
  for (const [i, e] of es.entries()) await wire(ip, e, 'eth0', n, `n-e${i + 1}`);
  await ip.batch([addrAdd(A.targetGw, 'n-x'), ...NAT.map((_, i) => addrAdd(A.natGw(i + 1), `n-e${i + 1}`))], { netns: n.path });
  await ip.batch([addrAdd(TARGET, 'eth0'), ['route', 'add', A.natNet, 'via', A.targetGw]], { netns: x.path });
  for (const [i, e] of es.entries()) await ip.batch([addrAdd(NAT[i]!, 'eth0'), ['route', 'add', A.any, 'via', A.natGw(i + 1)]], { netns: e.path });
  await writeSysctl(ip, V6 ? 'net.ipv6.conf.all.forwarding' : 'net.ipv4.ip_forward', '1');
  await setDnat(n, NAT);
  // What coil-egress sets up in its pod when it starts (again after a restart: idempotent).
  const natSetup = async (i: number) => {
    const e = es[i]!;
    // E2 has Coil's default backend (its iptables rules), E1 and E3 the nftables one: steered
    // tunnels work with a NAT pod set up as Coil's.
    await (i === 1 ? new IptablesNat({ ip, podAddresses: [NAT[i]!], outInterface: 'eth0', netns: e.path }) : new NftablesNat({ ip, podAddresses: [NAT[i]!], outInterface: 'eth0', netns: e.path })).init();
    const server = new FouServer({ ip, podAddresses: [NAT[i]!], port: 5555, isSourcePortAuto: false, outInterface: 'eth0', netns: e.path });
    await server.init();
    await server.sync(new Set(clients.map((c) => c.address)));
  };
  for (const i of es.keys()) await natSetup(i);
  natPods = es.map((ns, i) => ({ ns, process: startNatProcess(ns), setup: () => natSetup(i) }));
  log(`topology up; clients ${clients.map((c) => c.address).join(', ')}`);

  const echo = await inNetns(x, ECHO);
  const burners = Array.from({ length: BURN }, () => spawn(process.execPath, ['-e', 'for(;;){}'], { stdio: 'ignore' }));
  const rows: Row[] = [];
  try {
    for (const kind of KINDS) {
      for (let i = 0; i < REPEAT; i++) {
        rows.push(await coilRun(n, clients, kind, kind === 'scale-up' ? NAT[2]! : NAT[i % NAT.length]!));
        if (kind !== 'steady') rows.push(await coilBaselineRun(n, clients, kind, i));
      }
    }
  } finally {
    echo.kill();
    for (const b of burners) b.kill('SIGKILL');
  }
  return rows;
}

/** Each NAT pod's netns, its process (the coil-egress stand-in) and its setup. */
let natPods: Array<{ ns: TestNetns; process: ChildProcess; setup: () => Promise<void> }> = [];

/**
 * Hits NAT pod `idx`'s process with `signal` at t0 and plays Kubernetes' answer: `onNotReady` when
 * the endpoint turns not ready (`--k8s-not-ready-ms` after a SIGKILL; `--k8s-readiness-fail-ms`
 * after a SIGSTOP), and for a SIGKILL the container's restart at `--k8s-restart-ms` (a new
 * process, coil-egress's setup again).
 * @returns when every change of the window is done, and the ms after t0 of the endpoint change
 */
async function hitNatProcess(idx: number, signal: 'SIGKILL' | 'SIGSTOP', onNotReady: () => Promise<void>): Promise<number> {
  const pod = natPods[idx]!;
  const t0 = Date.now();
  pod.process.kill(signal);
  const notReadyAt = signal === 'SIGKILL' ? NOT_READY_MS : READINESS_FAIL_MS;
  const steps: Array<[number, () => Promise<void>]> = [[notReadyAt, onNotReady]];
  if (signal === 'SIGKILL') {
    steps.push([RESTART_MS, async () => {
      pod.process = startNatProcess(pod.ns);
      await pod.setup();
    }]);
  }
  for (const [at, step] of steps.sort((a, b) => a[0] - b[0])) {
    await sleep(Math.max(0, at - (Date.now() - t0)));
    await step();
  }
  return notReadyAt;
}

/** After a run: the process hit is running again (a stopped one continued; a killed one was restarted). */
function reviveNatProcess(idx: number): void {
  const pod = natPods[idx]!;
  if (pod.process.exitCode === null && pod.process.signalCode === null) pod.process.kill('SIGCONT');
}

/** Starts every client's program; @returns them in client order. */
async function startClients(clients: readonly ClientPod[]): Promise<ChildProcess[]> {
  return Promise.all(clients.map((c) => inNetns(c.ns, CLIENT_PROGRAM, [TARGET, String(STREAMS)])));
}

async function stopClients(ps: readonly ChildProcess[]): Promise<void> {
  await Promise.all(ps.map((p) => new Promise<void>((r) => { p.once('exit', () => r()); p.stdin!.write('quit\n'); setTimeout(() => { p.kill('SIGKILL'); r(); }, 5_000).unref(); })));
}

/** coil's path: the watcher with steering and the real prober; `lost`, the first choice of one client, goes. */
async function coilRun(n: TestNetns, clients: readonly ClientPod[], kind: string, lost: string): Promise<Row> {
  const api = new ApiStandIn();
  const egress: Egress = { metadata: { namespace: 'internet', name: 'nat' }, spec: { destinations: [A.targetNet], replicas: 3, sessionAffinity: 'ClientIP' } };
  const service: V1Service = { metadata: { namespace: 'internet', name: 'nat' }, spec: { clusterIPs: [CLUSTER_IP] } };
  const pods: V1Pod[] = clients.map((c) => ({ metadata: { namespace: 'app', name: `client${c.index}`, annotations: { 'egress.coil.cybozu.com/internet': 'nat' } }, spec: { containers: [] } }));
  const all = Object.fromEntries(NAT.map((a) => [a, { serving: true, terminating: false }]));
  const initial = kind === 'scale-up' ? Object.fromEntries(NAT.filter((a) => a !== lost).map((a) => [a, { serving: true, terminating: false }])) : all;
  api.put(Kinds.Egress.kind, egress);
  api.put(Kinds.Service.kind, service);
  for (const p of pods) api.put(Kinds.Pod.kind, p);
  api.put(Kinds.EndpointSlice.kind, slice(initial));
  const stateDir = await mkdtemp(join(tmpdir(), 'coil-bench-egress-'));
  const registry = new Registry();
  let watcher: EgressWatcher | undefined;
  let t0 = 0;
  let detectMs: number | undefined;
  let movedMs: number | undefined;
  const steering = new NatSteering({ cache: api.cache, port: 5555, logger: silentLogger(), registry, onChange: (e) => watcher?.onSteeringChange(e), ...(FAIL_AFTER ? { probeFailAfter: FAIL_AFTER } : {}) });
  // coild's flow pinning, on the nftables backend (docs/egress-failover.md#draining).
  const egressClient = new EgressClient({ ip: coildIp, kernel: coildKernel, port: 5555, flowPins: { enabled: true, applier: new FlowPins({ ip: coildIp, backend: 'nftables' }) } });
  const retarget = egressClient.retarget.bind(egressClient);
  egressClient.retarget = async (...a) => {
    const moved = await retarget(...a);
    if (t0 && movedMs === undefined) movedMs = Date.now() - t0;
    if (t0) log(`coil ${kind}: retarget ${a[1].peers.map((p) => p.remote).join()} → ${a[2].peers.map((p) => p.remote).join()}${a[2].drains.length > 0 ? ` draining ${a[2].drains.map((p) => p.remote).join()}` : ''} done +${Date.now() - t0} ms`);
    return moved;
  };
  watcher = new EgressWatcher({
    cache: api.cache, client: api.client, recorder: { event: () => undefined } as unknown as EventRecorder,
    egressClient, locks: new KeyedMutex(), lockKey: (a, b) => `${a}:${b}`, logger: args.verbose ? createLogger({ name: 'bench-coild', level: 'warn' }) : silentLogger(),
    stateDir, port: 5555, probe: async () => ({ veth: true, ipv6: true, vxlan: true, ipip: true, ip6tnl: true, fou: true }), registry, steering,
  });
  const onSteeringChange = watcher.onSteeringChange.bind(watcher);
  watcher.onSteeringChange = (e: string) => {
    if (t0 && detectMs === undefined && kind === 'node-lost') detectMs = Date.now() - t0;
    onSteeringChange(e);
  };
  await watcher.init();
  const ac = new AbortController();
  const loops = [watcher.run(ac.signal), steering.run(ac.signal)];
  let ps: ChildProcess[] = [];
  try {
    for (const [i, c] of clients.entries()) {
      await watcher.onAdd(pods[i]!, { namespace: 'app', name: `client${c.index}`, containerId: `bench${c.index}`, ifname: 'eth0', netns: c.ns.path, ips: [c.address] });
    }
    // Only once the tunnels exist (as the pod's containers start after its ADD): a stream whose
    // first SYN left without a tunnel would connect a second later, inside the window.
    ps = await startClients(clients);
    const on = clients.map((c) => steering.natPod({ namespace: 'internet', name: 'nat' }, c.address)!);
    log(`coil: tunnels to ${on.join(', ')}`);
    // coild's pod wiring keeps its netlink agent warm; here nothing else has used it yet.
    await coildKernel.dump({ kind: 'links' });
    await sleep(2_500);
    const idx = NAT.indexOf(lost) + 1;
    t0 = Date.now();
    if (kind === 'steady') {
      await sleep(STEADY_MS + SETTLE_MS);
      const seenSteady = (await Promise.all(ps.map((p) => ask<Dump>(p, 'dump')))).map((d) => measure(d, t0, STEADY_MS));
      const probes = await probeStats(registry);
      log(`coil steady: ${JSON.stringify(probes)}`);
      return { path: 'coil', kind, lost: `none (${STEADY_MS / 1000} s, ${BURN} busy processes)`, onLost: [], others: seenSteady, probes };
    }
    if (kind === 'sigkill' || kind === 'sigstop') {
      const signal = kind === 'sigkill' ? 'SIGKILL' : 'SIGSTOP';
      const notReadyAt = await hitNatProcess(idx - 1, signal, async () => {
        api.put(Kinds.EndpointSlice.kind, slice({ ...all, [lost]: { serving: false, terminating: false } }));
      });
      await sleep(Math.max(0, notReadyAt + WINDOW_MS + SETTLE_MS - (Date.now() - t0)));
      const m = (await Promise.all(ps.map((p) => ask<Dump>(p, 'dump')))).map((d) => measure(d, t0, notReadyAt + WINDOW_MS));
      reviveNatProcess(idx - 1);
      log(`coil ${kind}: ${lost}, ${JSON.stringify(m)}`);
      return { path: 'coil', kind, lost, onLost: m.filter((_, i) => on[i] === lost), others: m.filter((_, i) => on[i] !== lost), probes: await probeStats(registry) };
    }
    if (kind === 'scale-up') {
      api.put(Kinds.EndpointSlice.kind, slice(all));
      await sleep(WINDOW_MS + SETTLE_MS);
      const seenUp = (await Promise.all(ps.map((p) => ask<Dump>(p, 'dump')))).map((d) => measure(d, t0));
      log(`coil scale-up: added ${lost}, ${JSON.stringify(seenUp)}`);
      return { path: 'coil', kind, lost: `${lost} added`, onLost: [], others: seenUp, probes: await probeStats(registry) };
    }
    if (kind === 'graceful') {
      api.put(Kinds.EndpointSlice.kind, slice({ ...all, [lost]: { serving: true, terminating: true } }));
      // A connection opened during the drain: it should go to another NAT pod and outlive this one.
      await sleep(500);
      for (const p of ps) p.stdin!.write('open\n');
      await sleep(500);
      api.put(Kinds.EndpointSlice.kind, slice({ ...all, [lost]: { serving: false, terminating: true } }));
      log(`coil graceful: ${lost} not serving +${Date.now() - t0} ms`);
      // The sandbox (and its netns) goes some time after the containers stopped and the endpoint
      // turned not serving: kubelet's teardown, the CNI DEL. 200 ms here, a lower bound.
      await sleep(200);
    }
    await ip.batch([['link', 'set', 'dev', `n-e${idx}`, 'down']], { netns: n.path });
    await sleep(WINDOW_MS + SETTLE_MS);
    const seen = await Promise.all(ps.map((p) => ask<Dump>(p, 'dump')));
    const m = seen.map((d) => measure(d, t0));
    await ip.batch([['link', 'set', 'dev', `n-e${idx}`, 'up']], { netns: n.path });
    m.forEach((x, i) => { if (x.answeredBefore === 0) throw new Error(`coil: client ${clients[i]!.address} got no answer through NAT pod ${on[i]} before the loss`); });
    log(`coil ${kind}: lost ${lost}, detect ${detectMs} ms, moved ${movedMs} ms, ${JSON.stringify(m)}`);
    return { path: 'coil', kind, lost, onLost: m.filter((_, i) => on[i] === lost), others: m.filter((_, i) => on[i] !== lost), ...(detectMs !== undefined ? { detectMs } : {}), ...(movedMs !== undefined ? { movedMs } : {}), probes: await probeStats(registry) };
  } finally {
    await stopClients(ps);
    ac.abort();
    await Promise.all(loops);
    for (const c of clients) await egressClient.remove(c.ns.path);
    await rm(stateDir, { recursive: true, force: true });
  }
}

/** Coil's path: tunnels to the ClusterIP; kube-proxy drops the endpoint `-d` ms after the loss. */
async function coilBaselineRun(n: TestNetns, clients: readonly ClientPod[], kind: string, run: number): Promise<Row> {
  await setDnat(n, kind === 'scale-up' ? NAT.slice(0, 2) : NAT);
  await ip.exec(['conntrack', '-F', ...CT_FAMILY]).catch(() => undefined);
  const client = new EgressClient({ ip, port: 5555 });
  for (const c of clients) {
    await client.apply(c.ns.path, planEgressClient({ podIps: [c.address], port: 5555, gateways: [{ egress: 'internet/nat', clusterIp: CLUSTER_IP, destinations: [A.targetNet], isSourcePortAuto: false }] }));
  }
  const ps = await startClients(clients);
  try {
    await sleep(2_500);
    const on = await Promise.all(clients.map((c) => dnatTarget(c.address)));
    log(`Coil: kube-proxy sends the clients to ${on.join(', ')}`);
    if (kind === 'scale-up') {
      const t = Date.now();
      await setDnat(n, NAT);
      await sleep(WINDOW_MS + SETTLE_MS);
      const seenUp = (await Promise.all(ps.map((p) => ask<Dump>(p, 'dump')))).map((d) => measure(d, t));
      log(`Coil scale-up: ${JSON.stringify(seenUp)}`);
      return { path: `Coil (endpoint removed +${COIL_DELAY_MS} ms after the pod is gone)`, kind, lost: `${NAT[2]} added`, onLost: [], others: seenUp };
    }
    const lost = on[run % clients.length] ?? NAT[0]!;
    const idx = NAT.indexOf(lost) + 1;
    const t0 = Date.now();
    if (kind === 'sigkill' || kind === 'sigstop') {
      // kube-proxy, once the endpoint is not ready: out of the DNAT, its UDP conntrack entries flushed.
      const notReadyAt = await hitNatProcess(idx - 1, kind === 'sigkill' ? 'SIGKILL' : 'SIGSTOP', async () => {
        await setDnat(n, NAT.filter((a) => a !== lost));
        await ip.exec(['conntrack', '-D', ...CT_FAMILY, '-p', 'udp', '--reply-src', lost]).catch(() => undefined);
      });
      await sleep(Math.max(0, notReadyAt + WINDOW_MS + SETTLE_MS - (Date.now() - t0)));
      const m = (await Promise.all(ps.map((p) => ask<Dump>(p, 'dump')))).map((d) => measure(d, t0, notReadyAt + WINDOW_MS));
      reviveNatProcess(idx - 1);
      log(`Coil ${kind}: ${lost}, ${JSON.stringify(m)}`);
      return { path: 'Coil (kube-proxy)', kind, lost, onLost: m.filter((_, i) => on[i] === lost), others: m.filter((_, i) => on[i] !== lost) };
    }
    if (kind === 'graceful') {
      // Kubernetes marks the endpoint terminating: kube-proxy keeps established flows (the
      // tunnel's UDP conntrack entry), so nothing changes until the pod is gone.
      await sleep(1_200);
    }
    await ip.batch([['link', 'set', 'dev', `n-e${idx}`, 'down']], { netns: n.path });
    await sleep(COIL_DELAY_MS);
    // kube-proxy: the endpoint leaves the DNAT, and UDP conntrack entries towards it are flushed.
    await setDnat(n, NAT.filter((a) => a !== lost));
    await ip.exec(['conntrack', '-D', ...CT_FAMILY, '-p', 'udp', '--reply-src', lost]).catch(() => undefined);
    await sleep(WINDOW_MS + SETTLE_MS);
    const seen = await Promise.all(ps.map((p) => ask<Dump>(p, 'dump')));
    const m = seen.map((d) => measure(d, t0));
    await ip.batch([['link', 'set', 'dev', `n-e${idx}`, 'up']], { netns: n.path });
    m.forEach((x, i) => { if (x.answeredBefore === 0) throw new Error(`Coil: client ${clients[i]!.address} got no answer through the ClusterIP before the loss`); });
    log(`Coil ${kind}: lost ${lost}, ${JSON.stringify(m)}`);
    return { path: `Coil (endpoint removed +${COIL_DELAY_MS} ms after the pod is gone)`, kind, lost, onLost: m.filter((_, i) => on[i] === lost), others: m.filter((_, i) => on[i] !== lost) };
  } finally {
    await stopClients(ps);
    for (const c of clients) await client.remove(c.ns.path);
  }
}

const fmt = (ms: number) => (Number.isFinite(ms) ? String(ms) : 'no answer');

main().then(
  async (rows) => {
    console.log(`IPv${args.family}; move: ${args.move}; probe: down after ${FAIL_AFTER ?? 'the default number of'} unanswered probes; k8s delays (ms): not ready after a kill ${NOT_READY_MS}, restart ${RESTART_MS}, readiness failed after a stop ${READINESS_FAIL_MS}`);
    console.log('| path | loss | NAT pod lost | detected / moved (ms) | outage (ms) | probes lost / sent | its streams | other clients: probes lost, streams disturbed | their disturbed streams | longest client stall / probe RTT (ms) | coild: failovers, probe RTT > 25/100/250 ms of answered |');
    console.log('|---|---|---|---|---:|---:|---|---|---|---:|---|');
    for (const r of rows) {
      const worst = r.onLost.reduce((a, s) => (s.outageMs > a.outageMs ? s : a), { outageMs: 0 } as Seen);
      console.log(`| ${r.path} | ${r.kind} | ${r.lost} | ${r.detectMs ?? '-'} / ${r.movedMs ?? '-'} | ${fmt(worst.outageMs)} | ${r.onLost.reduce((a, s) => a + s.lost, 0)} / ${r.onLost.reduce((a, s) => a + s.sent, 0)} | ${r.onLost.flatMap((s) => [...s.streams, ...s.late]).join('; ')} | ${r.others.reduce((a, s) => a + s.lost, 0)}, ${r.others.reduce((a, s) => a + s.disturbed, 0)} | ${r.others.flatMap((s) => s.streams.filter((x) => x !== 'kept')).join('; ')} | ${Math.max(0, ...r.onLost.map((s) => s.stallMs), ...r.others.map((s) => s.stallMs))} / ${Math.max(0, ...r.onLost.map((s) => s.maxRttMs), ...r.others.map((s) => s.maxRttMs))} | ${r.probes ? `${r.probes.failovers}, ${r.probes.over25ms}/${r.probes.over100ms}/${r.probes.over250ms} of ${r.probes.answered}` : '-'} |`);
    }
    console.log('');
    console.log('| path | loss | runs | outage p50 (ms) | outage max (ms) | probes lost on the lost NAT pod (sum) | other clients: probes lost, streams disturbed (sum) | coild false failovers (sum) |');
    console.log('|---|---|---:|---:|---:|---:|---|---:|');
    const groups = new Map<string, Row[]>();
    for (const r of rows) groups.set(`${r.path}|${r.kind}`, [...(groups.get(`${r.path}|${r.kind}`) ?? []), r]);
    for (const [k, rs] of groups) {
      const o = rs.map((r) => Math.max(0, ...r.onLost.map((s) => s.outageMs))).sort((a, b) => a - b);
      const [path, kind] = k.split('|');
      console.log(`| ${path} | ${kind} | ${rs.length} | ${fmt(o[Math.floor((o.length - 1) / 2)]!)} | ${fmt(o[o.length - 1]!)} | ${rs.reduce((a, r) => a + r.onLost.reduce((b, s) => b + s.lost, 0), 0)} | ${rs.reduce((a, r) => a + r.others.reduce((b, s) => b + s.lost, 0), 0)}, ${rs.reduce((a, r) => a + r.others.reduce((b, s) => b + s.disturbed, 0), 0)} | ${rs[0]!.probes ? rs.reduce((a, r) => a + (r.kind === 'node-lost' ? 0 : r.probes?.failovers ?? 0), 0) : '-'} |`);
    }
    console.log(`load average ${(await import('node:os')).loadavg().map((l) => l.toFixed(2)).join(' ')}, wall ${((Date.now() - started) / 1000).toFixed(1)} s`);
    helper.stop();
    agent.stop();
    for (const p of natPods) p.process.kill('SIGKILL');
    await netns.cleanup();
    await ip.exec(['ip', 'netns', 'del', 'coilbench-node']).catch(() => undefined);
    process.exit(0);
  },
  async (err: unknown) => {
    console.error(`FAIL ${err instanceof Error ? err.stack : String(err)}`);
    helper.stop();
    agent.stop();
    for (const p of natPods) p.process.kill('SIGKILL');
    await netns.cleanup();
    await ip.exec(['ip', 'netns', 'del', 'coilbench-node']).catch(() => undefined);
    process.exit(1);
  },
);
