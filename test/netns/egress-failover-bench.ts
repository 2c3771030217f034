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
 * `sigkill` and `sigstop` hit the NAT pod's process, not its data path: each NAT pod runs the real
 * coil-egress (its own entrypoint, as the image runs it, against a stand-in of the API server's pod
 * list: egress-agent-process.ts), which sets the pod up as in its pod; its data path is kernel state
 * in the netns (FoU port, NAT rules and conntrack, peer links) that outlives the process, as on a
 * node, where the pod sandbox (and its netns) stays. kubelet's answer is played as kubelet does
 * (`playKubelet`): `sigkill` — the endpoint turns not ready (not serving, not terminating)
 * `--k8s-not-ready-ms` after the kill and the container starts again `--k8s-restart-ms` after it
 * (the first restart, without back-off); `sigstop` — the readiness probe fails
 * `--k8s-readiness-fail-ms` after the stop (failureThreshold 3 × periodSeconds 10 s = 30 s by
 * default) and the endpoint turns not ready, the liveness probe fails `--k8s-liveness-fail-ms` after
 * it (default: the same) and kubelet kills the container (SIGTERM, SIGKILL after `--k8s-grace-ms`,
 * the grace period, 30 s by default) and starts it again. Both: the endpoint is ready again once the
 * restarted coil-egress's /readyz passes; every client opens one more TCP stream when the
 * container starts again (a new flow while coil-egress sets the pod up), and the NAT pod's peer
 * links, FoU ports and the clients' conntrack entries are compared before the signal and after the
 * restart (the last column). The window runs until 2 s after that readiness (at least 4 s after the
 * endpoint turned not ready). On Coil's path kube-proxy drops the not-ready endpoint from its DNAT
 * and deletes its UDP conntrack entries (as for a lost pod), and takes it back for new flows once
 * ready. The delays are parameters: the real-node lab measures Kubernetes' own.
 *
 * Coil's `graceful` row models kube-proxy as its source says it treats an endpoint that stops
 * serving: terminating (still serving), it leaves the DNAT for new flows while a ready endpoint is
 * left (pkg/proxy/topology.go, CategorizeEndpoints) but its UDP conntrack entries stay
 * (pkg/proxy/conntrack/cleanup.go, CleanStaleEntries keeps the entries of serving endpoints,
 * terminating or not), so the tunnel's flow — one fixed 5-tuple — and every connection in it stay
 * on the pod; once not serving, its entries are deleted and the tunnel's next packet is DNATed to
 * another NAT pod.
 *
 * The clients' records are read once their paths have drained (egress-failover-measure.ts): a
 * probe of the window still in flight is not counted lost.
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
import { IpRunner } from '../../src/netlink/iproute2/ip-runner.js';
import { NetlinkAgent } from '../../src/netlink/netlink-agent.js';
import { NetlinkExecutor } from '../../src/netlink/netlink-executor.js';
import { rt } from '../../src/netlink/rt-request.js';
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
import { drained, DRAIN_TIMEOUT_MS, measure, STARVED_SHARE, type Dump, type Seen } from './egress-failover-measure.js';
import { CoilEgressProcess, natState, natStateChange, playKubelet, PodListStandIn, writeKubeconfig, type ContainerEvents, type KubeletTimings, type NatState } from './egress-agent-process.js';

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
  /** A hung coil-egress: its liveness probe fails (kubelet kills it) this long after the stop; default: as the readiness probe. */
  'k8s-liveness-fail-ms': { type: 'string' },
  /** The grace period of kubelet's kill of a hung container (SIGTERM, then SIGKILL). */
  'k8s-grace-ms': { type: 'string', default: '30000' },
  'steady-s': { type: 'string', default: '60' },
  burn: { type: 'string', default: '0' },
  /** Which paths run: `coil` (coild steers), `Coil` (tunnels to the ClusterIP, kube-proxy), comma-separated. */
  paths: { type: 'string', default: 'coil,Coil' },
  /** The address family of every pod, the ClusterIP, the target and so of the tunnels. */
  family: { type: 'string', default: '4' },
  verbose: { type: 'boolean', short: 'v', default: false },
} });
/** `-k`: kinds, each `kind` (run `-n` times) or `kind:RUNS`. */
const COIL_DELAY_MS = Number(args['coil-delay']);
const REPEAT = Number(args.repeat);
const STREAMS = Number(args.streams);
/** A flag's value as a whole number ≥ `min`. @throws Error naming the flag otherwise */
function count(flag: string, text: string | undefined, min = 0): number {
  const v = Number(text);
  if (text === undefined || !/^\d+$/.test(text) || v < min) throw new Error(`--${flag}: a whole number ≥ ${min} expected, got ${JSON.stringify(text)}`);
  return v;
}
const KIND_RUNS = args.kinds.split(',').map((k) => k.trim()).filter(Boolean).map((k) => {
  const [kind = '', runs] = k.split(':');
  return { kind, runs: runs === undefined ? Number(args.repeat) : count(`kinds (${kind})`, runs, 1) };
});
const KINDS = KIND_RUNS.map((k) => k.kind);
const PATHS = args.paths.split(',').map((p) => p.trim()).filter(Boolean);
for (const p of PATHS) if (p !== 'coil' && p !== 'Coil') throw new Error(`--paths: coil or Coil expected, got ${JSON.stringify(p)}`);
if (PATHS.length === 0) throw new Error('--paths: at least one of coil, Coil');
const FAIL_AFTER = args['probe-fail-after'] === undefined ? undefined : count('probe-fail-after', args['probe-fail-after'], 1);
const NOT_READY_MS = count('k8s-not-ready-ms', args['k8s-not-ready-ms']);
const RESTART_MS = count('k8s-restart-ms', args['k8s-restart-ms']);
const READINESS_FAIL_MS = count('k8s-readiness-fail-ms', args['k8s-readiness-fail-ms']);
const LIVENESS_FAIL_MS = count('k8s-liveness-fail-ms', args['k8s-liveness-fail-ms'] ?? args['k8s-readiness-fail-ms']);
const GRACE_MS = count('k8s-grace-ms', args['k8s-grace-ms']);
/** How long a coil-egress start may take under TCG before the bench gives up. */
const NAT_READY_TIMEOUT_MS = 120_000;
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
/**
 * The bench's own kernel writes at a loss (a NAT pod's node link down, and up after the run): one
 * rtnetlink round trip through a netlink agent of its own, warmed before the first loss, so the
 * loss comes when t0 says. An `ip` process, as before, took seconds to start on a VM starved by a
 * loaded machine (2026-12-07, load average 14): the link went down seconds after t0, and a run
 * read an outage of 0 for a client whose NAT pod was lost after the window had begun.
 */
