/**
 * The netlink agent against `ip` itself, in real network namespaces: the same typed requests,
 * applied by the agent and by `ip -batch` (their iproute2 lines, rt-format.ts: the oracle), leave
 * the same kernel state and fail with the same errno and line, and the NetlinkExecutor really
 * sends them to the agent (no `ip` process) when it can.
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { IpRunner, spawnProcess, type ProcessSpawner } from './iproute2/ip-runner.js';
import { NetlinkAgent } from './netlink-agent.js';
import { NetlinkExecutor } from './netlink-executor.js';
import { NetlinkError, isNetlinkErrno } from './netlink-error.js';
import { rt, type RtRequest } from './rt-request.js';
import { TestNetnsSet, netnsSkipReason, type TestNetns } from '../../test/netns/test-netns.js';
import { prerequisite } from '../../test/support/prerequisite.js';

const probe = new NetlinkAgent();
const skip = prerequisite(netnsSkipReason() ?? (probe.isUsable ? undefined : `${probe.runtimePath} or ${probe.scriptPath} missing: run hack/build-cni.sh`));

/** Kernel state of one side, without what differs by nature (ifindex, netnsid, timers). */
async function state(ip: IpRunner, host: TestNetns, pod: TestNetns): Promise<unknown> {
  // operstate is not compared: the kernel's linkwatch sets it some time after the link is set up
  // (UNKNOWN, then UP; seen once under load); the admin state is in `flags`, which is compared.
  // Nor IPv6 DAD's `tentative`: the side wired last may still be in DAD (it waits for the peer's
  // carrier) while the other finished long ago; seen under load, with every other field equal.
  const strip = (x: unknown): unknown => JSON.parse(JSON.stringify(x, (k, v: unknown) =>
    ['ifindex', 'link_index', 'link_netnsid', 'valid_life_time', 'preferred_life_time', 'stats64', 'inet6_addr_gen_mode', 'parentbus', 'parentdev', 'operstate', 'tentative'].includes(k) ? undefined : v));
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

function hostRequests(pod: TestNetns): RtRequest[] {
  const dev = 'veth-t';
  return [
    rt.veth({ name: dev, peerName: 'eth0', peerNetns: pod.path, mac: '02:00:00:00:00:01', peerMac: '02:00:00:00:00:02', mtuBytes: 1400 }),
    rt.linkSet(dev, { alias: 'COIL:default:0123:eth0', up: true }),
    rt.addrAdd({ cidr: '10.250.0.9/32', dev }),
    rt.addrAdd({ cidr: 'fe80::1/64', dev, isNoDad: true }),
    rt.routeAdd({ dst: '10.64.0.5/32', dev, scope: 'link', protocol: 30, table: 116 }),
    rt.routeAdd({ dst: 'fd00::5/128', dev, protocol: 30, table: 116 }),
  ];
}

const POD_REQUESTS: RtRequest[] = [
  rt.linkSet('eth0', { up: true }),
  rt.addrAdd({ cidr: '10.64.0.5/32', dev: 'eth0' }),
  rt.addrAdd({ cidr: 'fd00::5/128', dev: 'eth0', isNoDad: true }),
  rt.routeAdd({ dst: '10.250.0.9/32', dev: 'eth0', scope: 'link' }),
  rt.routeAdd({ dst: 'default', via: '10.250.0.9', dev: 'eth0' }),
  rt.routeAdd({ dst: '::/0', via: 'fe80::1', dev: 'eth0' }),
];

describe('netlink agent in real network namespaces', { skip }, () => {
  const netns = new TestNetnsSet();
  const spawned: string[][] = [];
  const counting: ProcessSpawner = (argv, input, t) => {
    spawned.push([...argv]);
    return spawnProcess(argv, input, t);
  };
  const agent = new NetlinkAgent();
  const viaAgent = new NetlinkExecutor({ rtnetlink: agent, ip: new IpRunner({ spawner: counting }) });
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

  test('the pod wiring leaves the same links, addresses and routes as ip -batch of the same requests, without an ip process', async () => {
    await viaIp.apply(hostRequests(podA), { netns: hostA.path });
    await viaIp.apply(POD_REQUESTS, { netns: podA.path });
    spawned.length = 0;
    await viaAgent.apply(hostRequests(podB), { netns: hostB.path });
    await viaAgent.apply(POD_REQUESTS, { netns: podB.path });
    assert.deepEqual(spawned, [], 'the executor started a process for a batch the agent can apply');
    const [a, b] = [await state(viaIp, hostA, podA), await state(viaIp, hostB, podB)];
    assert.deepEqual(b, a);
    assert.ok(JSON.stringify(a).includes('COIL:default:0123:eth0'));
  });

  test('fails as ip does (failed line, message, -force reporting every failed line), with the kernel\'s errno', async () => {
    const errorOf = async (ip: IpRunner | NetlinkExecutor, lines: RtRequest[], netnsPath: string, onError?: 'continue') => {
      const err = await ip.apply(lines, { netns: netnsPath, ...(onError ? { onError } : {}) }).then(() => undefined, (e: unknown) => e);
      assert.ok(err instanceof NetlinkError, String(err));
      return { errno: err.errno, line: err.failedRequest, message: err.message.replace(/^.*?: line/, 'line') };
    };
    // [requests, where, onError, the errno class the kernel answers]
    const cases: Array<[RtRequest[], 'host' | 'pod', 'continue' | undefined, string | undefined]> = [
      [[rt.linkSet('veth-t', { up: true }), rt.veth({ name: 'veth-t', peerName: 'x0' })], 'host', undefined, 'EEXIST'], // at line 2
      [[rt.addrAdd({ cidr: '10.64.0.5/32', dev: 'eth0' })], 'pod', undefined, 'EEXIST'], // address exists
      [[rt.linkSet('missing0', { up: true }), rt.linkSet('missing1', { up: true })], 'host', 'continue', 'ENODEV'], // twice
      [[rt.routeAdd({ dst: '10.9.0.0/16', via: '10.250.0.9', dev: 'eth0' })], 'pod', undefined, undefined], // gateway reachable: applies
    ];
    for (const [lines, side, onError, errno] of cases) {
      const [nsA, nsB] = side === 'host' ? [hostA, hostB] : [podA, podB];
      const ok = lines[0]!.kind === 'route';
      if (ok) {
        await viaIp.apply(lines, { netns: nsA.path });
        await viaAgent.apply(lines, { netns: nsB.path });
        continue;
      }
      const [agent, ip] = [await errorOf(viaAgent, lines, nsB.path, onError), await errorOf(viaIp, lines, nsA.path, onError)];
      assert.deepEqual({ ...agent, errno: undefined }, { ...ip, errno: undefined }, JSON.stringify(lines));
      // The rtnetlink path classifies by the errno the kernel answered; iproute2 prints only text,
      // which does not always name it ("Error: ipv4: Address already assigned." is EEXIST).
      assert.equal(agent.errno, errno, JSON.stringify(lines));
      assert.ok(ip.errno === errno || ip.errno === undefined, JSON.stringify(lines));
    }
    await assert.rejects(viaAgent.apply(POD_REQUESTS, { netns: '/run/netns/coiltest-missing-netns' }), (e: unknown) => isNetlinkErrno(e, 'ENOENT'));
  });

  test('retiring and group deletion remove the veth and both ends', async () => {
    await viaAgent.apply([rt.linkSet('veth-t', { up: false, group: 1129269580 })], { netns: hostB.path });
    await viaAgent.apply([rt.linkDelGroup(1129269580)], { netns: hostB.path });
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
    const seqAgent = new NetlinkExecutor({ rtnetlink: counted, ip: new IpRunner({ spawner: counting }) });
    try {
      spawned.length = 0;
      const wired = await seqAgent.applySequence([{ requests: hostRequests(podB), options: { netns: hostB.path } }, { requests: POD_REQUESTS, options: { netns: podB.path } }]);
      assert.deepEqual(wired, { ok: true });
      assert.equal(counted.requests, 1);
      assert.deepEqual(spawned, []);
      await viaIp.batch([['route', 'del', '10.9.0.0/16']], { netns: podA.path }); // added to A (not B's gone eth0) by an earlier test
      assert.deepEqual(await state(viaIp, hostB, podB), await state(viaIp, hostA, podA));

      // Step 0 fails (the veth exists): step 1 must not run, through the agent or through ip.
      const marker = rt.addrAdd({ cidr: '10.99.99.99/32', dev: 'lo' });
      const outcomes = [];
      for (const [ip, host, pod] of [[seqAgent, hostB, podB], [viaIp, hostA, podA]] as const) {
        const o = await ip.applySequence([{ requests: [hostRequests(pod)[0]!], options: { netns: host.path } }, { requests: [marker], options: { netns: pod.path } }]);
        assert.equal(o.ok, false);
        assert.ok(!o.ok && o.error instanceof NetlinkError);
        outcomes.push({ step: !o.ok && o.step, errno: !o.ok && (o.error as NetlinkError).errno, line: !o.ok && (o.error as NetlinkError).failedRequest });
        assert.deepEqual(await viaIp.json(['addr', 'show', 'dev', 'lo', 'to', '10.99.99.99/32'], { netns: pod.path }), []);
      }
      assert.deepEqual(outcomes, [{ step: 0, errno: 'EEXIST', line: 1 }, { step: 0, errno: 'EEXIST', line: 1 }]);

      // Step 1 fails: step 0 stays applied, and the failure names step 1.
      const o = await seqAgent.applySequence([{ requests: [marker], options: { netns: podB.path } }, { requests: [rt.linkSet('missing0', { up: true })], options: { netns: podB.path } }]);
      assert.ok(!o.ok && o.step === 1 && isNetlinkErrno(o.error, 'ENODEV'), JSON.stringify(o));
      assert.equal((await viaIp.json<unknown[]>(['addr', 'show', 'dev', 'lo', 'to', '10.99.99.99/32'], { netns: podB.path })).length, 1);
    } finally {
      counted.stop();
    }
  });

  test('a request with a value no request may carry fails at that request on both paths, as ip does', async () => {
    const bad = [rt.addrAdd({ cidr: '10.99.97.1/32', dev: 'lo' }), rt.veth({ name: 'vq-a', peerName: 'vq-ap', mac: 'not-a-mac' })];
    // The agent applies request 1, then refuses request 2 (EINVAL, a permanent failure); ip refuses line 2 as well.
    const viaA = await viaAgent.apply(bad, { netns: hostB.path }).then(() => undefined, (e: unknown) => e);
    assert.ok(viaA instanceof NetlinkError && viaA.errno === undefined && viaA.failedRequest === 2 && /invalid MAC/.test(viaA.message), String(viaA));
    const viaI = await viaIp.apply(bad, { netns: hostA.path }).then(() => undefined, (e: unknown) => e);
    assert.ok(viaI instanceof NetlinkError && viaI.failedRequest === 2, String(viaI));
    assert.deepEqual(await viaIp.json(['link', 'show', 'dev', 'vq-a'], { netns: hostB.path }).catch(() => []), []);
  });

  test('a killed agent fails the batch in flight at most, and the next batch starts a new one', async () => {
    const pid = agent.pid;
    assert.ok(pid, 'agent running');
    process.kill(pid, 'SIGKILL');
    await new Promise((r) => setTimeout(r, 100));
    await viaAgent.apply([rt.linkSet('lo', { up: true })], { netns: hostB.path });
    const next = agent.pid;
    assert.ok(next && next !== pid);
  });

  test('without a runtime, requests go to ip', async () => {
    const missing = new NetlinkAgent({ runtimePath: '/nonexistent/coil' });
    assert.equal(missing.isUsable, false);
    spawned.length = 0;
    await new NetlinkExecutor({ rtnetlink: missing, ip: new IpRunner({ spawner: counting }) }).apply([rt.linkSet('lo', { up: true })], { netns: hostB.path });
    assert.equal(spawned.length, 1);
    assert.ok(existsSync(probe.scriptPath));
  });
});
