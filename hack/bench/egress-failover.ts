/**
 * Benchmark (not a test): what a client pod sees when the NAT pod its egress tunnel uses is lost,
 * on coil's path (coild probes the NAT pods and moves the tunnel itself) and on Coil's path (the
 * tunnel points at the Service ClusterIP; kube-proxy moves it once Kubernetes removed the
 * endpoint). Needs FoU: runs in the stock-kernel VM,
 *   flock /tmp/coil-heavy.lock hack/fou-vm.sh -- node dist/hack/bench/egress-failover.js [-k KINDS] [-d COIL_DELAY_MS]
 *
 * Topology (IPv4): the VM's own netns is the node N (this process runs there, as coild does) and
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
 * The client sends a UDP probe every 10 ms to X, which echoes it. Per run: the outage (ms from the
 * loss to the first answer of a probe sent after it) and the probes lost.
 *
 * Kinds of loss (`-k`, comma-separated): `node-lost` (the NAT pod's link goes down: no answer at
 * all, as a lost node or a partition), `graceful` (the pod's endpoint turns terminating, then,
 * 1 s later, not serving and its link goes down: a graceful deletion after its grace period).
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
import { IpRunner } from '../../src/netlink/ip-runner.js';
import { writeSysctl } from '../../src/netlink/sysctl.js';
import { EgressClient, planEgressClient } from '../../src/node-agent/egress/egress-client.js';
import { EgressWatcher } from '../../src/node-agent/egress/egress-watcher.js';
import { NatSteering } from '../../src/node-agent/egress/nat-steering.js';
import { KeyedMutex } from '../../src/node-agent/podnet/keyed-mutex.js';
import type { Cache } from '../../src/runtime/cache.js';
import type { Client } from '../../src/runtime/client.js';
import type { EventRecorder } from '../../src/runtime/event-recorder.js';
import { silentLogger } from '../../src/runtime/logging.js';
import { TestNetnsSet, type TestNetns } from '../../test/netns/test-netns.js';
import { wire } from '../../test/netns/egress-peer.js';

const { values: args } = parseArgs({ options: {
  kinds: { type: 'string', short: 'k', default: 'node-lost,graceful' },
  repeat: { type: 'string', short: 'n', default: '3' },
  'coil-delay': { type: 'string', short: 'd', default: '0' },
  verbose: { type: 'boolean', short: 'v', default: false },
} });
const KINDS = args.kinds.split(',').map((k) => k.trim()).filter(Boolean);
const COIL_DELAY_MS = Number(args['coil-delay']);
const REPEAT = Number(args.repeat);

const ip = new IpRunner({ timeoutMs: 60_000 });
const netns = new TestNetnsSet({ ip });
const CLUSTER_IP = '10.96.0.100';
const CLIENT = '10.1.0.2';
const TARGET = '198.51.100.2';
const NAT = ['10.2.1.2', '10.2.2.2', '10.2.3.2'];
const started = Date.now();
const log = (s: string) => { if (args.verbose) console.error(`[${((Date.now() - started) / 1000).toFixed(1)} s] ${s}`); };

/** The UDP echo at X and the 10 ms prober in C, one small program in each netns. */
const ECHO = `const s=require('dgram').createSocket('udp4');s.on('message',(m,r)=>s.send(m,r.port,r.address));s.bind(7007,()=>console.log('ready'));`;
const PROBE = `const s=require('dgram').createSocket('udp4');const sent=new Map(),got=new Map();let seq=0;
s.on('message',(m)=>{const n=m.readUInt32BE(0);if(!got.has(n))got.set(n,Date.now());});
s.bind(0,()=>{console.log('ready');setInterval(()=>{const b=Buffer.alloc(8);b.writeUInt32BE(++seq,0);sent.set(seq,Date.now());s.send(b,7007,process.argv[1],()=>{});},10);});
process.stdin.on('data',(d)=>{for(const l of d.toString().split('\\n')){if(l==='dump')console.log(JSON.stringify({sent:[...sent],got:[...got]}));if(l==='quit')process.exit(0);}});`;

