/**
 * Helpers for the egress netns tests: veth plumbing between test namespaces and a TCP "who am I
 * talking to" probe (a server in one netns answers with the peer address it sees), which shows
 * whether a packet was masqueraded. Root only; the namespaces come from TestNetnsSet.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import type { IpRunner } from '../../src/netlink/iproute2/ip-runner.js';
import type { TestNetns } from './test-netns.js';

/** Connects `a` and `b` with a veth pair named `aName` (in a) and `bName` (in b), both up. */
export async function wire(ip: IpRunner, a: TestNetns, aName: string, b: TestNetns, bName: string): Promise<void> {
  const tmp = `v${Math.random().toString(16).slice(2, 10)}`;
  await ip.batch([['link', 'add', tmp, 'netns', a.path, 'type', 'veth', 'peer', 'name', `${tmp}p`, 'netns', b.path]]);
  await ip.batch([['link', 'set', 'dev', tmp, 'name', aName], ['link', 'set', 'dev', aName, 'up']], { netns: a.path });
  await ip.batch([['link', 'set', 'dev', `${tmp}p`, 'name', bName], ['link', 'set', 'dev', bName, 'up']], { netns: b.path });
}

const SERVER = `const s=require('net').createServer((c)=>{c.end(c.remoteAddress)});
s.listen(+process.argv[2],process.argv[1],()=>console.log('ready'));setTimeout(()=>process.exit(0),+process.argv[3]).unref();`;
const CLIENT = `const c=require('net').connect(+process.argv[2],process.argv[1]);let d='';c.setTimeout(2500,()=>{console.log('timeout');process.exit(1)});
c.on('data',(b)=>d+=b);c.on('end',()=>{console.log(d);process.exit(0)});c.on('error',(e)=>{console.log('error '+e.code);process.exit(1)});`;

/**
 * Starts a server in `server` on `host:port`, connects from `client`, and returns the peer
 * address the server saw (or `timeout`/`error …`). Returns only once the server has exited: a
 * server left running would keep retransmitting the SYN-ACK of a half-open connection into the
 * next test.
 */
export async function peerSeenBy(server: TestNetns, host: string, port: number, client: TestNetns, lifetimeMs = 15_000): Promise<string> {
  const srv = spawn('ip', ['netns', 'exec', server.name, process.execPath, '-e', SERVER, host, String(port), String(lifetimeMs)], { stdio: ['ignore', 'pipe', 'inherit'] });
  try {
    await new Promise<void>((resolve, reject) => {
      srv.stdout.on('data', (b: Buffer) => { if (b.toString().includes('ready')) resolve(); });
      srv.on('exit', (code) => reject(new Error(`server exited ${code}`)));
    });
    const out = await new Promise<string>((resolve) => {
      const cli = spawn('ip', ['netns', 'exec', client.name, process.execPath, '-e', CLIENT, host, String(port)], { stdio: ['ignore', 'pipe', 'inherit'] });
      let text = '';
      cli.stdout.on('data', (b: Buffer) => { text += b.toString(); });
      cli.on('exit', () => resolve(text.trim()));
    });
    return out;
  } finally {
    if (srv.exitCode === null && srv.signalCode === null) {
      const exited = once(srv, 'exit');
      srv.kill();
      await exited;
    }
  }
}

/**
 * The far end of a stand-in tunnel (a veth whose peer sits in `ns`): counts, per TCP port, the
 * packets of one flow that arrived through the tunnel, with an nftables ingress counter on the
 * peer. A link's packet counter is no measure of one flow: the kernel sends IPv6 DAD, MLD reports
 * and router solicitations on every link it brings up, at randomised times over the first seconds
 * (and the solicitations again, backing off, long after), and an earlier connection's half-open
 * socket may still retransmit its SYN-ACK. Each test connection uses its own port, so counting by
 * port counts that connection only.
 */
export class TunnelFarEnd {
  private readonly ip: IpRunner;
  private readonly ns: TestNetns;
  private readonly devs: readonly string[];

  /** @param devs the peer links in `ns` to count on, e.g. `['t4', 't6']` */
  constructor(ip: IpRunner, ns: TestNetns, devs: readonly string[]) {
    this.ip = ip;
    this.ns = ns;
    this.devs = devs;
  }

  /** Adds the ingress chains; the links must exist. */
  async init(): Promise<void> {
    await this.nft(['table netdev far {',
      ...this.devs.map((dev) => ` chain ${dev} { type filter hook ingress device "${dev}" priority 0; policy accept; }`), '}']);
  }

  /** Starts counting the TCP packets from or to `port` on every link; call before the connection opens. */
  async watch(port: number): Promise<void> {
    await this.nft(this.devs.flatMap((dev) => [`add counter netdev far ${dev}_${port}`,
      `add rule netdev far ${dev} tcp sport ${port} counter name "${dev}_${port}"`,
      `add rule netdev far ${dev} tcp dport ${port} counter name "${dev}_${port}"`]));
  }

  /** Packets of `port`'s flow that arrived on `dev` since {@link watch}. */
  async packets(dev: string, port: number): Promise<number> {
    const { stdout } = await this.ip.exec(['nft', '-j', 'list', 'counter', 'netdev', 'far', `${dev}_${port}`], { netns: this.ns.path });
    const items = (JSON.parse(stdout) as { nftables: Array<{ counter?: { packets: number } }> }).nftables;
    const counter = items.find((i) => i.counter)?.counter;
    if (!counter) throw new Error(`no counter ${dev}_${port} in ${stdout}`);
    return counter.packets;
  }

  private async nft(lines: readonly string[]): Promise<void> {
    await this.ip.exec(['nft', '-f', '-'], { netns: this.ns.path, input: `${lines.join('\n')}\n` });
  }
}
