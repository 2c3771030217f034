/**
 * coil-egress against a real API server: the client-pod source keeps exactly the pods naming its
 * Egress (annotation added, edited, removed; a finished pod leaves through the field selector),
 * and the coil-egress program, run in an egress pod netns on this kernel without FoU, installs
 * its NAT table, exports `coil_egress_kernel_feature{feature="fou"} 0` and stays unready with the
 * reason in /readyz; with `--snat-addresses` its rules (nftables and iptables) SNAT to the shared
 * address and drop new packets from outside to it, and a bad value is refused by name; and on SIGTERM it drains: it stays, with its NAT rules and its endpoints, while
 * a client flow through its NAT is established, and exits 0 when that flow ends or at
 * `--drain-timeout`, at once with `--drain-timeout=0`. Root only (netns); skipped with the reason
 * otherwise.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { after, before, describe, it } from 'node:test';
import type { V1Pod } from '@kubernetes/client-node';
import { ClientPodSource } from '../../src/egress-agent/client-pod-source.js';
import { countClientFlows } from '../../src/egress-agent/drain.js';
import { readConntrack } from '../../src/netlink/netfilter/conntrack.js';
import { probeFeatures } from '../../src/netlink/features.js';
import { writeSysctl } from '../../src/netlink/sysctl.js';
import { IpRunner } from '../../src/netlink/iproute2/ip-runner.js';
import { TestNetnsSet, netnsSkipReason, type TestNetns } from './test-netns.js';
import { Kinds } from '../../src/api/v2/kinds.js';
import { ApiTransport } from '../../src/runtime/api-transport.js';
import { Client } from '../../src/runtime/client.js';
import { silentLogger } from '../../src/runtime/logging.js';
import { ControlPlane, eventually, freePort } from '../envtest/control-plane.js';
import { wire } from './egress-peer.js';
import { coilEgressCommand } from './node-lab.js';
import { prerequisite } from '../support/prerequisite.js';

describe('coil-egress against a real API server', { skip: prerequisite(netnsSkipReason()) }, () => {
  let cp: ControlPlane;
  let admin: Client;
  const stop = new AbortController();
  let source: ClientPodSource;
  let running: Promise<void>;
  const ip = new IpRunner();
  const netns = new TestNetnsSet({ ip });

  const podOf = (name: string, annotations: Record<string, string>, hostNetwork = false): V1Pod => ({
    metadata: { namespace: 'app', name, annotations }, spec: { nodeName: 'n1', hostNetwork, containers: [{ name: 'c', image: 'pause' }] },
  });
  const names = () => source.list().map((p) => `${p.name}:${p.ips.join(',')}`).sort();

  before(async () => {
    cp = await ControlPlane.start();
    admin = new Client(new ApiTransport(cp.kubeConfig), 'egress-test');
    for (const ns of ['app', 'internet']) await cp.request('POST', '/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns } });
    await admin.create(Kinds.Pod, podOf('before-start', { 'egress.coil.cybozu.com/internet': 'nat' }));
    await admin.patchStatus(Kinds.Pod, { namespace: 'app', name: 'before-start' }, { phase: 'Running', podIP: '10.1.0.1', podIPs: [{ ip: '10.1.0.1' }] });
    source = new ClientPodSource({ transport: new ApiTransport(cp.kubeConfig), egress: { namespace: 'internet', name: 'nat' }, log: silentLogger(), onChange: () => undefined });
    running = source.run(stop.signal);
  });
  after(async () => {
    stop.abort();
    await running;
    await netns.cleanup();
    await cp?.stop();
  });

  it('lists the pods that existed before the start', async () => {
    await eventually(() => assert.deepEqual(names(), ['before-start:10.1.0.1']), { timeoutMs: 10_000 });
  });

  it('adds clients as they appear, ignores others and host-network pods, follows annotation edits', async () => {
    await admin.create(Kinds.Pod, podOf('other', { 'egress.coil.cybozu.com/internet': 'other' }));
    await admin.create(Kinds.Pod, podOf('hostnet', { 'egress.coil.cybozu.com/internet': 'nat' }, true));
    await admin.create(Kinds.Pod, podOf('later', { 'egress.coil.cybozu.com/internet': 'a,nat' }));
    await eventually(() => assert.deepEqual(names(), ['before-start:10.1.0.1', 'later:']), { timeoutMs: 10_000 });
    await admin.patchStatus(Kinds.Pod, { namespace: 'app', name: 'later' }, { phase: 'Pending', podIPs: [{ ip: '10.1.0.2' }, { ip: 'fd00::2' }] });
    await eventually(() => assert.deepEqual(names(), ['before-start:10.1.0.1', 'later:10.1.0.2,fd00::2']), { timeoutMs: 10_000 });
    await admin.mergePatch(Kinds.Pod, { namespace: 'app', name: 'later' }, { metadata: { annotations: { 'egress.coil.cybozu.com/internet': 'a' } } });
    await eventually(() => assert.deepEqual(names(), ['before-start:10.1.0.1']), { timeoutMs: 10_000 });
  });

  it('a pod that finished (Succeeded) leaves the set through the field selector', async () => {
    await admin.patchStatus(Kinds.Pod, { namespace: 'app', name: 'before-start' }, { phase: 'Succeeded' });
    await eventually(() => assert.deepEqual(names(), []), { timeoutMs: 10_000 });
  });

  it('the program in a netns without FoU: NAT installed, feature metric 0, unready with the reason', async () => {
    const f = await probeFeatures(ip);
    const e: TestNetns = await netns.create('egress-agent');
    const x = await netns.create('egress-agent-x');
    await wire(ip, e, 'eth0', x, 'eth0');
    await ip.batch([['addr', 'add', '198.51.100.1/24', 'dev', 'eth0']], { netns: e.path });
    const [metrics, health] = [await freePort(), await freePort()];
    // As the image runs it: on Bun, its bundle (node-lab.ts coilEgressCommand).
    const egress = coilEgressCommand();
    const child = spawn('ip', ['netns', 'exec', e.name, ...egress.argv, '--kubeconfig', cp.kubeconfigPath,
      `--metrics-addr=:${metrics}`, `--health-addr=:${health}`, '--secure-endpoints=false', '--backend=nftables'], {
      env: { ...process.env, COIL_POD_NAMESPACE: 'internet', COIL_EGRESS_NAME: 'nat', COIL_POD_ADDRESSES: '198.51.100.1', HOSTNAME: 'nat-0', ...egress.env }, stdio: ['ignore', 'ignore', 'pipe'],
    });
    let log = '';
    child.stderr.on('data', (b: Buffer) => { log += b.toString(); });
    try {
      // The ports live in the netns: reach them through it.
      const get = async (port: number, path: string) => (await ip.exec(['ip', 'netns', 'exec', e.name, 'curl', '-s', `http://127.0.0.1:${port}${path}`]).catch((err: Error) => ({ stdout: err.message }))).stdout;
      await eventually(async () => assert.match(await get(metrics, '/metrics'), /coil_egress_kernel_feature\{feature="fou"\}/), { timeoutMs: 20_000 });
      const text = await get(metrics, '/metrics');
      assert.match(text, new RegExp(`coil_egress_kernel_feature\\{feature="fou"\\} ${f.fou ? 1 : 0}`));
      const nft = (await ip.exec(['nft', 'list', 'table', 'ip', 'coil-egress'], { netns: e.path })).stdout;
      assert.match(nft, /oifname "eth0" ip saddr != 198\.51\.100\.1 counter packets 0 bytes 0 masquerade/);
      if (!f.fou) {
        const ready = await get(health, '/readyz');
        assert.match(ready, /\[-\]kernel failed: the kernel lacks fou/);
        assert.match(log, /the kernel lacks fou/);
      }
    } finally {
      child.kill('SIGTERM');
      await new Promise((r) => child.on('exit', r));
    }
  });

  it('--snat-addresses: the NAT rules SNAT to the shared address and drop new packets from outside to it (each backend)', async () => {
    const S = '203.0.113.10';
    for (const backend of ['nftables', 'iptables'] as const) {
      const e: TestNetns = await netns.create(`egress-snat-${backend}`);
      const x = await netns.create(`egress-snat-${backend}-x`);
      await wire(ip, e, 'eth0', x, 'eth0');
      await ip.batch([['addr', 'add', '198.51.100.1/24', 'dev', 'eth0']], { netns: e.path });
      const egress = coilEgressCommand();
      // No listener and, on this kernel without FoU, no client watch: nothing but coil-egress's own
      // wait holds it up (it exited 0 right after its start before that).
      const child = spawn('ip', ['netns', 'exec', e.name, ...egress.argv, '--kubeconfig', cp.kubeconfigPath,
        '--metrics-addr=0', '--health-addr=0', `--backend=${backend}`, `--snat-addresses=${S}`], {
        env: { ...process.env, COIL_POD_NAMESPACE: 'internet', COIL_EGRESS_NAME: 'nat', COIL_POD_ADDRESSES: '198.51.100.1', HOSTNAME: 'nat-0', ...egress.env }, stdio: ['ignore', 'ignore', 'pipe'],
      });
      let log = '';
      child.stderr.on('data', (b: Buffer) => { log += b.toString(); });
      const exited = once(child, 'exit');
      try {
        await eventually(() => assert.match(log, /NAT rules installed/), { timeoutMs: 20_000 }).catch((err: Error) => assert.fail(`${err.message}\n${log}`));
        assert.match(log, /NAT rules installed: client flows SNAT to the shared address 203\.0\.113\.10/);
        if (backend === 'nftables') {
          const nft = (await ip.exec(['nft', 'list', 'table', 'ip', 'coil-egress'], { netns: e.path })).stdout;
          assert.match(nft, /oifname "eth0" ip saddr != 198\.51\.100\.1 counter packets 0 bytes 0 snat to 203\.0\.113\.10/);
          assert.doesNotMatch(nft, /bytes \d+ masquerade/);
          assert.match(nft, /iifname "eth0" ip daddr 203\.0\.113\.10 ct state new counter packets 0 bytes 0 drop/);
        } else {
          const rules = (await ip.exec(['iptables-save'], { netns: e.path })).stdout;
          assert.match(rules, /-A POSTROUTING ! -s 198\.51\.100\.1\/32 -o eth0 -j SNAT --to-source 203\.0\.113\.10/);
          assert.doesNotMatch(rules, /MASQUERADE/);
          assert.match(rules, /-A FORWARD -d 203\.0\.113\.10\/32 -i eth0 -m conntrack --ctstate NEW -j DROP/);
        }
        assert.equal(child.exitCode, null, `coil-egress exited: ${log}`);
      } finally {
        // No client flow: the drain ends within seconds (drain.ts DRAIN_QUIET_MS).
        if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
        await exited;
      }
    }
  });

  it('a bad --snat-addresses is refused by name, exit 2', async () => {
    const egress = coilEgressCommand();
    // Should the value pass, the program must not touch this host: its own netns, and a kubeconfig it fails to read before any rule.
    const e = await netns.create('egress-snat-bad');
    for (const [value, why] of [['203.0.113.10/32', 'must be an IP address, not a CIDR'], ['203.0.113.10,203.0.113.11', 'at most one address per family']] as const) {
      const child = spawn('ip', ['netns', 'exec', e.name, ...egress.argv, '--kubeconfig=/nonexistent', `--snat-addresses=${value}`], {
        env: { ...process.env, COIL_POD_NAMESPACE: 'internet', COIL_EGRESS_NAME: 'nat', COIL_POD_ADDRESSES: '198.51.100.1', ...egress.env }, stdio: ['ignore', 'ignore', 'pipe'],
      });
      let err = '';
      child.stderr.on('data', (b: Buffer) => { err += b.toString(); });
      const [code] = await once(child, 'exit');
      assert.equal(code, 2, err);
      assert.ok(err.startsWith('coil-egress: --snat-addresses: '), err);
      assert.ok(err.includes(why), err);
    }
  });
});

/** An echo server: every connection gets back what it sends, and is closed when its peer closes. */
const ECHO_SERVER = `require('net').createServer((c)=>{c.on('error',()=>{});c.pipe(c)}).listen(+process.argv[2],process.argv[1],()=>console.log('ready'));`;
/** A client holding one connection: a line on stdin is sent and its echo printed; stdin closed = connection closed. */
const HOLDING_CLIENT = `const c=require('net').connect(+process.argv[2],process.argv[1],()=>console.log('connected'));c.on('data',(b)=>console.log('echo '+b));
c.on('error',(e)=>{console.log('error '+e.code);process.exit(1)});process.stdin.on('data',(b)=>c.write(String(b).trim()));process.stdin.on('end',()=>c.end());c.on('close',()=>process.exit(0));`;

