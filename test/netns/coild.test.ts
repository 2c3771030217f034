/**
 * coild end to end on one netns node: the built `coil` executable, run as containerd runs it,
 * against coild (child, `--host-netns`) with the real control plane and IPAM controller.
 * Root only; skipped with the reason otherwise.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import type { BlockRequest } from '../../src/api/v2/blockrequest.js';
import { Kinds } from '../../src/api/v2/kinds.js';
import { ApiTransport } from '../../src/runtime/api-transport.js';
import { REPO_ROOT, eventually } from '../envtest/control-plane.js';
import { NodeLab, labLogsOnFailure, labSkipReason, type LabNode, type LabPod } from './node-lab.js';
import { prerequisite } from '../support/prerequisite.js';

interface ResultIp { address: string; gateway?: string; version?: string; interface?: number }
interface Route { dst: string; dev?: string; gateway?: string; protocol?: string }
interface AddrInfo { ifname: string; addr_info: { local: string; prefixlen: number; family: string }[] }

const GATEWAY = '10.250.0.1';

describe('coild on a netns node', { skip: prerequisite(labSkipReason()) }, () => {
  let lab: NodeLab;
  let node: LabNode;
  const added: { pod: LabPod; ipv4: string; ipv6: string }[] = [];
  const printLogsIfFailed = labLogsOnFailure();

  before(async () => {
    lab = await NodeLab.start();
    await lab.createPool('default', { subnets: [{ ipv4: '10.100.0.0/16', ipv6: 'fd00:100::/112' }], blockSizeBits: 5 });
    await lab.createPool('tiny', { subnets: [{ ipv4: '10.200.0.0/32' }], blockSizeBits: 0 });
    await lab.createNamespace('lab');
    await lab.createNamespace('tinyns', 'tiny');
    await lab.createNamespace('nopool', 'no-such-pool');
    node = await lab.addNode('node-a', GATEWAY);
    await lab.startCoild(node, ['--cooling-period=1s', '--block-release-grace=1s', '--addressblock-gc-interval=1s', '--low-water-mark=4']);
  });
  after(async () => {
    await printLogsIfFailed(lab);
    await lab?.stop();
  });

  for (const cniVersion of ['0.4.0', '1.0.0', '1.1.0']) {
    it(`ADD with cniVersion ${cniVersion} gives the pod the address its result names`, async () => {
      const pod = await lab.createPod(node, 'lab', `web-${cniVersion.replaceAll('.', '')}`);
      const r = await lab.runCoil(node, 'ADD', pod, { cniVersion });
      assert.equal(r.code, 0, r.stdout);
      assert.equal(r.json?.cniVersion, cniVersion);
      const ips = r.json!.ips as ResultIp[];
      const v4 = ips.find((i) => i.address.startsWith('10.100.'))!.address;
      const v6 = ips.find((i) => i.address.startsWith('fd00:100:'))!.address;
      assert.match(v4, /\/32$/);
      assert.match(v6, /\/128$/);
      if (cniVersion === '0.4.0') assert.deepEqual(ips.map((i) => i.version), ['4', '6']);
      else assert.ok(ips.every((i) => i.version === undefined));
      const [ipv4, ipv6] = [v4.split('/')[0]!, v6.split('/')[0]!];

      // Inside the pod: eth0 holds both addresses; default routes via the node IP and fe80::1.
      const addrs = await lab.ipJson<AddrInfo[]>(pod.ns, ['addr', 'show', 'dev', 'eth0']);
      const locals = addrs[0]!.addr_info.map((a) => `${a.local}/${a.prefixlen}`);
      assert.ok(locals.includes(v4) && locals.includes(v6), locals.join(' '));
      const routes4 = await lab.ipJson<Route[]>(pod.ns, ['-4', 'route', 'show']);
      assert.ok(routes4.some((x) => x.dst === 'default' && x.gateway === GATEWAY), JSON.stringify(routes4));
      const routes6 = await lab.ipJson<Route[]>(pod.ns, ['-6', 'route', 'show']);
      assert.ok(routes6.some((x) => x.dst === 'default' && x.gateway === 'fe80::1'), JSON.stringify(routes6));

      // On the node: the /32 in table 116 (proto 30) and the block in table 119.
      const t116 = await lab.ipJson<Route[]>(node.ns, ['-4', 'route', 'show', 'table', '116']);
      assert.ok(t116.some((x) => x.dst === ipv4 && x.dev?.startsWith('veth')), JSON.stringify(t116));
      const snap = await lab.snapshot(node);
      const mine = snap.allocations.find((a) => a.containerId === pod.containerId)!;
      assert.equal(mine.ipv4, ipv4);
      assert.equal(mine.podName, pod.name);
      const block = snap.blocks.find((b) => b.name === mine.block)!;
      const t119 = await lab.ipJson<Route[]>(node.ns, ['-4', 'route', 'show', 'table', '119']);
      assert.ok(t119.some((x) => x.dst === block.ipv4 && x.dev === 'lo'), JSON.stringify(t119));
      added.push({ pod, ipv4, ipv6 });
    });
  }

  it('two pods on the node ping each other over IPv4 and IPv6', async () => {
    const [a, b] = added;
    assert.ok(a && b);
    // -w 5: probe once a second until one reply (a veth's first packet may be dropped while
    // the kernel's linkwatch applies its carrier; src/node-agent/podnet/pod-network.test.ts says more).
    await lab.ip.exec(['ping', '-c1', '-w5', b.ipv4], { netns: a.pod.ns.path });
    await lab.ip.exec(['ping', '-c1', '-w5', a.ipv4], { netns: b.pod.ns.path });
    await lab.ip.exec(['ping', '-6', '-c1', '-w5', b.ipv6], { netns: a.pod.ns.path });
  });

  it('ADD repeated for the same container returns the same address', async () => {
    const a = added[0]!;
    const r = await lab.runCoil(node, 'ADD', a.pod, { cniVersion: '1.0.0' });
    assert.equal(r.code, 0, r.stdout);
    assert.ok((r.json!.ips as ResultIp[]).some((i) => i.address === `${a.ipv4}/32`));
  });

  it('CHECK passes on a wired pod and fails once its host veth is deleted', async () => {
    const pod = await lab.createPod(node, 'lab', 'checked');
    assert.equal((await lab.runCoil(node, 'ADD', pod)).code, 0);
    assert.equal((await lab.runCoil(node, 'CHECK', pod)).code, 0);
    const entry = (await lab.hostPods(node)).find((e) => e.containerId === pod.containerId)!;
    await lab.ip.exec([lab.ip.ipPath, 'link', 'del', entry.hostIfname], { netns: node.ns.path });
    const r = await lab.runCoil(node, 'CHECK', pod);
    assert.notEqual(r.code, 0);
    assert.match(String(r.json?.msg), /check failed/);
    assert.equal((await lab.runCoil(node, 'DEL', pod)).code, 0);
  });

  it('DEL removes veth, routes and allocation; a second DEL succeeds', async () => {
    const a = added.pop()!;
    assert.equal((await lab.runCoil(node, 'DEL', a.pod)).code, 0);
    assert.ok(!(await lab.hostPods(node)).some((e) => e.containerId === a.pod.containerId));
    const t116 = await lab.ipJson<Route[]>(node.ns, ['-4', 'route', 'show', 'table', '116']);
    assert.ok(!t116.some((x) => x.dst === a.ipv4));
    assert.ok(!(await lab.snapshot(node)).allocations.some((x) => x.containerId === a.pod.containerId));
    // The veth pair itself goes shortly after, in the reaper's batch (PodNetwork.destroy).
    await eventually(async () => (await lab.ipJson<unknown[]>(a.pod.ns, ['link', 'show', 'dev', 'eth0']).catch(() => [])).length === 0, { timeoutMs: 3_000 });
    assert.equal((await lab.runCoil(node, 'DEL', a.pod)).code, 0);
    const never = await lab.createPod(node, 'lab', 'never-added');
    assert.equal((await lab.runCoil(node, 'DEL', never)).code, 0);
  });

  it('GC frees the address of a pod whose veth is gone', async () => {
    const pod = await lab.createPod(node, 'lab', 'vanished');
    assert.equal((await lab.runCoil(node, 'ADD', pod)).code, 0);
    await lab.ip.exec([lab.ip.ipPath, 'netns', 'del', pod.ns.name]);
    await eventually(async () => !(await lab.snapshot(node)).allocations.some((a) => a.containerId === pod.containerId), { timeoutMs: 15_000 });
  });

  it('BlockRequests are owned by the Node (Kubernetes GC removes one whose coild is gone), and coild deletes each it consumed', async () => {
    // coild deletes a request as soon as its block arrives, so its creation is watched for.
    const seen: BlockRequest[] = [];
    const stop = new AbortController();
    const transport = new ApiTransport(lab.cp.kubeConfig);
    const watching = transport.watch({ path: '/apis/coil.cybozu.com/v2/blockrequests', query: { labelSelector: 'coil.cybozu.com/node=node-a' } }, stop.signal,
      (type, object) => { if (type === 'ADDED') seen.push(object as BlockRequest); }).catch(() => undefined);
    try {
      await lab.createPool('owned', { subnets: [{ ipv4: '10.210.0.0/24' }], blockSizeBits: 4 });
      await lab.createNamespace('ownedns', 'owned');
      const pod = await lab.createPod(node, 'ownedns', 'owned-0');
      assert.equal((await lab.runCoil(node, 'ADD', pod)).code, 0);
      const br = await eventually(() => seen.find((b) => b.spec.poolName === 'owned') ?? false, { timeoutMs: 10_000 });
      assert.match(br.metadata!.name!, /^req-owned-node-a-/);
      assert.deepEqual(br.metadata!.ownerReferences?.map((o) => `${o.kind}/${o.name}`), ['Node/node-a']);
      await eventually(async () => (await lab.admin.list(Kinds.BlockRequest, { labelSelector: 'coil.cybozu.com/node=node-a' })).length === 0, { timeoutMs: 10_000 });
      assert.equal((await lab.runCoil(node, 'DEL', pod)).code, 0);
      // Its block goes after cooling and grace; the tests after this one compare block lists.
      await eventually(async () => !(await lab.blocksOf(node)).some((b) => b.startsWith('owned-')), { timeoutMs: 15_000 });
    } finally {
      stop.abort();
      await watching;
    }
  });

  it('metrics: addresses per pool, block requests with wait time, ADD/DEL latency', async () => {
    const text = await (await fetch(`http://127.0.0.1:${node.metricsPort}/metrics`)).text();
    const value = (re: RegExp): number => Number(re.exec(text)?.[1]);
    assert.equal(value(/^coil_coild_allocated_addresses\{pool="default"\} (\d+)/m), added.length);
    assert.ok(value(/^coil_coild_free_addresses\{pool="default"\} (\d+)/m) > 0);
    assert.ok(value(/^coil_coild_block_requests_total\{pool="default",result="allocated"\} (\d+)/m) >= 1);
    assert.ok(value(/^coil_coild_block_request_wait_seconds_count\{pool="default"\} (\d+)/m) >= 1);
    assert.ok(value(/^coil_coild_cni_duration_seconds_count\{command="ADD",result="success"\} (\d+)/m) >= 3);
    assert.ok(value(/^coil_coild_cni_duration_seconds_count\{command="DEL",result="success"\} (\d+)/m) >= 1);
  });

  it('GC (CNI 1.1) releases every attachment the runtime no longer lists', async () => {
    const keep = added[0]!.pod;
    const stray = await lab.createPod(node, 'lab', 'stray');
    assert.equal((await lab.runCoil(node, 'ADD', stray, { cniVersion: '1.1.0' })).code, 0);
    const valid = [...added.map((a) => a.pod), keep].map((p) => ({ containerID: p.containerId, ifname: 'eth0' }));
    const r = await lab.runCoil(node, 'GC', keep, { cniVersion: '1.1.0', env: { CNI_CONTAINERID: '', CNI_NETNS: '', CNI_IFNAME: '', CNI_ARGS: '' }, netconf: { 'cni.dev/valid-attachments': valid } });
    assert.equal(r.code, 0, r.stdout);
    assert.ok(!(await lab.snapshot(node)).allocations.some((a) => a.containerId === stray.containerId));
    assert.ok(!(await lab.hostPods(node)).some((e) => e.containerId === stray.containerId));
    assert.ok((await lab.snapshot(node)).allocations.some((a) => a.containerId === keep.containerId));
  });

  it('STATUS (CNI 1.1) reports ready', async () => {
    const r = await lab.runCoil(node, 'STATUS', added[0]!.pod, { cniVersion: '1.1.0' });
    assert.equal(r.code, 0, r.stdout);
  });

  it('coild ipam-status prints blocks and allocations with pod names', async () => {
    const { stdout } = await promisify(execFile)(join(REPO_ROOT, 'node_modules/.bin/node'), [join(REPO_ROOT, 'dist/src/node-agent/main.js'), 'ipam-status', '--health-addr', `127.0.0.1:${node.healthPort}`, '--secure-endpoints=false']);
    assert.match(stdout, /POOL\s+BLOCKS/);
    assert.match(stdout, new RegExp(`lab\\s+${added[0]!.pod.name}\\s`));
  });

  describe('bad input: a clear CNI error and nothing leaked', () => {
    const state = async () => ({ host: (await lab.hostPods(node)).length, allocs: (await lab.snapshot(node)).allocations.length, blocks: await lab.blocksOf(node) });
    const cases: [string, (pod: LabPod) => Promise<{ code: number | null; json: Record<string, unknown> | undefined }>, number, RegExp][] = [
      ['missing CNI_NETNS', (pod) => lab.runCoil(node, 'ADD', pod, { env: { CNI_NETNS: '' } }), 4, /CNI_NETNS/],
      ['garbage on stdin', (pod) => lab.runCoil(node, 'ADD', pod, { stdin: '{"cniVersion": "1.0.0", garbage' }), 6, /./],
      ['a prevResult (coil must be first in the chain)', (pod) => lab.runCoil(node, 'ADD', pod, { netconf: { prevResult: { cniVersion: '1.0.0', interfaces: [{ name: 'eth0', sandbox: pod.ns.path }], ips: [{ address: '10.1.1.1/32', interface: 0 }] } } }), 2, /first plugin/],
      ['unknown cniVersion', (pod) => lab.runCoil(node, 'ADD', pod, { cniVersion: '9.9.9' }), 1, /incompatible CNI versions/],
    ];
    for (const [name, run, code, msg] of cases) {
      it(name, async () => {
        const pod = await lab.createPod(node, 'lab', `bad-${name.replaceAll(/[^a-z]/g, '')}`);
        const before = await state();
        const r = await run(pod);
        assert.equal(r.json?.code, code, JSON.stringify(r.json));
        assert.match(String(r.json?.msg), msg);
        assert.deepEqual(await state(), before);
      });
    }

    it('a namespace pointing at a pool that does not exist', async () => {
      const pod = await lab.createPod(node, 'nopool', 'orphan');
      const before = await state();
      const r = await lab.runCoil(node, 'ADD', pod);
      assert.equal(r.json?.code, 7, JSON.stringify(r.json));
      assert.match(String(r.json?.msg), /AddressPool "no-such-pool" does not exist/);
      assert.deepEqual(await state(), before);
    });

    it('a pool out of blocks', async () => {
      const first = await lab.createPod(node, 'tinyns', 'first');
      assert.equal((await lab.runCoil(node, 'ADD', first)).code, 0);
      const pod = await lab.createPod(node, 'tinyns', 'second');
      const before = await state();
      const r = await lab.runCoil(node, 'ADD', pod);
      assert.equal(r.json?.code, 999, JSON.stringify(r.json));
      assert.match(String(r.json?.msg), /pool tiny has no free block.*out of blocks/);
      assert.deepEqual(await state(), before);
      await eventually(async () => {
        const res = await lab.cp.request('GET', '/api/v1/namespaces/tinyns/events');
        return /AddressPoolExhausted/.test(res.body);
      }, { timeoutMs: 10_000 });
      assert.equal((await lab.runCoil(node, 'DEL', first)).code, 0);
    });
  });

  it('once every pod is gone, the node releases its blocks after cooling and grace', async () => {
    for (const a of added) assert.equal((await lab.runCoil(node, 'DEL', a.pod)).code, 0);
    await eventually(async () => (await lab.blocksOf(node)).length === 0, { timeoutMs: 20_000 });
    await eventually(async () => (await lab.ipJson<Route[]>(node.ns, ['-4', 'route', 'show', 'table', '119'])).length === 0, { timeoutMs: 5_000 });
    assert.deepEqual(await lab.hostPods(node), []);
  });

  // Last: it stops the controller.
  it('with --clear-routes-on-shutdown, coild stopping after its Node was deleted flushes table 119 (Coil #370)', async () => {
    const other = await lab.addNode('node-c', '10.250.0.3');
    await lab.startCoild(other, ['--clear-routes-on-shutdown']);
    assert.equal((await lab.runCoil(other, 'ADD', await lab.createPod(other, 'lab', 'on-c'))).code, 0);
    const t119 = () => lab.ipJson<Route[]>(other.ns, ['-4', 'route', 'show', 'table', '119']);
    assert.equal((await t119()).length, 1);
    await lab.stopController(); // its Node GC would delete the blocks, and coild would unexport them anyway
    await lab.admin.delete(Kinds.Node, { name: 'node-c' });
    await lab.stopCoild(other, 'SIGTERM');
    assert.deepEqual(await t119(), []);
  });
});
