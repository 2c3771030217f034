/**
 * Prototype and measurement (not a test): does a TCP stream from a client pod through NAT pod A
 * to an external target survive the loss of A, continuing through NAT pod B once the client's
 * tunnel moved? Run by hack/bench/egress-session-keeping.ts in the stock-kernel VM:
 *   flock /tmp/coil-heavy.lock hack/fou-vm.sh -- node dist/hack/bench/egress-session-keeping.js [flags]
 * Testbed: test/netns/egress-testbed.ts (the failover bench's topology) with two NAT pods A
 * (10.2.1.2) and B (10.2.2.2) set up by coil-egress's code, clients C1 (10.1.1.2), C2 (10.1.2.2).
 *
 * Modes (what the NAT pods do):
 * - `masquerade`: Coil's NAT (the plain path): each NAT pod masquerades to its own address.
 * - `shared`: both SNAT to a shared address S (203.0.113.10) without a port range, so the kernel
 *   keeps the client's source port; N (the router in front of the NAT pods) routes S to A. At the
 *   loss, after `detect` ms (coild's detection, a stand-in: the failover bench measures it), the
 *   client's tunnel is moved to B with coild's EgressClient.retarget and N's route for S moves to
 *   B (a stand-in for what the network does: see docs/egress-failover.md). The client's next
 *   segment reaches B, `nf_conntrack_tcp_loose` picks the flow up, B SNATs it to S with the same
 *   port, and the server sees the same 4-tuple.
 * - `collision`: `shared`, with C1 and C2 both on A, both bound to the same source port, both to
 *   the same server port: A keeps the port for the first and gives the second another.
 * - `two-active`: `shared`, with C1 on A and C2 on B at once (S routed to A), both bound to the
 *   same source port: two NAT pods SNAT two different flows to the same 4-tuple; nothing is lost.
 * - `option`: the Egress option built on `shared` (`spec.snatAddresses`), with no hand moves: the
 *   NAT pods get their flags from the Egress controller's pod spec (egressContainer) through
 *   coil-egress's flag parsing; the node runs coild's own parts — EgressWatcher, NatSteering with
 *   its FoU probes (nodeName set: it hosts the NAT pods), EgressClient, and SnatRouter, which
 *   routes S to the active NAT pod (here in N's main table: the testbed routes its NAT pods there,
 *   where coild uses its pod table 116) — and only the API server is a stand-in (objects in
 *   memory). Both clients go to the Egress's active NAT pod, which is the one lost; coild's probe
 *   notices, moves both tunnels to the other NAT pod and re-routes S to it. What the network would
 *   add in a cluster (BIRD announcing the moved S/32 from another node) is not here: both NAT
 *   pods run on N, and X routes S to N.
 *
 * The loss: A's veth is deleted (its link on N goes with it) and its netns removed: the pod is
 * gone with its conntrack, as a SIGKILLed pod's sandbox or its node. A is created again between
 * runs. Per stream: kept (the stream went on), reset or hung; the stall (ms from the loss to the
 * first echo after the move); bytes sent, echoed, and echoed out of order or wrong (the client
 * writes a counter, the target echoes it and the client checks every byte); the source address
 * and port the target saw before and after.
 */