function inNetns(ns: TestNetns, script: string, ...argv: string[]): Promise<ChildProcess> {
  const p = spawn('ip', ['netns', 'exec', ns.name, process.execPath, '-e', script, ...argv], { stdio: ['pipe', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    p.stdout!.once('data', () => resolve(p));
    p.once('exit', (c) => reject(new Error(`helper exited ${c}`)));
  });
}

async function dump(p: ChildProcess): Promise<{ sent: Array<[number, number]>; got: Array<[number, number]> }> {
  return new Promise((resolve) => {
    let buf = '';
    const on = (b: Buffer) => {
      buf += b.toString();
      const nl = buf.indexOf('\n');
      if (nl >= 0) { p.stdout!.off('data', on); resolve(JSON.parse(buf.slice(0, nl))); }
    };
    p.stdout!.on('data', on);
    p.stdin!.write('dump\n');
  });
}

/**
 * Outage and loss in [t0, t0 + window] (t0: when the loss began): the outage is the longest run
 * of unanswered probes, from the send time of the last answered probe before it to that of the
 * first answered after it (what the client sees: nothing got through in between), 0 when every
 * probe was answered; `lost` counts the unanswered probes of the window.
 */
function measure(d: Awaited<ReturnType<typeof dump>>, t0: number, windowMs: number): { outageMs: number; lost: number; sent: number } {
  const got = new Map(d.got);
  const inWindow = d.sent.filter(([, t]) => t >= t0 && t <= t0 + windowMs);
  const lost = inWindow.filter(([s]) => !got.has(s)).length;
  let outageMs = 0;
  let lastOk: number | undefined = [...d.sent].reverse().find(([s, t]) => t < t0 && got.has(s))?.[1];
  let gap = false;
  for (const [s, t] of d.sent) {
    if (t < t0) continue;
    if (t > t0 + windowMs) break;
    if (!got.has(s)) { gap = true; continue; }
    if (gap && lastOk !== undefined) outageMs = Math.max(outageMs, t - lastOk);
    gap = false;
    lastOk = t;
  }
  if (gap) outageMs = Infinity;
  return { outageMs, lost, sent: inWindow.length };
}

async function sleep(ms: number): Promise<void> {
  await new Promise((r) => setTimeout(r, ms));
}

/** kube-proxy's DNAT of the ClusterIP over `endpoints`, by a hash of the client address (ClientIP affinity). */
async function setDnat(node: TestNetns, endpoints: readonly string[]): Promise<void> {
  const map = endpoints.map((e, i) => `${i} : ${e}`).join(', ');
  await ip.exec(['nft', '-f', '-'], { netns: node.path, input: [
    'table ip kube-proxy', 'flush table ip kube-proxy', 'table ip kube-proxy {', ' chain pre {', '  type nat hook prerouting priority dstnat; policy accept;',
    `  ip daddr ${CLUSTER_IP} udp dport 5555 dnat to jhash ip saddr mod ${endpoints.length} map { ${map} }`, ' }', '}', ''].join('\n') });
}

/** The NAT pod whose E link carried the most packets since `before`. */
async function busiest(node: TestNetns, before: Map<string, number>): Promise<string> {
  const now = await txCounts(node);
  return NAT.reduce((a, b) => ((now.get(b)! - (before.get(b) ?? 0)) > (now.get(a)! - (before.get(a) ?? 0)) ? b : a));
}

async function txCounts(node: TestNetns): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for (const [i, a] of NAT.entries()) {
    const [l] = await ip.json<Array<{ stats64?: { tx: { packets: number } } }>>(['-s', 'link', 'show', 'dev', `n-e${i + 1}`], { netns: node.path });
    out.set(a, l?.stats64?.tx.packets ?? 0);
  }
  return out;
}

