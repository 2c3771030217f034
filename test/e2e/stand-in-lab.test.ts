/**
 * End to end in the STAND-IN lab (hack/lab/stand-in-lab.ts; the real-node lab's suite is
 * test/e2e/real-nodes.test.ts): 3 netns nodes with coild and BIRD, coil-controller,
 * the chart's RBAC, pods made through the real `coil` executable. The scenarios follow Coil's
 * own e2e suite (docs/compatibility.md#coils-end-to-end-scenarios, 1–13 and 18), adapted to the
 * lab.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import * as k8s from '@kubernetes/client-node';
import { StandInLab as Lab } from '../../hack/lab/stand-in-lab.js';
import { canI } from '../../hack/lab/credentials.js';
import { listLabNetns } from '../../hack/lab/topology.js';
import { eventually } from '../envtest/control-plane.js';
import { kubectl } from '../envtest/tools.js';
import { prerequisite } from '../support/prerequisite.js';

const run = promisify(execFile);
const isRoot = process.getuid?.() === 0;

type Block = { metadata: { name: string; labels: Record<string, string> }; ipv4?: string };

describe('the stand-in lab (e2e)', { skip: prerequisite(isRoot ? undefined : 'the lab needs root (network namespaces)') }, () => {
  let lab: Lab;
  let objects: k8s.CustomObjectsApi;

  const blocksOf = async (node?: string): Promise<Block[]> => {
    const list = (await objects.listClusterCustomObject({ group: 'coil.cybozu.com', version: 'v2', plural: 'addressblocks' })) as { items: Block[] };
    return list.items.filter((b) => !node || b.metadata.labels['coil.cybozu.com/node'] === node);
  };

  before(async () => {
    lab = await Lab.up({ coildArgs: ['--cooling-period=1s', '--block-release-grace=1s', '--addressblock-gc-interval=5s'] });
    objects = lab.cp.kubeConfig.makeApiClient(k8s.CustomObjectsApi);
    for (let i = 0; i < 6; i++) await lab.addPod(lab.nodes[i % 3]!, `pod-${i + 1}`);
  });
  after(() => lab?.stop());

  test('pods on different nodes ping each other through BIRD-learned routes', async () => {
    await lab.waitForBgp();
    const pods = [...lab.pods.values()];
    for (const a of pods.slice(0, 3)) {
      for (const b of pods.filter((p) => p.node !== a.node)) {
        assert.ok(await lab.ping(a, b.ips[0]!), `${a.name}@${a.node} -> ${b.name}@${b.node} ${b.ips[0]}`);
      }
    }
    const learned = await run('ip', ['-n', lab.nodes[0]!.netns, 'route', 'show', 'proto', 'bird']);
    assert.match(learned.stdout, /^10\.120\.\d+\.\d+\/27 via 172\.31\.120\.1[23]/m);
  });

  test('the invariant checker finds nothing wrong with the running lab', async () => {
    const view = await lab.view();
    assert.equal(view.pods.length, 6);
    assert.equal(view.nodes.flatMap((n) => n.allocations ?? []).length, 6, 'coild reports 6 allocations');
    assert.deepEqual(await lab.check(), []);
  });

  test('(1) the leader Lease exists', async () => {
    const lease = await lab.cp.kubeConfig.makeApiClient(k8s.CoordinationV1Api).readNamespacedLease({ name: 'coil-leader', namespace: 'kube-system' });
    assert.ok(lease.spec?.holderIdentity, 'a holder');
  });

  test('(2) the webhook rejects an invalid pool', async () => {
    const invalid = { apiVersion: 'coil.cybozu.com/v2', kind: 'AddressPool', metadata: { name: 'invalid' }, spec: { blockSizeBits: 5, subnets: [{ ipv4: '10.224.0.0/30' }] } };
    await assert.rejects(kubectl(lab.cp.kubeconfigPath, ['apply', '-f', '-'], JSON.stringify(invalid)), /spec\.subnets\[0\].*too narrow subnet/);
  });

  test('(3, 18) the controller and coild metrics endpoints parse', async () => {
    const text = await (await fetch(`http://127.0.0.1:${lab.controllerPorts[0]!.metrics}/metrics`)).text();
    assert.match(text, /^coil_controller_max_blocks\{pool="default"\} 2048$/m);
    assert.match(text, /^coil_controller_allocated_blocks\{pool="default"\} 3$/m);
    for (const node of lab.nodes) {
      const coild = await lab.nodeHttp(node, 9384, '/metrics');
      assert.match(coild, /^grpc_server_handled_total\{.*grpc_method="Add".*\} \d+$/m, `${node.name} metrics`);
    }
  });

  test('(10) table 119 of every node holds exactly its blocks', async () => {
    for (const node of lab.nodes) {
      const { stdout } = await run('ip', ['-n', node.netns, '-4', 'route', 'show', 'table', '119']);
      const exported = stdout.split('\n').filter(Boolean).map((l) => l.split(' ')[0]).sort();
      const blocks = (await blocksOf(node.name)).map((b) => b.ipv4).sort();
      assert.deepEqual(exported, blocks, node.name);
      assert.match(stdout, /dev lo proto 30/);
    }
  });

  test('(9) a coild restart keeps each node\'s blocks, and a new pod uses them', async () => {
    const before = await blocksOf();
    for (const node of lab.nodes) await lab.stopCoild(node, { crash: true });
    for (const node of lab.nodes) await lab.startCoild(node);
    const pod = await lab.addPod(lab.nodes[0]!, 'after-restart');
    assert.deepEqual((await blocksOf()).map((b) => b.metadata.name).sort(), before.map((b) => b.metadata.name).sort());
    const n1Blocks = (await blocksOf(lab.nodes[0]!.name)).map((b) => b.ipv4!.split('/')[0]!.split('.').slice(0, 3).join('.'));
    assert.ok(n1Blocks.some((prefix) => pod.ips[0]!.startsWith(prefix)), `${pod.ips[0]} is in a block of ${lab.nodes[0]!.name}`);
    const others = [...lab.pods.values()].filter((p) => p.name !== pod.name).map((p) => p.ips[0]);
    assert.ok(!others.includes(pod.ips[0]), 'no address given twice after the restart');
    await lab.deletePod('after-restart');
  });

  test('(4) an orphaned block of a non-existent node is collected', async () => {
    await objects.createClusterCustomObject({
      group: 'coil.cybozu.com', version: 'v2', plural: 'addressblocks',
      body: {
        apiVersion: 'coil.cybozu.com/v2', kind: 'AddressBlock',
        metadata: { name: 'default-100', labels: { 'coil.cybozu.com/pool': 'default', 'coil.cybozu.com/node': 'coil-worker100' }, finalizers: ['coil.cybozu.com'] },
        index: 100, ipv4: '10.120.12.128/27',
      },
    });
    await eventually(async () => !(await blocksOf()).some((b) => b.metadata.name === 'default-100'), { timeoutMs: 30_000 });
  });

  test('each program runs with least privilege (RBAC checked by impersonation)', async () => {
    assert.equal(await canI(lab.cp, 'coild', 'create', 'blockrequests.coil.cybozu.com'), true);
    assert.equal(await canI(lab.cp, 'coild', 'create', 'addressblocks.coil.cybozu.com'), false, 'only the controller creates blocks');
    assert.equal(await canI(lab.cp, 'coild', 'delete', 'addresspools.coil.cybozu.com'), false);
    assert.equal(await canI(lab.cp, 'coild', 'get', 'secrets'), false);
    assert.equal(await canI(lab.cp, 'coil-controller', 'create', 'addressblocks.coil.cybozu.com'), true);
    assert.equal(await canI(lab.cp, 'coil-controller', 'create', 'pods'), false);
  });

  test('an Egress runs in the lab as a pod netns on a node and shows its state (also when its NAT rules take a while)', async () => {
    // coil-egress answers /healthz before it installs its NAT rules. An iptables that takes half a
    // second per call (as on a loaded machine) makes the lab read the state only once it is
    // settled: before, it read the ruleset too early and missed the FORWARD rule.
    const slow = await mkdtemp(join(tmpdir(), 'coil-slow-iptables-'));
    const real = (await run('sh', ['-c', 'command -v iptables'])).stdout.trim();
    await writeFile(join(slow, 'iptables'), `#!/bin/sh\nsleep 0.5\nexec ${real} "$@"\n`);
    await chmod(join(slow, 'iptables'), 0o755);
    const path = process.env.PATH;
    process.env.PATH = `${slow}:${path}`;
    let started: Awaited<ReturnType<Lab['runEgress']>>;
    try {
      started = await lab.runEgress('internet-egress', 'nat', ['0.0.0.0/0']);
    } finally {
      process.env.PATH = path;
      await rm(slow, { recursive: true, force: true });
    }
    const { pod, readyz, nft } = started;
    assert.equal(pod.ips.length, 1, 'the NAT pod got an address through CNI');
    const egress = JSON.parse(await kubectl(lab.cp.kubeconfigPath, ['get', 'egress', '-n', 'internet-egress', 'nat', '-o', 'json'])) as { status?: { selector?: string } };
    assert.match(egress.status?.selector ?? '', /app\.kubernetes\.io\/instance=nat/);
    // The default backend is iptables (Coil's): Coil's rules in the built-in chains, which the
    // image's iptables-nft keeps in nf_tables, so the ruleset shows them.
    assert.match(nft, /table ip nat \{\s+chain POSTROUTING \{[^}]*masquerade/, 'coil-egress installed its NAT rules in the pod netns');
    assert.match(nft, /table ip filter \{\s+chain FORWARD \{[^}]*ct state invalid[^}]*drop/);
    // This machine's kernel has no FoU: coil-egress must say so instead of pretending.
    assert.match(readyz, /fou/i, `readyz: ${readyz}`);
    await lab.deletePod(pod.name);
  });

  test('(11) deleting all pods frees all blocks', async () => {
    for (const name of [...lab.pods.keys()]) await lab.deletePod(name);
    await eventually(async () => (await blocksOf()).length === 0, { timeoutMs: 60_000, intervalMs: 500 });
    assert.deepEqual(await lab.check({ afterGc: true }), []);
    for (const node of lab.nodes) {
      const { stdout } = await run('ip', ['-n', node.netns, '-4', 'route', 'show', 'table', '119']);
      assert.equal(stdout.trim(), '', `${node.name} table 119 is empty`);
    }
  });

  test('(13) an unused pool is deleted and its finalizer released', async () => {
    await kubectl(lab.cp.kubeconfigPath, ['apply', '-f', '-'], JSON.stringify({
      apiVersion: 'coil.cybozu.com/v2', kind: 'AddressPool', metadata: { name: 'dummy' }, spec: { blockSizeBits: 0, subnets: [{ ipv4: '10.225.0.0/30' }] },
    }));
    await kubectl(lab.cp.kubeconfigPath, ['delete', 'addresspool', 'dummy', '--wait=true', '--timeout=30s']);
    const pools = await kubectl(lab.cp.kubeconfigPath, ['get', 'addresspools', '-o', 'name']);
    assert.equal(pools.trim(), 'addresspool.coil.cybozu.com/default');
  });

  test('lab down leaves no namespace and no process behind', async () => {
    await lab.stop();
    assert.deepEqual(await listLabNetns(), []);
    const { stdout } = await run('pgrep', ['-f', '/tmp/coil-lab/']).catch(() => ({ stdout: '' }));
    assert.equal(stdout.trim(), '', 'no lab process left');
  });
});