const faultAgent = new NetlinkAgent();
const faults = new NetlinkExecutor({ ip, rtnetlink: faultAgent });
/** Sets NAT pod `idx`'s (1-based) link on the node up or down. */
const natLink = (n: TestNetns, idx: number, up: boolean) => faults.apply([rt.linkSet(`n-e${idx}`, { up })], { netns: n.path });
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
  /** coil's path: the NAT pods its prober declared down that were not lost ({@link falseDowns}). */
  falseDowns?: string[];
  /** `sigkill`/`sigstop`: kubelet's steps (ms after the signal) and what the restart of coil-egress changed in its netns. */
  restart?: string;
  /**
   * coil's `graceful`: when the pod stopped serving and its link went down, and when coild ended
   * the drain (deleted the drained peer link), ms after t0: `not serving +N, link down +N, drain
   * ended +N ms` (`drain not ended` when coild had not by the read).
   */
  drain?: string;
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
  // The NAT pods: the real coil-egress in each netns, against a stand-in of the API server's pod
  // list (egress-agent-process.ts); it sets up the FoU port, the NAT rules, the return rule and the
  // peer links to the clients, as in its pod. E2 runs Coil's default backend (iptables), E1 and E3
  // nftables: steered tunnels work with a NAT pod set up as Coil's.
  const clientPods: V1Pod[] = clients.map((c) => ({ metadata: { namespace: 'app', name: `client${c.index}`, uid: `uid-${c.index}`, annotations: { 'egress.coil.cybozu.com/internet': 'nat' } },
    spec: { containers: [] }, status: { phase: 'Running', podIP: c.address, podIPs: [{ ip: c.address }] } }));
  podList = new PodListStandIn(clientPods);
  const apiPort = await podList.start();
  kubeconfigDir = await mkdtemp(join(tmpdir(), 'coil-bench-kubeconfig-'));
  for (const [i, e] of es.entries()) {
    const host = V6 ? `[${A.natGw(i + 1)}]` : A.natGw(i + 1);
    const kubeconfig = await writeKubeconfig(kubeconfigDir, e.name, `http://${host}:${apiPort}`);
    natPods.push(new CoilEgressProcess({ ns: e, address: NAT[i]!, kubeconfig, backend: i === 1 ? 'iptables' : 'nftables', onLog: (l) => log(`coil-egress ${NAT[i]}: ${l}`) }));
  }
  // One after another: three first starts at once under TCG time out coil-egress's first nft.
  for (const p of natPods) {
    p.start();
    await p.waitReady(NAT_READY_TIMEOUT_MS);
  }
  await faults.dump({ kind: 'links' }, { netns: n.path });
  log(`topology up; clients ${clients.map((c) => c.address).join(', ')}`);

  const echo = await inNetns(x, ECHO);
  const burners = Array.from({ length: BURN }, () => spawn(process.execPath, ['-e', 'for(;;){}'], { stdio: 'ignore' }));
  const rows: Row[] = [];
  try {
    // Each row is printed as soon as its run ends, so a run cut short keeps what it measured.
    printDetailHeader();
    for (const { kind, runs } of KIND_RUNS) {
      for (let i = 0; i < runs; i++) {
        if (PATHS.includes('coil')) {
          rows.push(await coilRun(n, clients, kind, kind === 'scale-up' ? NAT[2]! : NAT[i % NAT.length]!));
          printDetail(rows[rows.length - 1]!);
        }
        if (kind !== 'steady' && PATHS.includes('Coil')) {
          rows.push(await coilBaselineRun(n, clients, kind, i));
          printDetail(rows[rows.length - 1]!);
        }
      }
    }
  } finally {
    echo.kill();
    for (const b of burners) b.kill('SIGKILL');
  }
  return rows;
}