/** In-memory stand-ins for the API server's objects (cache and client), with events. */
class ApiStandIn {
  readonly objects = new Map<string, unknown>();
  private readonly handlers = new Map<string, Array<(e: unknown) => void>>();
  readonly cache = {
    get: (k: { kind: string }, r: { namespace: string; name: string }) => this.objects.get(`${k.kind}/${r.namespace}/${r.name}`),
    list: (k: { kind: string }, o: { namespace?: string } = {}) => [...this.objects.entries()].filter(([x]) => x.startsWith(`${k.kind}/${o.namespace ?? ''}`)).map(([, v]) => v),
    onEvent: (k: { kind: string }, h: (e: unknown) => void) => { this.handlers.set(k.kind, [...(this.handlers.get(k.kind) ?? []), h]); return () => undefined; },
  } as unknown as Cache;
  readonly client = { get: async (k: { kind: string }, r: { namespace: string; name: string }) => this.objects.get(`${k.kind}/${r.namespace}/${r.name}`) } as unknown as Client;
  put(kind: string, o: { metadata?: { namespace?: string; name?: string } }): void {
    this.objects.set(`${kind}/${o.metadata!.namespace!}/${o.metadata!.name!}`, o);
    for (const h of this.handlers.get(kind) ?? []) h({ type: 'MODIFIED', object: o });
  }
}

function slice(conditions: Record<string, { serving: boolean; terminating: boolean }>): V1EndpointSlice {
  return { metadata: { namespace: 'internet', name: 'nat-abcde', labels: { 'kubernetes.io/service-name': 'nat', 'app.kubernetes.io/name': 'coil', 'app.kubernetes.io/component': 'egress' } },
    addressType: 'IPv4', endpoints: NAT.filter((a) => conditions[a]).map((a) => ({ addresses: [a], conditions: conditions[a] })) };
}

interface Row { path: string; kind: string; lost: string; outageMs: number; probesLost: number; probesSent: number }

async function main(): Promise<Row[]> {
  await ip.exec(['ip', 'netns', 'attach', 'coilbench-node', String(process.pid)]);
  const n: TestNetns = { name: 'coilbench-node', path: '/run/netns/coilbench-node' };
  const [c, x] = [await netns.create('c'), await netns.create('x')];
  const es = [await netns.create('e1'), await netns.create('e2'), await netns.create('e3')];
  await wire(ip, c, 'eth0', n, 'n-c');
  await wire(ip, x, 'eth0', n, 'n-x');
  for (const [i, e] of es.entries()) await wire(ip, e, 'eth0', n, `n-e${i + 1}`);
  await ip.batch([['addr', 'add', '10.1.0.1/24', 'dev', 'n-c'], ['addr', 'add', '198.51.100.1/24', 'dev', 'n-x'],
    ...NAT.map((_, i) => ['addr', 'add', `10.2.${i + 1}.1/24`, 'dev', `n-e${i + 1}`])], { netns: n.path });
  await ip.batch([['addr', 'add', `${CLIENT}/24`, 'dev', 'eth0'], ['route', 'add', 'default', 'via', '10.1.0.1']], { netns: c.path });
  await ip.batch([['addr', 'add', `${TARGET}/24`, 'dev', 'eth0'], ['route', 'add', '10.2.0.0/16', 'via', '198.51.100.1']], { netns: x.path });
  for (const [i, e] of es.entries()) await ip.batch([['addr', 'add', `${NAT[i]}/24`, 'dev', 'eth0'], ['route', 'add', 'default', 'via', `10.2.${i + 1}.1`]], { netns: e.path });
  await writeSysctl(ip, 'net.ipv4.ip_forward', '1');
  await setDnat(n, NAT);
  for (const [i, e] of es.entries()) {
    // E2 (the client's first choice) has Coil's default backend (its iptables rules), E1 and E3
    // the nftables one: the steered tunnel works with a NAT pod set up as Coil's.
    await (i === 1 ? new IptablesNat({ ip, podAddresses: [NAT[i]!], outInterface: 'eth0', netns: e.path }) : new NftablesNat({ ip, podAddresses: [NAT[i]!], outInterface: 'eth0', netns: e.path })).init();
    const server = new FouServer({ ip, podAddresses: [NAT[i]!], port: 5555, isSourcePortAuto: false, outInterface: 'eth0', netns: e.path });
    await server.init();
    await server.sync(new Set([CLIENT]));
  }
  log('topology up');

  const echo = await inNetns(x, ECHO);
  const rows: Row[] = [];
  try {
    for (const kind of KINDS) {
      for (let i = 0; i < REPEAT; i++) {
        rows.push(await coilRun(n, c, kind));
        rows.push(await coilBaselineRun(n, c, kind));
      }
    }
  } finally {
    echo.kill();
  }
  return rows;
}

