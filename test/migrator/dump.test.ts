/**
 * `coil-migrator dump` as a program, against a real v1 etcd and a real apiserver running the IPAM
 * controller and the AddressPool webhooks (kube-controller-manager too, for the foreground deletion
 * of the v1 objects): exact YAML for the v1 test data set
 * (docs/migration-from-coil-v1.md#the-test-data-set) and a generated one (20 pools, 200 nodes,
 * 5,000 addresses); the output applies through the webhooks; the controller then never hands out a
 * reserved range; the GC acts on reserved blocks of a vanished node; every bad input ends with a
 * clear error.
 */
import 'reflect-metadata';
import assert from 'node:assert/strict';
import { createServer, type AddressInfo, type Socket } from 'node:net';
import { after, before, describe, test } from 'node:test';
import type { AddressBlock } from '../../src/api/v2/addressblock.js';
import { blockRequestResult, isAnswered } from '../../src/api/v2/blockrequest.js';
import { coilCrds } from '../../src/api/v2/crd.js';
import { ANN_POOL, FIN_COIL, LABEL_POOL, LABEL_RESERVED } from '../../src/api/v2/keys.js';
import { addIpam } from '../../src/controller/ipam-registry.js';
import { checkNoOverlap } from '../../src/ipam/invariants.js';
import { V1_OBJECTS } from '../../src/migrator/cluster.js';
import { Kinds } from '../../src/api/v2/kinds.js';
import type { Client } from '../../src/runtime/client.js';
import type { Manager } from '../../src/runtime/manager.js';
import { Registry } from '../../src/runtime/registry.js';
import { ControlPlane, eventually, freePort } from '../envtest/control-plane.js';
import { adminClient, createNode, createPool, createRequest, ipamManager, registerWebhooks } from '../envtest/controller-support.js';
import { kubectl } from '../envtest/tools.js';
import { generateV1Dataset } from './v1-dataset.js';
import { runMigrator, testdata, V1Etcd, type V1Fixture } from './v1-etcd.js';

/** Requests blocks of `pool` one at a time until it answers "out of blocks"; @returns the blocks handed out. */
async function exhaust(client: Client, pool: string): Promise<string[]> {
  const got: string[] = [];
  for (let i = 0; ; i++) {
    const name = `req-${pool}-${i}`;
    await createRequest(client, pool, 'node-a', name);
    const br = await eventually(async () => {
      const r = await client.get(Kinds.BlockRequest, { name });
      return r && isAnswered(r.status) ? r : false;
    }, { timeoutMs: 30_000 });
    const res = blockRequestResult(br.status);
    if (res.kind !== 'allocated') {
      assert.equal(res.kind === 'failed' && res.reason, 'out of blocks');
      return got;
    }
    got.push(res.addressBlockName);
    assert.ok(i < 64, `pool ${pool} never ran out`);
  }
}

/** Asserts no two blocks of `pool` overlap and no new block took a reserved index. */
async function assertNoReservedRangeReused(client: Client, pool: string): Promise<AddressBlock[]> {
  const blocks = await client.list(Kinds.AddressBlock, { labelSelector: `${LABEL_POOL}=${pool}` });
  assert.deepEqual(checkNoOverlap(blocks.map((b) => ({ label: b.metadata!.name!, cidr: b.ipv4! }))), [], `pool ${pool}`);
  const indices = blocks.map((b) => b.index);
  assert.equal(new Set(indices).size, indices.length, `pool ${pool}: an index is used twice`);
  return blocks;
}

const v1Object = (o: (typeof V1_OBJECTS)[number]) => ({ name: o.name, ...(o.namespace && { namespace: o.namespace }) });