/** Each NAT pod's coil-egress, in NAT order. */
const natPods: CoilEgressProcess[] = [];
/** The API server's stand-in for coil-egress's pod list, and the directory of its kubeconfigs. */
let podList: PodListStandIn | undefined;
let kubeconfigDir: string | undefined;

/** kubelet's delays (egress-agent-process.ts, {@link playKubelet}), from the flags. */
const KUBELET: KubeletTimings = { notReadyMs: NOT_READY_MS, restartMs: RESTART_MS, readinessFailMs: READINESS_FAIL_MS, livenessFailMs: LIVENESS_FAIL_MS, graceMs: GRACE_MS };

/** A hit on a NAT pod's coil-egress and what followed: kubelet's steps, and what its restart changed in the netns. */
interface Hit { t0: number; events: ContainerEvents; change: string; windowMs: number }

/**
 * Hits NAT pod `idx`'s coil-egress with `signal` (at the returned `t0`) and plays kubelet's answer
 * ({@link playKubelet}): `onNotReady` when the endpoint turns not ready, a new TCP stream from
 * every client when the container starts again (a new flow during coil-egress's setup), and
 * `onReady` once its /readyz passes. The netns's peer links, FoU ports and the clients' conntrack
 * entries are read before the signal and after the restart.
 * @returns the steps and the change; `windowMs`: the window to judge (at least `WINDOW_MS` after
 *   the endpoint change, and 2 s past the restarted process's readiness)
 */