/** coil's path: the watcher with steering, the real prober; one loss of the chosen NAT pod. */
async function coilRun(n: TestNetns, c: TestNetns, kind: string): Promise<Row> {
  const api = new ApiStandIn();
  const egress: Egress = { metadata: { namespace: 'internet', name: 'nat' }, spec: { destinations: ['198.51.100.0/24'], replicas: 3, sessionAffinity: 'ClientIP' } };
  const service: V1Service = { metadata: { namespace: 'internet', name: 'nat' }, spec: { clusterIPs: [CLUSTER_IP] } };
  const pod: V1Pod = { metadata: { namespace: 'app', name: 'client', annotations: { 'egress.coil.cybozu.com/internet': 'nat' } }, spec: { containers: [] } };
  const all = Object.fromEntries(NAT.map((a) => [a, { serving: true, terminating: false }]));
  api.put(Kinds.Egress.kind, egress);
  api.put(Kinds.Service.kind, service);
  api.put(Kinds.Pod.kind, pod);
  api.put(Kinds.EndpointSlice.kind, slice(all));
  const stateDir = await mkdtemp(join(tmpdir(), 'coil-bench-egress-'));
  const registry = new Registry();
  let watcher: EgressWatcher | undefined;
  const steering = new NatSteering({ cache: api.cache, port: 5555, logger: silentLogger(), registry, onChange: (e) => watcher?.onSteeringChange(e) });
  watcher = new EgressWatcher({
    cache: api.cache, client: api.client, recorder: { event: () => undefined } as unknown as EventRecorder,
    egressClient: new EgressClient({ ip, port: 5555 }), locks: new KeyedMutex(), lockKey: (a, b) => `${a}:${b}`, logger: silentLogger(),
    stateDir, port: 5555, probe: async () => ({ veth: true, ipv6: true, vxlan: true, ipip: true, ip6tnl: true, fou: true }), registry, steering,
  });
  await watcher.init();
  const ac = new AbortController();
  const loops = [watcher.run(ac.signal), steering.run(ac.signal)];
  const probe = await inNetns(c, PROBE, TARGET);
  try {
    await watcher.onAdd(pod, { namespace: 'app', name: 'client', containerId: 'bench', ifname: 'eth0', netns: c.path, ips: [CLIENT] });
    const chosen = steering.natPod({ namespace: 'internet', name: 'nat' }, CLIENT)!;
    log(`coil: tunnel to ${chosen}`);
    await sleep(2_000);
    const t0 = Date.now();
    const idx = NAT.indexOf(chosen) + 1;
    if (kind === 'graceful') {
      api.put(Kinds.EndpointSlice.kind, slice({ ...all, [chosen]: { serving: true, terminating: true } }));
      await sleep(1_000);
      api.put(Kinds.EndpointSlice.kind, slice({ ...all, [chosen]: { serving: false, terminating: true } }));
      // The sandbox (and its netns) goes some time after the containers stopped and the endpoint
      // turned not serving: kubelet's teardown, the CNI DEL. 200 ms here, a lower bound.
      await sleep(200);
    }
    await ip.batch([['link', 'set', 'dev', `n-e${idx}`, 'down']], { netns: n.path });
    await sleep(3_000);
    const m = measure(await dump(probe), t0, 3_000 + (kind === 'graceful' ? 1_000 : 0));
    log(`coil ${kind}: ${JSON.stringify(m)}; now on ${steering.natPod({ namespace: 'internet', name: 'nat' }, CLIENT)}`);
    await ip.batch([['link', 'set', 'dev', `n-e${idx}`, 'up']], { netns: n.path });
    return { path: 'coil (coild steers)', kind, lost: chosen, outageMs: m.outageMs, probesLost: m.lost, probesSent: m.sent };
  } finally {
    probe.stdin!.write('quit\n');
    ac.abort();
    await Promise.all(loops);
    await rm(stateDir, { recursive: true, force: true });
  }
}