import type { ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { V1EndpointSlice, V1Pod, V1Service } from '@kubernetes/client-node';
import { Registry } from 'prom-client';
import { EGRESS_CONTAINER_NAME, type Egress } from '../../src/api/v2/egress.js';
import type { NetfilterBackend } from '../../src/api/v2/keys.js';
import { Kinds } from '../../src/api/v2/kinds.js';
import { parseEgressConfig, type EgressConfig } from '../../src/egress-agent/config.js';
import { NetlinkExecutor } from '../../src/netlink/netlink-executor.js';
import { EgressWatcher } from '../../src/node-agent/egress/egress-watcher.js';
import { NatSteering } from '../../src/node-agent/egress/nat-steering.js';
import { SnatRouter } from '../../src/node-agent/egress/snat-routes.js';
import { KeyedMutex } from '../../src/node-agent/podnet/keyed-mutex.js';
import { egressContainer } from '../../src/reconcilers/egress-objects.js';
import type { EgressOptions } from '../../src/reconcilers/egress-options.js';
import type { EventRecorder } from '../../src/runtime/event-recorder.js';
import { silentLogger } from '../../src/runtime/logging.js';
import { IpRunner } from '../../src/netlink/iproute2/ip-runner.js';
import { EgressClient, planEgressClient, type EgressClientPlan } from '../../src/node-agent/egress/egress-client.js';
import { TestNetnsSet, type TestNetns } from './test-netns.js';
import { sleep } from '../../src/runtime/clock.js';
import { ApiStandIn, FOU_PORT, TARGET, ask, inNetns, quit, startNatPod, wireEgressTestbed, wireNatPod, type ClientPod, type EgressTestbed } from './egress-testbed.js';

/** The modes (see the file header). */
export const SESSION_MODES = ['masquerade', 'shared', 'collision', 'two-active', 'option'] as const;
export type SessionMode = (typeof SESSION_MODES)[number];

/** The shared SNAT address of the prototype (TEST-NET-3). */
export const SHARED_ADDRESS = '203.0.113.10';
const NAT = ['10.2.1.2', '10.2.2.2'];
const CLIENTS = ['10.1.1.2', '10.1.2.2'];
/** The source port both clients bind in `collision` and `two-active`. */
const FIXED_PORT = 40_000;

/** What to run. */
export interface SessionKeepingOptions {
  modes: readonly SessionMode[];
  /** Runs of `masquerade` and `shared`. */
  runs: number;
  /** Runs of `collision` and `two-active`. */
  collisionRuns: number;
  /** ms from the loss to the tunnel's move and S's route move (coild's detection). */
  detectMs: number;
  /** ms the streams run after the loss. */
  windowMs: number;
  log: (s: string) => void;
}

/** One stream's outcome. */
export interface StreamSeen {
  client: string;
  /** `kept`, `reset +N ms (CODE)`, `closed +N ms`, `hung`. */
  fate: string;
  kept: boolean;
  /** ms from the loss to the first echo after the tunnel moved; undefined when none came. */
  stallMs?: number;
  sent: number;
  echoed: number;
  /** Bytes echoed that were not the next expected byte (a loss, duplication or corruption). */
  bad: number;
  /** The source address:port the target saw for this stream, in order of the connections it accepted. */
  seenAs: string[];
}

/** One run. */
export interface SessionRow {
  mode: SessionMode; run: number; streams: StreamSeen[];
  /** ms from the loss to the last client's tunnel move (`option`: coild's detection and move). */
  moveMs: number;
  /** `option`: ms from the loss to S's route pointing at the new active NAT pod. */
  routeMs?: number;
}

/** The target: echoes every TCP connection on port argv[1] (default 7008) and reports which peers it saw and what they sent. */
export const STREAM_SERVER = `const conns=[];require('net').createServer((c)=>{const r={peer:c.remoteAddress+':'+c.remotePort,bytes:0,err:''};conns.push(r);
c.on('data',(b)=>{r.bytes+=b.length;c.write(b);});c.on('error',(e)=>{r.err=e.code;});}).listen(+(process.argv[1]||7008),()=>console.log('ready'));
process.stdin.on('data',(d)=>{for(const l of d.toString().split('\\n')){if(l==='dump')console.log(JSON.stringify(conns));if(l==='quit')process.exit(0);}});`;

/**
 * A client: one TCP stream to argv[1], port argv[3] (default 7008), from source port argv[2] (0: any), writing 64 bytes of a
 * mod-251 counter every 20 ms until `stop`; checks that the echo is the same counter, byte by byte.
 */
export const STREAM_CLIENT = `const net=require('net');const [target,port]=[process.argv[1],+process.argv[2]];
const st={sent:0,echoed:0,bad:0,echo:[],err:'',errAt:0,closedAt:0,local:0,connected:false};let stop=false;console.log('ready');
const c=net.connect({port:+(process.argv[3]||7008),host:target,...(port?{localPort:port}:{})},()=>{st.local=c.localPort;st.connected=true;
 const t=setInterval(()=>{if(stop||st.errAt||st.closedAt){clearInterval(t);return;}const b=Buffer.alloc(64);for(let i=0;i<64;i++)b[i]=(st.sent+i)%251;st.sent+=64;c.write(b);},20);});
c.on('data',(b)=>{st.echo.push(Date.now());for(const x of b){if(x!==st.echoed%251)st.bad++;st.echoed++;}});
c.on('error',(e)=>{st.err=e.code;st.errAt=Date.now();});c.on('close',()=>{if(!st.closedAt)st.closedAt=Date.now();});
process.stdin.on('data',(d)=>{for(const l of d.toString().split('\\n')){if(l==='stop')stop=true;if(l==='dump')console.log(JSON.stringify(st));if(l==='quit')process.exit(0);}});`;

export interface ClientDump { connected: boolean; sent: number; echoed: number; bad: number; echo: number[]; err: string; errAt: number; closedAt: number; local: number }

function tunnelTo(client: ClientPod, nat: string): EgressClientPlan {
  return planEgressClient({ podIps: [client.address], port: FOU_PORT, gateways: [{ egress: 'internet/nat', clusterIp: nat, destinations: ['198.51.100.0/24'], isSourcePortAuto: false }] });
}

/** Runs the modes; @returns one row per run. Needs root and FoU (the VM). */
export async function runSessionKeeping(o: SessionKeepingOptions): Promise<SessionRow[]> {
  const ip = new IpRunner({ timeoutMs: 60_000 });
  const netns = new TestNetnsSet({ ip });
  const tunnels = new EgressClient({ ip, port: FOU_PORT });
  let bed: EgressTestbed | undefined;
  const rows: SessionRow[] = [];
  try {
    bed = await wireEgressTestbed(ip, netns, { nodeName: 'coilbench-node', natAddresses: NAT, clientAddresses: CLIENTS });
    // The outside world routes S to the NAT pods' network (here N, which routes it to one of them).
    await ip.batch([['route', 'add', `${SHARED_ADDRESS}/32`, 'via', '198.51.100.1']], { netns: bed.x.path });
    const server = await inNetns(bed.x, STREAM_SERVER);
    try {
      for (const mode of o.modes) {
        for (let run = 0; run < (mode === 'masquerade' || mode === 'shared' || mode === 'option' ? o.runs : o.collisionRuns); run++) {
          rows.push(mode === 'option' ? await optionRun(ip, netns, bed, server, run, o) : await oneRun(ip, netns, tunnels, bed, server, mode, run, o));
        }
      }
    } finally {
      await quit(server);
    }
    return rows;
  } finally {
    if (bed) for (const c of bed.clients) await tunnels.remove(c.ns.path).catch(() => undefined);
    await netns.cleanup();
    await ip.exec(['ip', 'netns', 'del', 'coilbench-node']).catch(() => undefined);
  }
}

async function setUpNat(ip: IpRunner, bed: EgressTestbed, mode: SessionMode): Promise<void> {
  const snat = mode === 'masquerade' ? {} : { snatAddresses: [SHARED_ADDRESS] };
  // A with nftables, B with Coil's iptables rules: both backends carry the shared address.
  for (const [i, e] of bed.nat.entries()) await startNatPod(ip, e, NAT[i]!, CLIENTS, { backend: i === 0 ? 'nftables' : 'iptables', ...snat });
}

async function oneRun(ip: IpRunner, netns: TestNetnsSet, tunnels: EgressClient, bed: EgressTestbed, server: ChildProcess, mode: SessionMode, run: number, o: SessionKeepingOptions): Promise<SessionRow> {
  await setUpNat(ip, bed, mode);
  await ip.exec(['conntrack', '-F']).catch(() => undefined);
  await ip.batch([['route', 'replace', `${SHARED_ADDRESS}/32`, 'via', NAT[0]!]], { netns: bed.n.path });
  const twoClients = mode === 'collision' || mode === 'two-active';
  const clients = twoClients ? bed.clients : bed.clients.slice(0, 1);
  const before = await ask<Array<{ peer: string }>>(server, 'dump');
  const firstOn = (c: ClientPod) => (mode === 'two-active' && c.index === 1 ? NAT[1]! : NAT[0]!);
  for (const c of clients) await tunnels.apply(c.ns.path, tunnelTo(c, firstOn(c)));
  o.log(`${mode} run ${run}: NAT pods up`);
  const ps: ChildProcess[] = [];
  // One after the other: in `collision` the first connection owns the port on A.
  for (const c of clients) {
    ps.push(await inNetns(c.ns, STREAM_CLIENT, [TARGET, String(twoClients ? FIXED_PORT : 0)], 10_000));
    await sleep(300);
  }
  let moveMs = 0;
  try {
    await sleep(1_500);
    const t0 = Date.now();
    // A is gone: its veth (both ends) and its netns, with its conntrack.
    await ip.batch([['link', 'del', 'dev', 'n-e1']], { netns: bed.n.path });
    const lost = bed.nat[0]!;
    void netns.remove(lost).catch(() => undefined);
    await sleep(Math.max(0, o.detectMs - (Date.now() - t0)));
    const tMove = Date.now();
    await Promise.all([
      ...clients.filter((c) => firstOn(c) === NAT[0]).map((c) => tunnels.retarget(c.ns.path, tunnelTo(c, NAT[0]!), tunnelTo(c, NAT[1]!))),
      mode === 'masquerade' ? Promise.resolve() : ip.batch([['route', 'replace', `${SHARED_ADDRESS}/32`, 'via', NAT[1]!]], { netns: bed.n.path }),
    ]);
    moveMs = Date.now() - t0;
    o.log(`${mode} run ${run}: moved at +${moveMs} ms`);
    await sleep(Math.max(0, o.windowMs - (Date.now() - t0)));
    for (const p of ps) p.stdin!.write('stop\n');
    await sleep(1_500);
    const dumps = await Promise.all(ps.map((p) => ask<ClientDump>(p, 'dump')));
    const conns = (await ask<Array<{ peer: string; bytes: number }>>(server, 'dump')).slice(before.length);
    const streams = streamsSeen(dumps, clients, conns, t0, tMove, twoClients);
    o.log(`${mode} run ${run}: ${JSON.stringify(streams)}`);
    return { mode, run, streams, moveMs };
  } finally {
    for (const p of ps) await quit(p);
    for (const c of clients) await tunnels.remove(c.ns.path).catch(() => undefined);
    await renewNatPods(ip, netns, bed);
  }
}

/** Each client's stream as the client and the target saw it; `tMove`: when its tunnel moved. */
function streamsSeen(dumps: readonly ClientDump[], clients: readonly ClientPod[], conns: ReadonlyArray<{ peer: string; bytes: number }>, t0: number, tMove: number, twoClients: boolean): StreamSeen[] {
  return dumps.map((d, i): StreamSeen => {
    const fate = !d.connected ? 'never connected' : d.errAt && d.errAt < t0 ? `failed before the loss (${d.err})` : d.errAt ? `reset +${d.errAt - t0} ms (${d.err})` : d.closedAt ? `closed +${d.closedAt - t0} ms` : d.echo.some((t) => t > tMove) ? 'kept' : 'hung';
    const after = d.echo.find((t) => t > tMove);
    const port = String(d.local);
    return {
      client: clients[i]!.address, fate, kept: fate === 'kept' && d.bad === 0 && d.echoed === d.sent,
      ...(after !== undefined ? { stallMs: after - t0 } : {}),
      sent: d.sent, echoed: d.echoed, bad: d.bad,
      // The target's view: connections whose port is this client's (the kernel kept it) or,
      // for the second of two clients on one port, the one A remapped.
      seenAs: conns.filter((c) => c.peer.endsWith(`:${port}`) || twoClients).map((c) => `${c.peer} (${c.bytes} B)`),
    };
  });
}

/** Fresh NAT pods for the next run (A's replacement; B's rules may be another mode's). */
async function renewNatPods(ip: IpRunner, netns: TestNetnsSet, bed: EgressTestbed): Promise<void> {
  for (const i of [0, 1]) {
    await ip.batch([['link', 'del', 'dev', `n-e${i + 1}`]], { netns: bed.n.path }).catch(() => undefined);
    await netns.remove(bed.nat[i]!).catch(() => undefined);
    bed.nat[i] = await wireNatPod(ip, netns, bed.n, i, NAT[i]!);
  }
}

/** The Egress of `option`: its shared address, both NAT pods on the node N. */
const OPTION_EGRESS: Egress = { metadata: { namespace: 'internet', name: 'nat' }, spec: { destinations: ['198.51.100.0/24'], replicas: 2, sessionAffinity: 'ClientIP', snatAddresses: [SHARED_ADDRESS] } };
/** The node name N carries in the `option` run's EndpointSlice. */
const OPTION_NODE = 'coilbench-node';

/**
 * One run of `option` (see the file header): coild's own parts move the clients and S, nothing
 * is moved by hand. The lost NAT pod is the Egress's active one.
 */
async function optionRun(ip: IpRunner, netns: TestNetnsSet, bed: EgressTestbed, server: ChildProcess, run: number, o: SessionKeepingOptions): Promise<SessionRow> {
  // The NAT pods as the Egress controller and coil-egress make them (A nftables, B Coil's iptables rules).
  for (const [i, e] of bed.nat.entries()) {
    const nat = natPodConfig(OPTION_EGRESS, i === 0 ? 'nftables' : 'iptables', NAT[i]!);
    await startNatPod(ip, e, NAT[i]!, CLIENTS, { backend: nat.backend, snatAddresses: nat.snatAddresses });
  }
  await ip.exec(['conntrack', '-F']).catch(() => undefined);
  const api = new ApiStandIn();
  api.put(Kinds.Egress.kind, OPTION_EGRESS);
  const service: V1Service = { metadata: { namespace: 'internet', name: 'nat' }, spec: { clusterIPs: ['10.96.0.100'] } };
  const slice: V1EndpointSlice = { metadata: { namespace: 'internet', name: 'nat-abcde', labels: { 'kubernetes.io/service-name': 'nat', 'app.kubernetes.io/name': 'coil', 'app.kubernetes.io/component': 'egress' } },
    addressType: 'IPv4', endpoints: NAT.map((a) => ({ addresses: [a], conditions: { ready: true, serving: true, terminating: false }, nodeName: OPTION_NODE })) };
  api.put(Kinds.Service.kind, service);
  api.put(Kinds.EndpointSlice.kind, slice);
  const clients = bed.clients;
  const pods: V1Pod[] = clients.map((c) => ({ metadata: { namespace: 'app', name: `client${c.index}`, annotations: { 'egress.coil.cybozu.com/internet': 'nat' } }, spec: { containers: [] } }));
  for (const p of pods) api.put(Kinds.Pod.kind, p);
  const stateDir = await mkdtemp(join(tmpdir(), 'coil-bench-session-'));
  const registry = new Registry();
  const kernel = new NetlinkExecutor({ ip });
  let t0 = 0;
  let moveMs = 0;
  let routeMs: number | undefined;
  let watcher: EgressWatcher | undefined;
  let router: SnatRouter | undefined;
  const steering = new NatSteering({ cache: api.cache, port: FOU_PORT, logger: silentLogger(), registry, nodeName: OPTION_NODE,
    onChange: (e) => { watcher?.onSteeringChange(e); router?.trigger(); } });
  router = new SnatRouter({ cache: api.cache, activeOf: (ref, f) => steering.active(ref, f), hostedNatPods: () => steering.hostedSharedNatPods(), nodeName: OPTION_NODE, kernel, ip, podTableId: 254, protocolId: 30,
    logger: silentLogger(), registry, onExportChange: () => undefined });
  // When S is routed to another NAT pod: the router's routes as last synced (set once the kernel
  // took them), read every 5 ms — its syncs run inside its coalescing loop, not through sync().
  const routeWatch = setInterval(() => {
    if (t0 && routeMs === undefined && router!.routes().some((r) => r.natPod !== lostAddress)) routeMs = Date.now() - t0;
  }, 5).unref();
  const egressClient = new EgressClient({ ip, kernel, port: FOU_PORT });
  const retarget = egressClient.retarget.bind(egressClient);
  egressClient.retarget = async (...a) => {
    const moved = await retarget(...a);
    if (t0) moveMs = Date.now() - t0;
    return moved;
  };
  watcher = new EgressWatcher({
    cache: api.cache, client: api.client, recorder: { event: () => undefined } as unknown as EventRecorder, egressClient, locks: new KeyedMutex(), lockKey: (a, b) => `${a}:${b}`,
    logger: silentLogger(), stateDir, port: FOU_PORT, probe: async () => ({ veth: true, ipv6: true, vxlan: true, ipip: true, ip6tnl: true, fou: true }), registry, steering,
  });
  await watcher.init();
  const ac = new AbortController();
  const loops = [watcher.run(ac.signal), steering.run(ac.signal), router.run(ac.signal)];
  const ps: ChildProcess[] = [];
  let lostAddress = '';
  try {
    for (const [i, c] of clients.entries()) await watcher.onAdd(pods[i]!, { namespace: 'app', name: `client${c.index}`, containerId: `bench${c.index}`, ifname: 'eth0', netns: c.ns.path, ips: [c.address] });
    lostAddress = steering.active({ namespace: 'internet', name: 'nat' }, 4)!.address;
    await router.sync();
    const routed = router.routes().map((r) => `${r.address} via ${r.natPod}`).join();
    if (routed !== `${SHARED_ADDRESS} via ${lostAddress}`) throw new Error(`S is not routed to the active NAT pod ${lostAddress}: ${routed || 'not routed'}`);
    o.log(`option run ${run}: both clients and S on ${lostAddress}`);
    for (const c of clients) {
      ps.push(await inNetns(c.ns, STREAM_CLIENT, [TARGET, '0'], 10_000));
      await sleep(300);
    }
    const before = await ask<Array<{ peer: string }>>(server, 'dump');
    await sleep(1_500);
    t0 = Date.now();
    // The active NAT pod is gone: its veth (both ends) and its netns, with its conntrack.
    const k = NAT.indexOf(lostAddress);
    await ip.batch([['link', 'del', 'dev', `n-e${k + 1}`]], { netns: bed.n.path });
    void netns.remove(bed.nat[k]!).catch(() => undefined);
    await sleep(o.windowMs);
    for (const p of ps) p.stdin!.write('stop\n');
    await sleep(1_500);
    const dumps = await Promise.all(ps.map((p) => ask<ClientDump>(p, 'dump')));
    const conns = (await ask<Array<{ peer: string; bytes: number }>>(server, 'dump')).slice(before.length - clients.length);
    const streams = streamsSeen(dumps, clients, conns, t0, t0 + moveMs, false);
    o.log(`option run ${run}: moved +${moveMs} ms, S re-routed +${routeMs ?? '-'} ms: ${JSON.stringify(streams)}`);
    return { mode: 'option', run, streams, moveMs, ...(routeMs !== undefined ? { routeMs } : {}) };
  } finally {
    clearInterval(routeWatch);
    ac.abort();
    await Promise.all(loops);
    for (const p of ps) await quit(p);
    for (const c of clients) await egressClient.remove(c.ns.path).catch(() => undefined);
    await ip.batch([['route', 'del', `${SHARED_ADDRESS}/32`]], { netns: bed.n.path }).catch(() => undefined);
    await rm(stateDir, { recursive: true, force: true });
    await renewNatPods(ip, netns, bed);
  }
}

/**
 * What coil-egress in NAT pod `address` of `egress` runs with: the flags of the Egress
 * controller's pod spec (egressContainer) parsed by coil-egress's own flag parsing.
 */
function natPodConfig(egress: Egress, backend: NetfilterBackend, address: string): EgressConfig {
  const container = egressContainer({ name: EGRESS_CONTAINER_NAME }, { ...egress, metadata: { ...egress.metadata, uid: 'bench' } }, { image: 'coil', fouPort: FOU_PORT, backend, clusterRole: 'coil-egress' });
  return parseEgressConfig(container.args ?? [], { COIL_POD_NAMESPACE: 'internet', COIL_EGRESS_NAME: 'nat', COIL_POD_ADDRESSES: address });
}