async function hitNatProcess(idx: number, signal: 'SIGKILL' | 'SIGSTOP', clients: readonly ClientPod[], ps: readonly ChildProcess[],
  hooks: { onNotReady: () => Promise<void>; onReady?: () => Promise<void> }): Promise<Hit> {
  const pod = natPods[idx]!;
  const addresses = clients.map((c) => c.address);
  const family = V6 ? 6 : 4;
  const before: NatState = await natState(ip, pod.ns, addresses, family);
  const t0 = Date.now();
  pod.signal(signal);
  const events = await playKubelet(pod, signal, t0, KUBELET, {
    onNotReady: hooks.onNotReady,
    onRestart: () => { for (const p of ps) p.stdin!.write('open\n'); },
    ...(hooks.onReady ? { onReady: hooks.onReady } : {}),
  }, NAT_READY_TIMEOUT_MS);
  const after = await natState(ip, pod.ns, addresses, family);
  log(`${signal} ${NAT[idx]}: ${JSON.stringify(events)}; ${natStateChange(before, after)}`);
  return { t0, events, change: natStateChange(before, after), windowMs: Math.max((events.notReadyAt ?? 0) + WINDOW_MS, (events.readyAt ?? 0) + 2_000) };
}

/** Every change of a NAT pod's health that coild's prober made (its log), with the time. */
const healthChanges: Array<{ at: number; natPod: string; health: string }> = [];
/** The steering's logger: keeps the prober's health changes (and prints them with `-v`). */
const steeringLogger = createLogger({ name: 'bench-steering', level: 'info', stream: { write: (line: string) => {
  const r = JSON.parse(line) as { msg?: string; natPod?: string; health?: string; previous?: string };
  if (r.msg !== 'NAT pod health changed' || !r.natPod || !r.health) return true;
  healthChanges.push({ at: Date.now(), natPod: r.natPod, health: r.health });
  log(`prober: ${r.natPod} ${r.previous} → ${r.health}`);
  return true;
} } as unknown as NodeJS.WritableStream });

/**
 * The NAT pods coild's prober declared down since `t0` although they were not lost (`lost`):
 * false failovers, each moving the clients of a healthy NAT pod; `address +N ms` each.
 */
function falseDowns(t0: number, lost: string | undefined): string[] {
  return healthChanges.filter((h) => h.at >= t0 && h.health === 'down' && h.natPod !== lost).map((h) => `${h.natPod} +${h.at - t0} ms`);
}

/** A hit's summary for the table: `not ready +N, killed +N, restarted +N, ready +N ms; <what changed>`. */
function restartOf(h: Hit): string {
  const e = h.events;
  return `not ready +${e.notReadyAt}${e.killedAt !== undefined ? `, killed +${e.killedAt}` : ''}, restarted +${e.restartedAt}, ready +${e.readyAt} ms; ${h.change}`;
}

/**
 * The clients' records for a window ending at `end`, read once every client's path has drained
 * (egress-failover-measure.ts `drained`), or {@link DRAIN_TIMEOUT_MS} after `end` for a path that
 * never recovered.
 */
