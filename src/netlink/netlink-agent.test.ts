/**
 * The netlink agent against `ip` itself, in real network namespaces: the same batch lines leave
 * the same kernel state and fail with the same errno and line, and IpRunner really sends them to
 * the agent (no `ip` process) when it can.
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { addr } from './addr.js';
import { IpRunner, spawnProcess, type BatchLine, type ProcessSpawner } from './ip-runner.js';
import { link } from './link.js';
import { NetlinkAgent } from './netlink-agent.js';
import { NetlinkError, isNetlinkErrno } from './netlink-error.js';
import { route } from './route.js';
import { TestNetnsSet, netnsSkipReason, type TestNetns } from './test-netns.js';
import { prerequisite } from '../../test/support/prerequisite.js';

const probe = new NetlinkAgent();
const skip = prerequisite(netnsSkipReason() ?? (probe.isUsable ? undefined : `${probe.runtimePath} or ${probe.scriptPath} missing: run hack/build-cni.sh`));

/** Kernel state of one side, without what differs by nature (ifindex, netnsid, timers). */
async function state(ip: IpRunner, host: TestNetns, pod: TestNetns): Promise<unknown> {
  // operstate is not compared: the kernel's linkwatch sets it some time after the link is set up
  // (UNKNOWN, then UP; seen once under load); the admin state is in `flags`, which is compared.
  const strip = (x: unknown): unknown => JSON.parse(JSON.stringify(x, (k, v: unknown) =>
    ['ifindex', 'link_index', 'link_netnsid', 'valid_life_time', 'preferred_life_time', 'stats64', 'inet6_addr_gen_mode', 'parentbus', 'parentdev', 'operstate'].includes(k) ? undefined : v));
  const read = (args: string[], ns: TestNetns) => ip.json<unknown[]>(args, { netns: ns.path }).then(strip);
  return {
    hostLinks: await read(['-d', 'link', 'show', 'type', 'veth'], host),
    hostAddrs: await read(['addr', 'show', 'dev', 'veth-t'], host),
    hostRoutes4: await read(['-4', 'route', 'show', 'table', '116'], host),
    hostRoutes6: await read(['-6', 'route', 'show', 'table', '116'], host),
    podAddrs: await read(['addr', 'show', 'dev', 'eth0'], pod),
    podRoutes4: await read(['-4', 'route', 'show'], pod),
    podRoutes6: await read(['-6', 'route', 'show'], pod),
  };
}

function hostLines(pod: TestNetns): BatchLine[] {
  const dev = 'veth-t';
  return [
    link.addVeth({ name: dev, peerName: 'eth0', peerNetns: pod.path, mac: '02:00:00:00:00:01', peerMac: '02:00:00:00:00:02', mtuBytes: 1400 }),
    link.set(dev, { alias: 'COIL:default:0123:eth0', state: 'up' }),
    addr.add({ cidr: '10.250.0.9/32', dev }),
    addr.add({ cidr: 'fe80::1/64', dev, isNoDad: true }),
    route.add({ dst: '10.64.0.5/32', dev, scope: 'link', protocol: 30, table: 116 }),
    route.add({ dst: 'fd00::5/128', dev, protocol: 30, table: 116 }),
  ];
}

const POD_LINES: BatchLine[] = [
  link.set('eth0', { state: 'up' }),
  addr.add({ cidr: '10.64.0.5/32', dev: 'eth0' }),
  addr.add({ cidr: 'fd00::5/128', dev: 'eth0', isNoDad: true }),
  route.add({ dst: '10.250.0.9/32', dev: 'eth0', scope: 'link' }),
  route.add({ dst: 'default', via: '10.250.0.9', dev: 'eth0' }),
  route.add({ dst: '::/0', via: 'fe80::1', dev: 'eth0' }),
];