describe('coil-egress drains on SIGTERM', { skip: prerequisite(netnsSkipReason()) }, () => {
  let cp: ControlPlane;
  const ip = new IpRunner();
  const netns = new TestNetnsSet({ ip });
  let c: TestNetns;
  let e: TestNetns;
  let x: TestNetns;
  let server: ChildProcess;
  const children: ChildProcess[] = [];

  /** Lines a child printed, and a wait for one matching. */
  const lines = (child: ChildProcess) => {
    let text = '';
    child.stdout!.on('data', (b: Buffer) => { text += b.toString(); });
    return { get text() { return text; }, wait: (re: RegExp) => eventually(() => assert.match(text, re), { timeoutMs: 10_000 }) };
  };

  before(async () => {
    cp = await ControlPlane.start();
    [c, e, x] = [await netns.create('drain-c'), await netns.create('drain-e'), await netns.create('drain-x')];
    // client (10.50.0.2) → egress pod (masquerades out of eth0 as 198.51.100.1) → target (198.51.100.2),
    // routed directly: this kernel has NAT but no FoU.
    await wire(ip, c, 'eth0', e, 'c0');
    await wire(ip, e, 'eth0', x, 'eth0');
    await ip.batch([['addr', 'add', '10.50.0.2/24', 'dev', 'eth0'], ['route', 'add', 'default', 'via', '10.50.0.1']], { netns: c.path });
    await ip.batch([['addr', 'add', '10.50.0.1/24', 'dev', 'c0'], ['addr', 'add', '198.51.100.1/24', 'dev', 'eth0']], { netns: e.path });
    await ip.batch([['addr', 'add', '198.51.100.2/24', 'dev', 'eth0']], { netns: x.path });
    await writeSysctl(ip, 'net.ipv4.ip_forward', '1', { netns: e.path });
    server = spawn('ip', ['netns', 'exec', x.name, process.execPath, '-e', ECHO_SERVER, '198.51.100.2', '8080'], { stdio: ['ignore', 'pipe', 'inherit'] });
    children.push(server);
    await lines(server).wait(/ready/);
  });
  after(async () => {
    for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await netns.cleanup();
    await cp?.stop();
  });

  /** coil-egress in the egress netns as the image runs it, with `args`; resolves once its NAT rules are in. */
  const startEgress = async (args: string[]) => {
    const health = await freePort();
    const egress = coilEgressCommand();
    const child = spawn('ip', ['netns', 'exec', e.name, ...egress.argv, '--kubeconfig', cp.kubeconfigPath, '--metrics-addr=0', `--health-addr=:${health}`, '--backend=nftables', ...args], {
      env: { ...process.env, COIL_POD_NAMESPACE: 'internet', COIL_EGRESS_NAME: 'nat', COIL_POD_ADDRESSES: '198.51.100.1', HOSTNAME: 'nat-0', ...egress.env }, stdio: ['ignore', 'ignore', 'pipe'],
    });
    children.push(child);
    let log = '';
    child.stderr!.on('data', (b: Buffer) => { log += b.toString(); });
    const exited = once(child, 'exit').then(([code]) => ({ code: code as number | null, at: Date.now() }));
    await eventually(async () => assert.match(await nft(), /masquerade/), { timeoutMs: 20_000 });
    const get = async (path: string) => (await ip.exec(['ip', 'netns', 'exec', e.name, 'curl', '-s', `http://127.0.0.1:${health}${path}`]).catch((err: Error) => ({ stdout: `curl failed: ${err.message}` }))).stdout;
    await eventually(async () => assert.match(await get('/healthz'), /ok/), { timeoutMs: 10_000 });
    return { child, exited, get, log: () => log };
  };
  const nft = async () => (await ip.exec(['nft', 'list', 'table', 'ip', 'coil-egress'], { netns: e.path }).catch((err: Error) => ({ stdout: err.message }))).stdout;
  /** A TCP connection from the client through the NAT to the target, held open until `close`. */
  const openFlow = async () => {
    const client = spawn('ip', ['netns', 'exec', c.name, process.execPath, '-e', HOLDING_CLIENT, '198.51.100.2', '8080'], { stdio: ['pipe', 'pipe', 'inherit'] });
    children.push(client);
    const out = lines(client);
    await out.wait(/connected/);
    let n = 0;
    return {
      /** Sends a line and waits for its echo: the flow works through the NAT. */
      echo: async () => { const m = `m${++n}`; client.stdin!.write(`${m}\n`); await out.wait(new RegExp(`echo ${m}\\b`)); },
      close: async () => { client.stdin!.end(); await once(client, 'exit'); },
    };
  };
  const clientFlows = async () => countClientFlows(await readConntrack(ip, 4, { netns: e.path }));

  it('while a client flow is established it stays — NAT rules, endpoints, the flow working — and exits 0 once the flow ended', async () => {
    const egress = await startEgress(['--drain-timeout=60s']);
    const flow = await openFlow();
    await flow.echo();
    assert.equal(await clientFlows(), 1);
    const readyBefore = await egress.get('/readyz');
    egress.child.kill('SIGTERM');
    const sigterm = Date.now();
    await new Promise((r) => setTimeout(r, 3_000));
    assert.equal(egress.child.exitCode, null, `exited at SIGTERM: ${egress.log()}`);
    assert.match(await nft(), /oifname "eth0" ip saddr != 198\.51\.100\.1 counter packets \d+ bytes \d+ masquerade/);
    assert.match(await egress.get('/healthz'), /ok/);
    assert.equal(await egress.get('/readyz'), readyBefore, 'readiness is not changed by the drain (the slice keeps it serving)');
    await flow.echo();
    await flow.close();
    const closed = Date.now();
    const { code, at } = await egress.exited;
    assert.equal(code, 0, egress.log());
    assert.match(egress.log(), /drained: no established client flow left/);
    // The drain ends 2 s (DRAIN_QUIET_MS) after the last flow, read every 0.5 s; far from 60 s.
    assert.ok(at - closed < 10_000, `exited ${at - closed} ms after the flow ended`);
    assert.ok(at - sigterm >= 3_000);
  });

  it('a flow that outlasts --drain-timeout: exits 0 at the deadline, the flow working until then', async () => {
    const egress = await startEgress(['--drain-timeout=4s']);
    const flow = await openFlow();
    await flow.echo();
    egress.child.kill('SIGTERM');
    const sigterm = Date.now();
    await new Promise((r) => setTimeout(r, 2_000));
    assert.equal(egress.child.exitCode, null, `exited at SIGTERM: ${egress.log()}`);
    await flow.echo();
    const { code, at } = await egress.exited;
    assert.equal(code, 0, egress.log());
    assert.match(egress.log(), /drain ended with client flows left/);
    assert.ok(at - sigterm >= 4_000 && at - sigterm < 10_000, `exited ${at - sigterm} ms after SIGTERM`);
    await flow.close();
  });

  it("--drain-timeout=0 exits at once, flows or not (Coil's behaviour)", async () => {
    const egress = await startEgress(['--drain-timeout=0']);
    const flow = await openFlow();
    await flow.echo();
    egress.child.kill('SIGTERM');
    const sigterm = Date.now();
    const { code, at } = await egress.exited;
    assert.equal(code, 0, egress.log());
    assert.ok(at - sigterm < 2_000, `exited ${at - sigterm} ms after SIGTERM`);
    assert.doesNotMatch(egress.log(), /draining/);
    await flow.close();
  });

  it('a bad --drain-timeout is refused by name, exit 2', async () => {
    const egress = coilEgressCommand();
    // Should the value pass, the program must not touch this host: its own netns, and a kubeconfig it fails to read before any rule.
    const e = await netns.create('egress-drain-bad');
    const child = spawn('ip', ['netns', 'exec', e.name, ...egress.argv, '--kubeconfig=/nonexistent', '--drain-timeout=-5s'], {
      env: { ...process.env, COIL_POD_NAMESPACE: 'internet', COIL_EGRESS_NAME: 'nat', COIL_POD_ADDRESSES: '198.51.100.1', ...egress.env }, stdio: ['ignore', 'ignore', 'pipe'],
    });
    let err = '';
    child.stderr.on('data', (b: Buffer) => { err += b.toString(); });
    const [code] = await once(child, 'exit');
    assert.equal(code, 2);
    assert.match(err, /^coil-egress: --drain-timeout: invalid duration "-5s"/);
  });
});