async function readDrained(ps: readonly ChildProcess[], end: number): Promise<Dump[]> {
  await sleep(Math.max(0, end - Date.now()));
  for (;;) {
    const dumps = await Promise.all(ps.map((p) => ask<Dump>(p, 'dump')));
    if (dumps.every((d) => drained(d, end)) || Date.now() > end + DRAIN_TIMEOUT_MS) return dumps;
    await sleep(200);
  }
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
  /** When a retarget deleted the drained link (its plan had drains, the next has none), ms after t0. */
  let drainEndedMs: number | undefined;
  const steering = new NatSteering({ cache: api.cache, port: 5555, logger: steeringLogger, registry, onChange: (e) => watcher?.onSteeringChange(e), ...(FAIL_AFTER ? { probeFailAfter: FAIL_AFTER } : {}) });
  // coild's flow pinning, on the nftables backend (docs/egress-failover.md#draining).
  const egressClient = new EgressClient({ ip: coildIp, kernel: coildKernel, port: 5555, flowPins: { enabled: true, applier: new FlowPins({ ip: coildIp, backend: 'nftables' }) } });
  const retarget = egressClient.retarget.bind(egressClient);
  egressClient.retarget = async (...a) => {
    const moved = await retarget(...a);
    if (t0 && movedMs === undefined) movedMs = Date.now() - t0;
    if (t0 && drainEndedMs === undefined && a[1].drains.length > 0 && a[2].drains.length === 0) drainEndedMs = Date.now() - t0;
    if (t0) log(`coil ${kind}: retarget ${a[1].peers.map((p) => p.remote).join()} → ${a[2].peers.map((p) => p.remote).join()}${a[2].drains.length > 0 ? ` draining ${a[2].drains.map((p) => p.remote).join()}` : ''} done +${Date.now() - t0} ms`);
    return moved;
  };
  watcher = new EgressWatcher({
    cache: api.cache, client: api.client, recorder: { event: () => undefined } as unknown as EventRecorder,
    egressClient, locks: new KeyedMutex(), lockKey: (a, b) => `${a}:${b}`, logger: args.verbose ? createLogger({ name: 'bench-coild', level: 'warn' }) : silentLogger(),
    stateDir, port: 5555, probe: async () => ({ veth: true, ipv6: true, vxlan: true, ipip: true, ip6tnl: true, fou: true }), registry, steering,
  });
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
      const seenSteady = (await readDrained(ps, t0 + STEADY_MS)).map((d) => measure(d, t0, STEADY_MS));
      const probes = await probeStats(registry);
      log(`coil steady: ${JSON.stringify(probes)}`);
      return { path: 'coil', kind, lost: `none (${STEADY_MS / 1000} s, ${BURN} busy processes)`, onLost: [], others: seenSteady, probes, falseDowns: falseDowns(t0, undefined) };
    }
    if (kind === 'sigkill' || kind === 'sigstop') {
      const signal = kind === 'sigkill' ? 'SIGKILL' : 'SIGSTOP';
      const hit = await hitNatProcess(idx - 1, signal, clients, ps, {
        onNotReady: async () => { api.put(Kinds.EndpointSlice.kind, slice({ ...all, [lost]: { serving: false, terminating: false } })); },
        onReady: async () => { api.put(Kinds.EndpointSlice.kind, slice(all)); },
      });
      const m = (await readDrained(ps, hit.t0 + hit.windowMs)).map((d) => measure(d, hit.t0, hit.windowMs));
      log(`coil ${kind}: ${lost}, ${JSON.stringify(m)}`);
      return { path: 'coil', kind, lost, onLost: m.filter((_, i) => on[i] === lost), others: m.filter((_, i) => on[i] !== lost), probes: await probeStats(registry), falseDowns: falseDowns(hit.t0, undefined), restart: restartOf(hit) };
    }
    if (kind === 'scale-up') {
      api.put(Kinds.EndpointSlice.kind, slice(all));
      const seenUp = (await readDrained(ps, t0 + WINDOW_MS)).map((d) => measure(d, t0, WINDOW_MS));
      log(`coil scale-up: added ${lost}, ${JSON.stringify(seenUp)}`);
      return { path: 'coil', kind, lost: `${lost} added`, onLost: [], others: seenUp, probes: await probeStats(registry), falseDowns: falseDowns(t0, undefined) };
    }
    let notServingMs: number | undefined;
    if (kind === 'graceful') {
      api.put(Kinds.EndpointSlice.kind, slice({ ...all, [lost]: { serving: true, terminating: true } }));
      // A connection opened during the drain: it should go to another NAT pod and outlive this one.
      await sleep(500);
      for (const p of ps) p.stdin!.write('open\n');
      await sleep(500);
      api.put(Kinds.EndpointSlice.kind, slice({ ...all, [lost]: { serving: false, terminating: true } }));
      notServingMs = Date.now() - t0;
      log(`coil graceful: ${lost} not serving +${notServingMs} ms`);
      // The sandbox (and its netns) goes some time after the containers stopped and the endpoint
      // turned not serving: kubelet's teardown, the CNI DEL. 200 ms here, a lower bound.
      await sleep(200);
    }
    await natLink(n, idx, false);
    const linkDownMs = Date.now() - t0;
    const m = (await readDrained(ps, t0 + WINDOW_MS)).map((d) => measure(d, t0, WINDOW_MS));
    const drain = notServingMs === undefined ? undefined
      : `not serving +${notServingMs}, link down +${linkDownMs}, ${drainEndedMs === undefined ? 'drain not ended' : `drain ended +${drainEndedMs} ms`}`;
    await natLink(n, idx, true);
    m.forEach((x, i) => { if (x.answeredBefore === 0) throw new Error(`coil: client ${clients[i]!.address} got no answer through NAT pod ${on[i]} before the loss`); });
    // Detected: when the prober declared the lost NAT pod down (not any change: another pod's false failover is not a detection).
    const down = healthChanges.find((h) => h.at >= t0 && h.natPod === lost && h.health === 'down');
    if (kind === 'node-lost' && down) detectMs = down.at - t0;
    log(`coil ${kind}: lost ${lost}, detect ${detectMs} ms, moved ${movedMs} ms, ${JSON.stringify(m)}`);
    return { path: 'coil', kind, lost, onLost: m.filter((_, i) => on[i] === lost), others: m.filter((_, i) => on[i] !== lost), ...(detectMs !== undefined ? { detectMs } : {}), ...(movedMs !== undefined ? { movedMs } : {}), probes: await probeStats(registry), falseDowns: falseDowns(t0, lost), ...(drain ? { drain } : {}) };
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
      const seenUp = (await readDrained(ps, t + WINDOW_MS)).map((d) => measure(d, t, WINDOW_MS));
      log(`Coil scale-up: ${JSON.stringify(seenUp)}`);
      return { path: `Coil (endpoint removed +${COIL_DELAY_MS} ms after the pod is gone)`, kind, lost: `${NAT[2]} added`, onLost: [], others: seenUp };
    }
    const lost = on[run % clients.length] ?? NAT[0]!;
    const idx = NAT.indexOf(lost) + 1;
    const t0 = Date.now();
    if (kind === 'sigkill' || kind === 'sigstop') {
      // kube-proxy, once the endpoint is not ready: out of the DNAT, its UDP conntrack entries flushed.
      const hit = await hitNatProcess(idx - 1, kind === 'sigkill' ? 'SIGKILL' : 'SIGSTOP', clients, ps, {
        onNotReady: async () => {
          await setDnat(n, NAT.filter((a) => a !== lost));
          await ip.exec(['conntrack', '-D', ...CT_FAMILY, '-p', 'udp', '--reply-src', lost]).catch(() => undefined);
        },
        // Ready again: back in the DNAT for new flows; established ones stay where they went.
        onReady: () => setDnat(n, NAT),
      });
      const m = (await readDrained(ps, hit.t0 + hit.windowMs)).map((d) => measure(d, hit.t0, hit.windowMs));
      log(`Coil ${kind}: ${lost}, ${JSON.stringify(m)}`);
      return { path: 'Coil (kube-proxy)', kind, lost, onLost: m.filter((_, i) => on[i] === lost), others: m.filter((_, i) => on[i] !== lost), restart: restartOf(hit) };
    }
    if (kind === 'graceful') {
      // kube-proxy as it treats an endpoint that stops serving (docs/egress-failover.md#measured):
      // terminating but serving, it leaves the DNAT for new flows while a ready endpoint is left
      // (pkg/proxy/topology.go CategorizeEndpoints), and its UDP conntrack entries stay
      // (pkg/proxy/conntrack/cleanup.go CleanStaleEntries keeps those of serving endpoints,
      // terminating or not): the tunnel's flow, one fixed 5-tuple, stays on the pod. The same
      // timeline as coil's row: terminating at 0, a new stream at +0.5 s, not serving at +1 s
      // — then CleanStaleEntries deletes the tunnel's entry and its next packet is DNATed anew —,
      // the sandbox gone at +1.2 s.
      await setDnat(n, NAT.filter((a) => a !== lost));
      await sleep(500);
      for (const p of ps) p.stdin!.write('open\n');
      await sleep(500);
      await ip.exec(['conntrack', '-D', ...CT_FAMILY, '-p', 'udp', '--reply-src', lost]).catch(() => undefined);
      log(`Coil graceful: ${lost} not serving +${Date.now() - t0} ms`);
      await sleep(200);
      await natLink(n, idx, false);
    } else {
      await natLink(n, idx, false);
      await sleep(COIL_DELAY_MS);
      // kube-proxy: the endpoint leaves the DNAT, and UDP conntrack entries towards it are flushed.
      await setDnat(n, NAT.filter((a) => a !== lost));
      await ip.exec(['conntrack', '-D', ...CT_FAMILY, '-p', 'udp', '--reply-src', lost]).catch(() => undefined);
    }
    const m = (await readDrained(ps, t0 + WINDOW_MS)).map((d) => measure(d, t0, WINDOW_MS));
    await natLink(n, idx, true);
    m.forEach((x, i) => { if (x.answeredBefore === 0) throw new Error(`Coil: client ${clients[i]!.address} got no answer through the ClusterIP before the loss`); });
    log(`Coil ${kind}: lost ${lost}, ${JSON.stringify(m)}`);
    const path = kind === 'graceful' ? 'Coil (kube-proxy: terminating, then not serving)' : `Coil (endpoint removed +${COIL_DELAY_MS} ms after the pod is gone)`;
    return { path, kind, lost, onLost: m.filter((_, i) => on[i] === lost), others: m.filter((_, i) => on[i] !== lost) };
  } finally {
    await stopClients(ps);
    for (const c of clients) await client.remove(c.ns.path);
  }
}

