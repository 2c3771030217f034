/**
 * Helpers for the egress netns tests: veth plumbing between test namespaces and a TCP "who am I
 * talking to" probe (a server in one netns answers with the peer address it sees), which shows
 * whether a packet was masqueraded. Root only; the namespaces come from TestNetnsSet.
 */
import { spawn } from 'node:child_process';
import type { IpRunner } from '../../src/netlink/ip-runner.js';
import type { TestNetns } from '../../src/netlink/test-netns.js';

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
 * address the server saw (or `timeout`/`error …`).
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
    srv.kill();
  }
}