describe('coil-migrator dump against a real etcd and apiserver', () => {
  let cp: ControlPlane;
  let mgr: Manager;
  let client: Client;
  let etcd: V1Etcd;
  let expected: string;
  const big = generateV1Dataset('/big/');
  const dump = (...args: string[]) => runMigrator(['dump', `--etcd-endpoints=${etcd.endpoint}`, `--kubeconfig=${cp.kubeconfigPath}`, ...args]);

  before(async () => {
    cp = await ControlPlane.start({ crds: coilCrds(), controllerManager: true });
    client = adminClient(cp);
    mgr = await ipamManager(cp, { webhooks: true, addressPool: true, blockRequest: true, gc: true });
    await mgr.start();
    await registerWebhooks(cp, addIpam(new Registry(), { addressPool: false, blockRequest: false, gc: false }), mgr.ports.webhook!, 'coilv2-ipam');
    // The apiserver loads webhook configurations asynchronously: wait until the mutator acts.
    let probe = 0;
    await eventually(async () => {
      const name = `probe-${++probe}`;
      const p = await createPool(client, name, { subnets: [{ ipv4: `192.168.${probe}.0/24` }] });
      await client.removeFinalizer(Kinds.AddressPool, p, FIN_COIL);
      await client.delete(Kinds.AddressPool, { name });
      return p.metadata?.finalizers?.includes(FIN_COIL) === true;
    });
    etcd = await V1Etcd.start();
    const fixture = JSON.parse(await testdata('v1-example.json')) as V1Fixture;
    expected = await testdata('v1-example.expected.yaml');
    await etcd.put(fixture.entries);
    await etcd.put(big.entries);
    const pool = (subnets: string[]) => JSON.stringify({ subnets, block_size: 5 });
    await etcd.put([
      ['/bad-name/pool/foo_bar', pool(['10.9.0.0/24'])],
      ['/bad-v6/pool/v6', pool(['fd00::/112'])],
      ['/gone/pool/default', pool(['10.8.0.0/26'])],
      ['/gone/block/default/10.8.0.0', JSON.stringify({ free: ['10.8.0.32/27'], nodes: { ghost: ['10.8.0.0/27'] } })],
      ['/malformed/pool/default', '{"subnets":["10.7.0.0/24"],"block_size":'],
      ['/malformed/pool/ok', pool(['10.6.0.0/24'])],
      ['/malformed/block/ok/10.6.0.0', '{"free":7,"nodes":{}}'],
      ['/malformed/ip/10.6.0.0/0', '\u0000\u0001binary'],
      ['/late/pool/late', pool(['10.5.0.0/25'])],
      ['/late/block/late/10.5.0.0', JSON.stringify({ free: ['10.5.0.32/27', '10.5.0.96/27'], nodes: { 'node-b': ['10.5.0.64/27', '10.5.0.0/27'] } })],
    ]);
    for (const n of [...fixture.nodes, ...big.nodes]) await createNode(client, n);
    for (const ns of ['team-a', 'internet-egress']) await client.create(Kinds.Namespace, { metadata: { name: ns } });
    // The v1 objects (docs/migration-from-coil-v1.md#v1s-kubernetes-objects), as the v1 manifests
    // made them (minimal specs).
    const labels = { 'app.kubernetes.io/name': 'coil-v1' };
    const template = { metadata: { labels }, spec: { containers: [{ name: 'c', image: 'v1.invalid/coil' }] } };
    for (const o of V1_OBJECTS) {
      const body: Record<string, unknown> = { metadata: v1Object(o) };
      if (o.kind.kind === 'DaemonSet' || o.kind.kind === 'Deployment') body.spec = { selector: { matchLabels: labels }, template };
      if (o.kind.kind === 'ClusterRoleBinding') body.roleRef = { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: o.name };
      await client.create(o.kind, body);
    }
  });
  after(async () => {
    await mgr?.stop();
    await etcd?.stop();
    await cp?.stop();
  });

  test('dump --dry-run prints exactly the manifests of the test data set and changes nothing in the cluster', async () => {
    const r = await dump('--dry-run');
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, expected);
    assert.match(r.stderr, /read 2 pools, 3 block keys, 7 addresses \(1 in the legacy ns\/pod format\)/);
    for (const o of V1_OBJECTS) assert.ok(await client.get(o.kind, v1Object(o)), `${o.kind.kind} ${o.name} was removed`);
    assert.equal((await client.get(Kinds.Namespace, { name: 'internet-egress' }))?.metadata?.annotations?.[ANN_POOL], undefined);
  });

  test('dump removes the v1 objects, annotates only namespaces named after non-default pools, prints the same manifests', async () => {
    const r = await dump();
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, expected);
    for (const o of V1_OBJECTS) assert.equal(await client.get(o.kind, v1Object(o)), undefined, `${o.kind.kind} ${o.name} is still there`);
    assert.match(r.stderr, /deleted DaemonSet kube-system\/coil-node/);
    assert.equal((await client.get(Kinds.Namespace, { name: 'internet-egress' }))?.metadata?.annotations?.[ANN_POOL], 'internet-egress');
    assert.equal((await client.get(Kinds.Namespace, { name: 'team-a' }))?.metadata?.annotations?.[ANN_POOL], undefined);
    assert.equal((await client.get(Kinds.Namespace, { name: 'default' }))?.metadata?.annotations?.[ANN_POOL], undefined);
    const again = await dump();
    assert.equal(again.code, 0, again.stderr);
    assert.equal(again.stdout, expected, 'a second run (v1 already gone) gives the same output');
  });

  test('the manifests of the test data set apply through the webhooks; the controller then hands out only unreserved blocks', async () => {
    await kubectl(cp.kubeconfigPath, ['apply', '-f', '-'], expected);
    const reserved = await client.list(Kinds.AddressBlock, { labelSelector: `${LABEL_RESERVED}=true` });
    assert.deepEqual(reserved.map((b) => b.metadata!.name).sort(), ['default-0-v1', 'default-1-v1', 'default-2-v1', 'default-4-v1', 'internet-egress-0-v1', 'internet-egress-1-v1']);
    // docs/migration-from-coil-v1.md#the-test-data-set: next for default are index 3
    // (10.64.0.96/27) and 5; for internet-egress 2 … 15.
    assert.deepEqual(await exhaust(client, 'default'), ['default-3', 'default-5']);
    assert.equal((await client.get(Kinds.AddressBlock, { name: 'default-3' }))?.ipv4, '10.64.0.96/27');
    assert.deepEqual(await exhaust(client, 'internet-egress'), Array.from({ length: 14 }, (_, i) => `internet-egress-${i + 2}`));
    assert.equal((await client.get(Kinds.AddressBlock, { name: 'internet-egress-2' }))?.ipv4, '172.19.0.2/32');
    await assertNoReservedRangeReused(client, 'default');
    await assertNoReservedRangeReused(client, 'internet-egress');
  });

  test('the generated dataset (20 pools, 200 nodes, 5,000 addresses) dumps exactly, applies, and no reserved range is handed out', async () => {
    const r = await dump('--dry-run', '--etcd-prefix=/big/');
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, big.expectedYaml);
    assert.match(r.stderr, /read 20 pools, 40 block keys, 5000 addresses \(100 in the legacy ns\/pod format\)/);
    assert.equal(r.stderr.match(/no longer exists; block skipped/g)?.length ?? 0, big.goneBlocks);
    assert.ok(big.goneBlocks > 0 && big.reservedBlocks > 200);
    await kubectl(cp.kubeconfigPath, ['apply', '--server-side', '-f', '-'], r.stdout);
    for (const pool of big.poolNames) {
      const reserved = (await assertNoReservedRangeReused(client, pool)).length;
      const got = await exhaust(client, pool);
      assert.equal(got.length, big.blocksPerPool - reserved, `pool ${pool}`);
      assert.ok(got.every((n) => !n.endsWith('-v1')));
      await assertNoReservedRangeReused(client, pool);
    }
  });

  test('applied over a pool the running controller already synced, the reserved blocks are still never handed out', async () => {
    await createPool(client, 'late', { subnets: [{ ipv4: '10.5.0.0/25' }] });
    await eventually(async () => (await client.get(Kinds.AddressPool, { name: 'late' }))?.status?.maxBlocks === '4');
    const r = await dump('--dry-run', '--etcd-prefix=/late/');
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /coil.cybozu.com\/v1-reserved-blocks: "0,2"/);
    await kubectl(cp.kubeconfigPath, ['apply', '-f', '-'], r.stdout);
    assert.deepEqual(await exhaust(client, 'late'), ['late-1', 'late-3']);
    await assertNoReservedRangeReused(client, 'late');
  });

  test('replace asks first and changes nothing unless the answer is yes', async () => {
    const before = (await client.list(Kinds.AddressBlock, { labelSelector: `${LABEL_RESERVED}=true` })).length;
    const r = await runMigrator(['replace', `--kubeconfig=${cp.kubeconfigPath}`], { input: 'n\n' });
    assert.equal(r.code, 3, r.stderr);
    assert.match(r.stderr, /DO YOU WANT TO PROCEED\? \[y\/N\] /);
    assert.match(r.stderr, /aborted/);
    assert.equal((await client.list(Kinds.AddressBlock, { labelSelector: `${LABEL_RESERVED}=true` })).length, before);
  });

  test('reserved blocks carry the finalizer the controller GC needs: the blocks of a deleted node are released', async () => {
    await client.delete(Kinds.Node, { name: 'node-c' });
    await eventually(async () => !(await client.get(Kinds.AddressBlock, { name: 'default-4-v1' })) && !(await client.get(Kinds.AddressBlock, { name: 'internet-egress-1-v1' })), { timeoutMs: 30_000 });
    assert.ok(await client.get(Kinds.AddressBlock, { name: 'default-0-v1' }));
  });

  test('dump reads an etcd that requires TLS client certificates (--etcd-tls-ca/-cert/-key)', async () => {
    const secure = await V1Etcd.start({ tls: true });
    try {
      const fixture = JSON.parse(await testdata('v1-example.json')) as V1Fixture;
      await secure.put(fixture.entries);
      const base = ['dump', '--dry-run', `--etcd-endpoints=${secure.endpoint}`, '--etcd-timeout=3s', `--kubeconfig=${cp.kubeconfigPath}`];
      const r = await runMigrator([...base, `--etcd-tls-ca=${secure.tls!.caFile}`, `--etcd-tls-cert=${secure.tls!.certFile}`, `--etcd-tls-key=${secure.tls!.keyFile}`]);
      assert.equal(r.code, 0, r.stderr);
      // node-c is gone by now (the GC test), so only its blocks are missing from the test data
      // set's output.
      assert.equal(r.stdout, (await dump('--dry-run')).stdout);
      const noCert = await runMigrator([...base, `--etcd-tls-ca=${secure.tls!.caFile}`]);
      assert.equal(noCert.code, 1);
      assert.match(noCert.stderr, new RegExp(`cannot read etcd at ${secure.endpoint}`));
      const missing = await runMigrator([...base, '--etcd-tls-ca=/nonexistent/ca.pem']);
      assert.equal(missing.code, 1);
      assert.match(missing.stderr, /--etcd-tls-ca: cannot read \/nonexistent\/ca.pem/);
    } finally {
      await secure.stop();
    }
  });

  test('an etcd that refuses connections is an error naming the endpoint', async () => {
    const port = await freePort();
    const r = await runMigrator(['dump', `--etcd-endpoints=http://127.0.0.1:${port}`, '--etcd-timeout=1s', `--kubeconfig=${cp.kubeconfigPath}`, '--dry-run']);
    assert.equal(r.code, 1);
    assert.match(r.stderr, new RegExp(`dump failed: cannot read etcd at http://127.0.0.1:${port}: .*ECONNREFUSED`));
    assert.equal(r.stdout, '');
  });

  test('an etcd that accepts but never answers fails after --etcd-timeout, naming the endpoint', async () => {
    // A TCP server that takes the connection and says nothing: the gRPC handshake never completes.
    const sockets: Socket[] = [];
    const silent = createServer((s) => void sockets.push(s));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const port = (silent.address() as AddressInfo).port;
    try {
      const r = await runMigrator(['dump', `--etcd-endpoints=http://127.0.0.1:${port}`, '--etcd-timeout=1s', `--kubeconfig=${cp.kubeconfigPath}`, '--dry-run']);
      assert.equal(r.code, 1);
      assert.match(r.stderr, new RegExp(`cannot read etcd at http://127.0.0.1:${port} within --etcd-timeout=1000ms`));
      assert.ok(r.ms >= 1_000 && r.ms < 8_000, `took ${r.ms} ms`);
      assert.equal(r.stdout, '');
    } finally {
      for (const s of sockets) s.destroy();
      silent.close();
    }
  });

  test('a pool name that is not a Kubernetes name is an error naming the pool', async () => {
    const r = await dump('--dry-run', '--etcd-prefix=/bad-name/');
    assert.equal(r.code, 1);
    assert.match(r.stderr, /error: pool\/foo_bar: pool name "foo_bar" is not a valid Kubernetes name/);
    assert.equal(r.stdout, '');
  });

  test('a subnet that is not IPv4 is an error naming it', async () => {
    const r = await dump('--dry-run', '--etcd-prefix=/bad-v6/');
    assert.equal(r.code, 1);
    assert.match(r.stderr, /error: pool\/v6: subnet "fd00::\/112" is not an IPv4 CIDR/);
    assert.equal(r.stdout, '');
  });

  test('blocks of nodes that no longer exist are reported on stderr and skipped', async () => {
    const r = await dump('--dry-run', '--etcd-prefix=/gone/');
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stderr, /warning: block\/default\/10.8.0.0 nodes\[ghost\] 10.8.0.0\/27: node ghost no longer exists/);
    assert.doesNotMatch(r.stdout, /kind: AddressBlock/);
    assert.match(r.stdout, /name: default/);
  });

  test('malformed values are reported with their key, without a crash', async () => {
    const r = await dump('--dry-run', '--etcd-prefix=/malformed/');
    assert.equal(r.code, 1);
    assert.match(r.stderr, /error: pool\/default: malformed value: not JSON/);
    assert.match(r.stderr, /error: block\/ok\/10.6.0.0: malformed block value: "free"/);
    assert.match(r.stderr, /warning: ip\/10.6.0.0\/0: malformed ip value/);
    assert.doesNotMatch(r.stderr, /^\s+at /m);
    assert.equal(r.stdout, '');
  });

  test('a bad command line exits 2 with the usage', async () => {
    const r = await runMigrator(['dump', '--etcd-timeout=soon']);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /--etcd-timeout: invalid duration "soon"/);
    assert.match(r.stderr, /Usage:/);
  });
});