/** The detail table's header (and the run's settings above it). */
function printDetailHeader(): void {
  console.log(`IPv${args.family}; move: ${args.move}; probe: down after ${FAIL_AFTER ?? 'the default number of'} unanswered probes; k8s delays (ms): not ready after a kill ${NOT_READY_MS}, restart ${RESTART_MS}, readiness failed after a stop ${READINESS_FAIL_MS}, liveness ${LIVENESS_FAIL_MS}, grace period ${GRACE_MS}`);
  console.log('| path | loss | NAT pod lost | detected / moved (ms) | outage (ms) | probes lost / sent | its streams | other clients: probes lost, streams disturbed | their disturbed streams | longest client stall / probe RTT (ms); answered late (lost to the former read); probes sent of due (fewest) | coild: failovers, probe RTT > 25/100/250 ms of answered | NAT pod: kubelet steps (ms) and its netns across the restart of coil-egress, or the steps of its drain |');
  console.log('|---|---|---|---|---:|---:|---|---|---|---:|---|---|');
}

/** One run's row of the detail table. */
function printDetail(r: Row): void {
  const worst = r.onLost.reduce((a, s) => (s.outageMs > a.outageMs ? s : a), { outageMs: 0 } as Seen);
  console.log(`| ${r.path} | ${r.kind} | ${r.lost} | ${r.detectMs ?? '-'} / ${r.movedMs ?? '-'} | ${fmt(worst.outageMs)} | ${r.onLost.reduce((a, s) => a + s.lost, 0)} / ${r.onLost.reduce((a, s) => a + s.sent, 0)} | ${r.onLost.flatMap((s) => [...s.streams, ...s.late]).join('; ')} | ${r.others.reduce((a, s) => a + s.lost, 0)}, ${r.others.reduce((a, s) => a + s.disturbed, 0)} | ${r.others.flatMap((s) => s.streams.filter((x) => x !== 'kept')).join('; ')} | ${Math.max(0, ...r.onLost.map((s) => s.stallMs), ...r.others.map((s) => s.stallMs))} / ${Math.max(0, ...r.onLost.map((s) => s.maxRttMs), ...r.others.map((s) => s.maxRttMs))}; ${[...r.onLost, ...r.others].reduce((a, s) => a + s.lateAnswers, 0)}; ${Math.round(100 * sentOfDue(r))} %${starved(r) ? ' (starved)' : ''} | ${r.probes ? `${r.probes.failovers}${r.falseDowns?.length ? ` (not lost: ${r.falseDowns.join(', ')})` : ''}, ${r.probes.over25ms}/${r.probes.over100ms}/${r.probes.over250ms} of ${r.probes.answered}` : '-'} | ${r.restart ?? r.drain ?? '-'} |`);
}