describe('netlink agent in real network namespaces', { skip }, () => {
  const netns = new TestNetnsSet();
  const spawned: string[][] = [];
  const counting: ProcessSpawner = (argv, input, t) => {
    spawned.push([...argv]);
    return spawnProcess(argv, input, t);
  };
  const agent = new NetlinkAgent();
  const viaAgent = new IpRunner({ agent, spawner: counting });
  const viaIp = new IpRunner();
  let hostA: TestNetns; let podA: TestNetns; let hostB: TestNetns; let podB: TestNetns;

  before(async () => {
    hostA = await netns.create('nla-host');
    podA = await netns.create('nla-pod');
    hostB = await netns.create('nlb-host');
    podB = await netns.create('nlb-pod');
  });
  after(async () => {
    agent.stop();
    await netns.cleanup();
  });

  test('the pod wiring leaves the same links, addresses and routes as ip -batch, without an ip process', async () => {
    await viaIp.batch(hostLines(podA), { netns: hostA.path });
    await viaIp.batch(POD_LINES, { netns: podA.path });
    spawned.length = 0;
    await viaAgent.batch(hostLines(podB), { netns: hostB.path });
    await viaAgent.batch(POD_LINES, { netns: podB.path });
    assert.deepEqual(spawned, [], 'IpRunner started a process for a batch the agent can apply');
    const [a, b] = [await state(viaIp, hostA, podA), await state(viaIp, hostB, podB)];
    assert.deepEqual(b, a);
    assert.ok(JSON.stringify(a).includes('COIL:default:0123:eth0'));
  });

  test('fails as ip does: errno, failed line, and -force reporting every failed line', async () => {
    const errorOf = async (ip: IpRunner, lines: BatchLine[], netnsPath: string, onError?: 'continue') => {
      const err = await ip.batch(lines, { netns: netnsPath, ...(onError ? { onError } : {}) }).then(() => undefined, (e: unknown) => e);
      assert.ok(err instanceof NetlinkError, String(err));
      return { errno: err.errno, line: err.failedLine, message: err.message.replace(/^.*?: line/, 'line') };
    };
    const cases: Array<[BatchLine[], 'host' | 'pod', 'continue'?]> = [
      [[link.set('veth-t', { state: 'up' }), link.addVeth({ name: 'veth-t', peerName: 'x0' })], 'host'], // EEXIST at line 2
      [[addr.add({ cidr: '10.64.0.5/32', dev: 'eth0' })], 'pod'], // address exists
      [[link.set('missing0', { state: 'up' }), link.set('missing1', { state: 'up' })], 'host', 'continue'], // ENODEV twice
      [[route.add({ dst: '10.9.0.0/16', via: '10.250.0.9', dev: 'eth0' })], 'pod'], // gateway reachable: applies
    ];
    for (const [lines, side, onError] of cases) {
      const [nsA, nsB] = side === 'host' ? [hostA, hostB] : [podA, podB];
      const ok = lines[0]![0] === 'route';
      if (ok) {
        await viaIp.batch(lines, { netns: nsA.path });
        await viaAgent.batch(lines, { netns: nsB.path });
        continue;
      }
      assert.deepEqual(await errorOf(viaAgent, lines, nsB.path, onError), await errorOf(viaIp, lines, nsA.path, onError), lines.map((l) => l.join(' ')).join('; '));
    }
    await assert.rejects(viaAgent.batch(POD_LINES, { netns: '/run/netns/coiltest-missing-netns' }), (e: unknown) => isNetlinkErrno(e, 'ENOENT'));
  });

  test('retiring and group deletion remove the veth and both ends', async () => {
    await viaAgent.batch([['link', 'set', 'dev', 'veth-t', 'down', 'group', '1129269580']], { netns: hostB.path });
    await viaAgent.batch([['link', 'del', 'group', '1129269580']], { netns: hostB.path });
    assert.deepEqual(await viaIp.json(['link', 'show', 'type', 'veth'], { netns: hostB.path }), []);
    assert.deepEqual((await viaIp.json<Array<{ ifname: string }>>(['link', 'show'], { netns: podB.path })).map((l) => l.ifname), ['lo']);
  });

  test('a sequence sends host and pod sides in one request and stops at the first failing step, as ip does', async () => {
    class CountingAgent extends NetlinkAgent {
      requests = 0;
      override batches(list: Parameters<NetlinkAgent['batches']>[0]): ReturnType<NetlinkAgent['batches']> {
        this.requests++;
        return super.batches(list);
      }
    }
    const counted = new CountingAgent();
    const seqAgent = new IpRunner({ agent: counted, spawner: counting });
    try {
      spawned.length = 0;
      const wired = await seqAgent.batchSequence([{ lines: hostLines(podB), options: { netns: hostB.path } }, { lines: POD_LINES, options: { netns: podB.path } }]);
      assert.deepEqual(wired, { ok: true });
      assert.equal(counted.requests, 1);
      assert.deepEqual(spawned, []);
      await viaIp.batch([['route', 'del', '10.9.0.0/16']], { netns: podA.path }); // added to A (not B's gone eth0) by an earlier test
      assert.deepEqual(await state(viaIp, hostB, podB), await state(viaIp, hostA, podA));

      // Step 0 fails (the veth exists): step 1 must not run, through the agent or through ip.
      const marker = addr.add({ cidr: '10.99.99.99/32', dev: 'lo' });
      const outcomes = [];
      for (const [ip, host, pod] of [[seqAgent, hostB, podB], [viaIp, hostA, podA]] as const) {
        const o = await ip.batchSequence([{ lines: [hostLines(pod)[0]!], options: { netns: host.path } }, { lines: [marker], options: { netns: pod.path } }]);
        assert.equal(o.ok, false);
        assert.ok(!o.ok && o.error instanceof NetlinkError);
        outcomes.push({ step: !o.ok && o.step, errno: !o.ok && (o.error as NetlinkError).errno, line: !o.ok && (o.error as NetlinkError).failedLine });
        assert.deepEqual(await ip.json(['addr', 'show', 'dev', 'lo', 'to', '10.99.99.99/32'], { netns: pod.path }), []);
      }
      assert.deepEqual(outcomes, [{ step: 0, errno: 'EEXIST', line: 1 }, { step: 0, errno: 'EEXIST', line: 1 }]);

      // Step 1 fails: step 0 stays applied, and the failure names step 1.
      const o = await seqAgent.batchSequence([{ lines: [marker], options: { netns: podB.path } }, { lines: [link.set('missing0', { state: 'up' })], options: { netns: podB.path } }]);
      assert.ok(!o.ok && o.step === 1 && isNetlinkErrno(o.error, 'ENODEV'), JSON.stringify(o));
      assert.equal((await viaIp.json<unknown[]>(['addr', 'show', 'dev', 'lo', 'to', '10.99.99.99/32'], { netns: podB.path })).length, 1);
    } finally {
      counted.stop();
    }
  });

  test('a batch with a line the agent does not build runs with ip, alone and in a sequence', async () => {
    // `link add … txqueuelen N type veth` is of a kind the agent builds (link add) but outside its
    // subset (no txqueuelen): the agent refuses the batch before applying any of it, and IpRunner
    // runs `ip`.
    const vethWithTxqueuelen = (name: string): BatchLine => ['link', 'add', name, 'txqueuelen', '100', 'type', 'veth', 'peer', 'name', `${name}p`];
    spawned.length = 0;
    await viaAgent.batch([vethWithTxqueuelen('vq-a'), link.set('vq-a', { state: 'up' })], { netns: hostB.path });
    assert.equal(spawned.length, 1, 'one ip process');
    assert.ok(spawned[0]!.includes('-batch'));
    const [a] = await viaIp.json<{ flags: string[]; txqlen: number }[]>(['link', 'show', 'dev', 'vq-a'], { netns: hostB.path });
    assert.ok(a?.flags.includes('UP') && a.txqlen === 100, 'both lines applied, once, as written');

    spawned.length = 0;
    const marker = addr.add({ cidr: '10.99.98.1/32', dev: 'lo' });
    const o = await viaAgent.batchSequence([{ lines: [vethWithTxqueuelen('vq-b')], options: { netns: hostB.path } }, { lines: [marker], options: { netns: podB.path } }]);
    assert.deepEqual(o, { ok: true });
    assert.equal(spawned.length, 1, 'only the refused step ran as a process');
    assert.equal((await viaIp.json<unknown[]>(['link', 'show', 'dev', 'vq-b'], { netns: hostB.path })).length, 1);
    assert.equal((await viaIp.json<unknown[]>(['addr', 'show', 'dev', 'lo', 'to', '10.99.98.1/32'], { netns: podB.path })).length, 1);

    // A refused line that ip rejects too fails as ip says, not with the agent's refusal.
    await assert.rejects(viaAgent.batch([vethWithTxqueuelen('vq-a')], { netns: hostB.path }), (e: unknown) => isNetlinkErrno(e, 'EEXIST'));
  });

  test('a killed agent fails the batch in flight at most, and the next batch starts a new one', async () => {
    const pid = agent.pid;
    assert.ok(pid, 'agent running');
    process.kill(pid, 'SIGKILL');
    await new Promise((r) => setTimeout(r, 100));
    await viaAgent.batch([link.set('lo', { state: 'up' })], { netns: hostB.path });
    const next = agent.pid;
    assert.ok(next && next !== pid);
  });

  test('without a runtime, batches go to ip', async () => {
    const missing = new NetlinkAgent({ runtimePath: '/nonexistent/coil' });
    assert.equal(missing.isUsable, false);
    spawned.length = 0;
    await new IpRunner({ agent: missing, spawner: counting }).batch([link.set('lo', { state: 'up' })], { netns: hostB.path });
    assert.equal(spawned.length, 1);
    assert.ok(existsSync(probe.scriptPath));
  });
});
