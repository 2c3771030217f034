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
 *
 * The loss: A's veth is deleted (its link on N goes with it) and its netns removed: the pod is
 * gone with its conntrack, as a SIGKILLed pod's sandbox or its node. A is created again between
 * runs. Per stream: kept (the stream went on), reset or hung; the stall (ms from the loss to the
 * first echo after the move); bytes sent, echoed, and echoed out of order or wrong (the client
 * writes a counter, the target echoes it and the client checks every byte); the source address
 * and port the target saw before and after.
 */
import type { ChildProcess } from 'node:child_process';
import { IpRunner } from '../../src/netlink/ip-runner.js';
import { EgressClient, planEgressClient, type EgressClientPlan } from '../../src/node-agent/egress/egress-client.js';
import { TestNetnsSet, type TestNetns } from './test-netns.js';
import { sleep } from '../../src/runtime/clock.js';
import { FOU_PORT, TARGET, ask, inNetns, quit, startNatPod, wireEgressTestbed, wireNatPod, type ClientPod, type EgressTestbed } from './egress-testbed.js';

/** The modes (see the file header). */
export const SESSION_MODES = ['masquerade', 'shared', 'collision', 'two-active'] as const;
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
export interface SessionRow { mode: SessionMode; run: number; streams: StreamSeen[]; moveMs: number }

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
        for (let run = 0; run < (mode === 'masquerade' || mode === 'shared' ? o.runs : o.collisionRuns); run++) rows.push(await oneRun(ip, netns, tunnels, bed, server, mode, run, o));
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
    const streams = dumps.map((d, i): StreamSeen => {
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
    o.log(`${mode} run ${run}: ${JSON.stringify(streams)}`);
    return { mode, run, streams, moveMs };
  } finally {
    for (const p of ps) await quit(p);
    for (const c of clients) await tunnels.remove(c.ns.path).catch(() => undefined);
    // Fresh NAT pods for the next run (A's replacement; B's rules may be another mode's).
    await ip.batch([['link', 'del', 'dev', 'n-e2']], { netns: bed.n.path });
    await netns.remove(bed.nat[1]!);
    for (const i of [0, 1]) bed.nat[i] = await wireNatPod(ip, netns, bed.n, i, NAT[i]!);
  }
}