/** The fewest probes a client of the run sent, as a share of those due. */
const sentOfDue = (r: Row) => Math.min(1, ...r.onLost.map((s) => s.sentOfDue), ...r.others.map((s) => s.sentOfDue));
/** A run whose VM was starved ({@link STARVED_SHARE}): its figures say how little CPU the VM got, not what coild does. */
const starved = (r: Row) => sentOfDue(r) < STARVED_SHARE;

const fmt = (ms: number) => (Number.isFinite(ms) ? String(ms) : 'no answer');

main().then(
  async (rows) => {
    console.log('');
    console.log(`| path | loss | runs | outage p50 (ms) | outage max (ms) | probes lost on the lost NAT pod (sum) | other clients: probes lost, streams disturbed (sum) | coild false failovers (sum: NAT pods declared down that were not lost) | clients on the lost NAT pod (fewest in a run) | starved runs (a client sent < ${100 * STARVED_SHARE} % of its probes) |`);
    console.log('|---|---|---:|---:|---:|---:|---|---:|---:|---:|');
    const groups = new Map<string, Row[]>();
    for (const r of rows) groups.set(`${r.path}|${r.kind}`, [...(groups.get(`${r.path}|${r.kind}`) ?? []), r]);
    for (const [k, rs] of groups) {
      // A run with no client on the lost NAT pod has no outage to judge: left out of p50 and max,
      // and the last column shows it (0).
      const o = rs.filter((r) => r.onLost.length > 0).map((r) => Math.max(...r.onLost.map((s) => s.outageMs))).sort((a, b) => a - b);
      const [path, kind] = k.split('|');
      const onLost = ['node-lost', 'graceful', 'sigkill', 'sigstop'].includes(kind!) ? String(Math.min(...rs.map((r) => r.onLost.length))) : '-';
      console.log(`| ${path} | ${kind} | ${rs.length} | ${o.length > 0 ? fmt(o[Math.floor((o.length - 1) / 2)]!) : '-'} | ${o.length > 0 ? fmt(o[o.length - 1]!) : '-'} | ${rs.reduce((a, r) => a + r.onLost.reduce((b, s) => b + s.lost, 0), 0)} | ${rs.reduce((a, r) => a + r.others.reduce((b, s) => b + s.lost, 0), 0)}, ${rs.reduce((a, r) => a + r.others.reduce((b, s) => b + s.disturbed, 0), 0)} | ${rs[0]!.falseDowns ? rs.reduce((a, r) => a + (r.falseDowns?.length ?? 0), 0) : '-'} | ${onLost} | ${rs.filter(starved).length} |`);
    }
    console.log(`load average ${(await import('node:os')).loadavg().map((l) => l.toFixed(2)).join(' ')}, wall ${((Date.now() - started) / 1000).toFixed(1)} s`);
    helper.stop();
    agent.stop();
    faultAgent.stop();
    for (const p of natPods) { p.signal('SIGCONT'); p.signal('SIGKILL'); }
    await podList?.stop();
    if (kubeconfigDir) await rm(kubeconfigDir, { recursive: true, force: true });
    await netns.cleanup();
    await ip.exec(['ip', 'netns', 'del', 'coilbench-node']).catch(() => undefined);
    process.exit(0);
  },
  async (err: unknown) => {
    console.error(`FAIL ${err instanceof Error ? err.stack : String(err)}`);
    helper.stop();
    agent.stop();
    faultAgent.stop();
    for (const p of natPods) { p.signal('SIGCONT'); p.signal('SIGKILL'); }
    await podList?.stop();
    if (kubeconfigDir) await rm(kubeconfigDir, { recursive: true, force: true });
    await netns.cleanup();
    await ip.exec(['ip', 'netns', 'del', 'coilbench-node']).catch(() => undefined);
    process.exit(1);
  },
);
