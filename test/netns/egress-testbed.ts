/**
 * The egress testbed the FoU VM benchmarks share (test/netns/egress-failover-bench.ts,
 * test/netns/egress-session-keeping-bench.ts): the VM's own netns as the node N, which routes
 * between client pods (10.1.k.2/24, each on its own veth `n-c<i>`), NAT pods (each on its own
 * veth `n-e<i>`, addresses 10.2.k.2/24) and an external target X (198.51.100.2), which routes
 * 10.2.0.0/16 back through N only, so an answer proves the tunnel and the NAT. NAT pods are set
 * up by the code coil-egress runs in its pod (its NAT backend, FoU receive port, return rule and
 * a peer link per client). Root only, in the stock-kernel VM (hack/fou-vm.sh) for FoU.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { FouServer } from '../../src/egress-agent/fou-server.js';
import { IptablesNat } from '../../src/egress-agent/nat-iptables.js';
import { NftablesNat } from '../../src/egress-agent/nat-nftables.js';
import type { IpRunner } from '../../src/netlink/iproute2/ip-runner.js';
import type { Cache } from '../../src/runtime/cache.js';
import type { Client } from '../../src/runtime/client.js';
import { writeSysctl } from '../../src/netlink/sysctl.js';
import type { TestNetns, TestNetnsSet } from './test-netns.js';
import { wire } from './egress-peer.js';

/** X's address. */
export const TARGET = '198.51.100.2';
/** The FoU port of the NAT pods (Coil's). */
export const FOU_PORT = 5555;

/** A client pod of the testbed. */
export interface ClientPod { ns: TestNetns; address: string; index: number }

/** The testbed's namespaces. */
export interface EgressTestbed {
  /** The node (the netns this process runs in, attached under a name). */
  n: TestNetns;
  x: TestNetns;
  /** NAT pod netns `i` has address `nat[i]` on `eth0`, its node side is `n-e<i+1>`. */
  nat: TestNetns[];
  clients: ClientPod[];
}

/**
 * Names this process's netns `nodeName`, creates X, the NAT pods (`natAddresses`, 10.2.k.2) and
 * the client pods (`clientAddresses`, 10.1.k.2), wires and addresses them, and turns forwarding on
 * in N. NAT pods get no NAT yet: {@link startNatPod}.
 */
export async function wireEgressTestbed(ip: IpRunner, netns: TestNetnsSet, o: { nodeName: string; natAddresses: readonly string[]; clientAddresses: readonly string[] }): Promise<EgressTestbed> {
  await ip.exec(['ip', 'netns', 'attach', o.nodeName, String(process.pid)]);
  const n: TestNetns = { name: o.nodeName, path: `/run/netns/${o.nodeName}` };
  const x = await netns.create('x');
  const clients: ClientPod[] = [];
  for (const [i, address] of o.clientAddresses.entries()) {
    const ns = await netns.create(`c${i + 1}`);
    const k = address.split('.')[2]!;
    await wire(ip, ns, 'eth0', n, `n-c${i + 1}`);
    await ip.batch([['addr', 'add', `10.1.${k}.1/24`, 'dev', `n-c${i + 1}`]], { netns: n.path });
    await ip.batch([['addr', 'add', `${address}/24`, 'dev', 'eth0'], ['route', 'add', 'default', 'via', `10.1.${k}.1`]], { netns: ns.path });
    clients.push({ ns, address, index: i });
  }
  await wire(ip, x, 'eth0', n, 'n-x');
  await ip.batch([['addr', 'add', '198.51.100.1/24', 'dev', 'n-x']], { netns: n.path });
  await ip.batch([['addr', 'add', `${TARGET}/24`, 'dev', 'eth0'], ['route', 'add', '10.2.0.0/16', 'via', '198.51.100.1']], { netns: x.path });
  const nat: TestNetns[] = [];
  for (const [i, address] of o.natAddresses.entries()) nat.push(await wireNatPod(ip, netns, n, i, address));
  await writeSysctl(ip, 'net.ipv4.ip_forward', '1');
  return { n, x, nat, clients };
}

/** Creates NAT pod `i`'s netns (again, after a loss) with `address` on `eth0` and its node side `n-e<i+1>`. */
export async function wireNatPod(ip: IpRunner, netns: TestNetnsSet, n: TestNetns, i: number, address: string): Promise<TestNetns> {
  const e = await netns.create(`e${i + 1}`);
  const k = address.split('.')[2]!;
  await wire(ip, e, 'eth0', n, `n-e${i + 1}`);
  await ip.batch([['addr', 'add', `10.2.${k}.1/24`, 'dev', `n-e${i + 1}`]], { netns: n.path });
  await ip.batch([['addr', 'add', `${address}/24`, 'dev', 'eth0'], ['route', 'add', 'default', 'via', `10.2.${k}.1`]], { netns: e.path });
  return e;
}

/**
 * What coil-egress does at start in NAT pod `e` (address `address`): its NAT backend (nftables,
 * or Coil's iptables rules), optionally SNAT to `snatAddresses` instead of masquerading, the FoU
 * receive port and return rule, and a peer link to each of `clients`.
 */
export async function startNatPod(ip: IpRunner, e: TestNetns, address: string, clients: readonly string[], o: { backend: 'nftables' | 'iptables'; snatAddresses?: readonly string[] }): Promise<void> {
  const nat = { ip, podAddresses: [address], outInterface: 'eth0', netns: e.path, ...(o.snatAddresses ? { snatAddresses: o.snatAddresses } : {}) };
  await (o.backend === 'iptables' ? new IptablesNat(nat) : new NftablesNat(nat)).init();
  const server = new FouServer({ ip, podAddresses: [address], port: FOU_PORT, isSourcePortAuto: false, outInterface: 'eth0', netns: e.path });
  await server.init();
  await server.sync(new Set(clients));
}

/**
 * Runs `script` under this process's node in netns `ns`; resolves at its first line of output.
 * @throws Error when it exits first, or prints nothing within `readyMs` (then it is killed)
 */
export function inNetns(ns: TestNetns, script: string, argv: readonly string[] = [], readyMs = 30_000): Promise<ChildProcess> {
  const p = spawn('ip', ['netns', 'exec', ns.name, process.execPath, '-e', script, ...argv], { stdio: ['pipe', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => { p.kill('SIGKILL'); reject(new Error(`helper in ${ns.name} not ready after ${readyMs} ms`)); }, readyMs);
    p.stdout!.once('data', () => { clearTimeout(timer); resolve(p); });
    p.once('exit', (c) => { clearTimeout(timer); reject(new Error(`helper exited ${c}`)); });
  });
}

/** Sends `cmd` to a helper started by {@link inNetns} and reads the one JSON line it answers. */
export async function ask<T>(p: ChildProcess, cmd: string): Promise<T> {
  return new Promise((resolve) => {
    let buf = '';
    const on = (b: Buffer) => {
      buf += b.toString();
      const nl = buf.indexOf('\n');
      if (nl >= 0) { p.stdout!.off('data', on); resolve(JSON.parse(buf.slice(0, nl)) as T); }
    };
    p.stdout!.on('data', on);
    p.stdin!.write(`${cmd}\n`);
  });
}

/** Sends `quit` to a helper started by {@link inNetns}; kills it after 5 s. */
export async function quit(p: ChildProcess): Promise<void> {
  await new Promise<void>((r) => { p.once('exit', () => r()); p.stdin!.write('quit\n'); setTimeout(() => { p.kill('SIGKILL'); r(); }, 5_000).unref(); });
}

/** In-memory stand-ins for the API server's objects (cache and client), with events. */
export class ApiStandIn {
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