/** Coil's path: the tunnel to the ClusterIP; kube-proxy drops the endpoint `-d` ms after the loss. */
async function coilBaselineRun(n: TestNetns, c: TestNetns, kind: string): Promise<Row> {
  await setDnat(n, NAT);
  await ip.exec(['conntrack', '-F']).catch(() => undefined);
  const client = new EgressClient({ ip, port: 5555 });
  await client.apply(c.path, planEgressClient({ podIps: [CLIENT], port: 5555, gateways: [{ egress: 'internet/nat', clusterIp: CLUSTER_IP, destinations: ['198.51.100.0/24'], isSourcePortAuto: false }] }));
  const probe = await inNetns(c, PROBE, TARGET);
  try {
    const before = await txCounts(n);
    await sleep(2_000);
    const lost = await busiest(n, before);
    const idx = NAT.indexOf(lost) + 1;
    log(`Coil: kube-proxy sends the client to ${lost}`);
    const t0 = Date.now();
    await ip.batch([['link', 'set', 'dev', `n-e${idx}`, 'down']], { netns: n.path });
    await sleep(kind === 'graceful' ? Math.max(COIL_DELAY_MS, 1_000) : COIL_DELAY_MS);
    // kube-proxy: the endpoint leaves the DNAT, and UDP conntrack entries towards it are flushed.
    await setDnat(n, NAT.filter((a) => a !== lost));
    await ip.exec(['conntrack', '-D', '-p', 'udp', '--reply-src', lost]).catch(() => undefined);
    await sleep(3_000);
    const m = measure(await dump(probe), t0, 3_000 + COIL_DELAY_MS);
    await ip.batch([['link', 'set', 'dev', `n-e${idx}`, 'up']], { netns: n.path });
    return { path: `Coil (ClusterIP, endpoint removed at +${kind === 'graceful' ? Math.max(COIL_DELAY_MS, 1_000) : COIL_DELAY_MS} ms)`, kind, lost, outageMs: m.outageMs, probesLost: m.lost, probesSent: m.sent };
  } finally {
    probe.stdin!.write('quit\n');
    await client.remove(c.path);
  }
}

main().then(
  async (rows) => {
    console.log('| path | loss | NAT pod lost | outage (ms) | probes lost / sent |');
    console.log('|---|---|---|---:|---:|');
    for (const r of rows) console.log(`| ${r.path} | ${r.kind} | ${r.lost} | ${Number.isFinite(r.outageMs) ? r.outageMs : 'no answer'} | ${r.probesLost} / ${r.probesSent} |`);
    console.log('');
    console.log('| path | loss | runs | outage p50 (ms) | outage max (ms) | probes lost (sum) |');
    console.log('|---|---|---:|---:|---:|---:|');
    const groups = new Map<string, Row[]>();
    for (const r of rows) groups.set(`${r.path}|${r.kind}`, [...(groups.get(`${r.path}|${r.kind}`) ?? []), r]);
    for (const [k, rs] of groups) {
      const o = rs.map((r) => r.outageMs).sort((a, b) => a - b);
      const [path, kind] = k.split('|');
      console.log(`| ${path} | ${kind} | ${rs.length} | ${o[Math.floor((o.length - 1) / 2)]} | ${o[o.length - 1]} | ${rs.reduce((a, r) => a + r.probesLost, 0)} |`);
    }
    console.log(`load average ${(await import('node:os')).loadavg().map((l) => l.toFixed(2)).join(' ')}, wall ${((Date.now() - started) / 1000).toFixed(1)} s`);
    await netns.cleanup();
    await ip.exec(['ip', 'netns', 'del', 'coilbench-node']).catch(() => undefined);
    process.exit(0);
  },
  async (err: unknown) => {
    console.error(`FAIL ${err instanceof Error ? err.stack : String(err)}`);
    await netns.cleanup();
    await ip.exec(['ip', 'netns', 'del', 'coilbench-node']).catch(() => undefined);
    process.exit(1);
  },
);
