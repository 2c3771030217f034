/**
 * `kubectl coil ipam show|check|release` end to end: the built `kubectl-coil` run as a process
 * against a real kube-apiserver, with faults seeded in the API — a block of a deleted Node,
 * duplicate Pod IPs, a stale BlockRequest, a leaked allocation on a node — and the release rules:
 * a report of another cluster refused, a report made before a change refused for the changed
 * object, only what every report names acted on.
 *
 * coild itself cannot run here (it wires pods on a real node), so a stand-in plays coild's health
 * port and its leak release: coild's own IntrospectionServer (GET /ipam over HTTPS, authenticated
 * by TokenReview and SubjectAccessReview at this apiserver), LeakReleaser and LeakReleaseRequests
 * over a NodeIpam fed by a fake cache and a FakePodNetwork, reading Pods and the release requests
 * annotated on n1's AddressBlocks from this apiserver. The tool reaches /ipam as it reaches a real
 * coild's: through the apiserver's `pods/proxy` of a coild Pod whose status.podIP is the
 * stand-in's address, with a token of the ServiceAccount coil-ipam-reader. The apiserver refuses to proxy to a loopback address,
 * so the stand-in listens on an address of the RFC 2544 benchmarking range added to `lo` (needs
 * root; removed after).
 */
import 'reflect-metadata';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { parse } from 'yaml';
import { coilCrds } from '../../src/api/v2/crd.js';
import { FIN_COIL, LABEL_NODE, LABEL_POOL } from '../../src/api/v2/keys.js';
import { Kinds } from '../../src/api/v2/kinds.js';
import type { IpamReport } from '../../src/kubectl-coil/report.js';
import { KUBECTL_COIL_VERSION } from '../../src/kubectl-coil/version.js';
import { BlockRequester } from '../../src/node-agent/ipam/block-request.js';
import { IntrospectionServer, ipamSnapshot } from '../../src/node-agent/ipam/introspection.js';
import { LeakReleaser } from '../../src/node-agent/ipam/leak-release.js';
import { NodeIpam } from '../../src/node-agent/ipam/node-ipam.js';
import { KeyedMutex } from '../../src/node-agent/podnet/keyed-mutex.js';
import type { Client } from '../../src/runtime/client.js';
import { ApiTransport } from '../../src/runtime/api-transport.js';
import { Cache } from '../../src/runtime/cache.js';
import { RequestAuthorizer } from '../../src/runtime/http-auth.js';
import { selfSignedCert } from '../../src/runtime/self-signed-cert.js';
import { IPAM_READER_SERVICE_ACCOUNT } from '../../src/kubectl-coil/cluster.js';
import { LeakReleaseRequests } from '../../src/node-agent/ipam/leak-release-requests.js';
import { silentLogger } from '../../src/runtime/logging.js';
import { FakeBlockClient, FakeCoildCache, fakeBlock } from '../fakes/coild-cache.fake.js';
import { FakePodNetwork } from '../fakes/pod-network.fake.js';
import { prerequisite } from '../support/prerequisite.js';
import { ControlPlane, REPO_ROOT } from './control-plane.js';
import { adminClient, createNode, createPool } from './controller-support.js';

const run = promisify(execFile);
const TOOL = fileURLToPath(new URL('../../src/kubectl-coil/main.js', import.meta.url));
const NODE = process.execPath;
const NS = 'kube-system';
const COILD_LABELS = { 'app.kubernetes.io/name': 'coil', 'app.kubernetes.io/instance': 'coil', 'app.kubernetes.io/component': 'coild' };
const skip = prerequisite(process.getuid?.() === 0 ? undefined : 'needs root: the coild stand-in listens on an address added to lo');

/**
 * The stand-in of coild on node n1: coild's health server (HTTPS, authenticated as coild's) and its
 * leak release requests over a NodeIpam on fakes; the requests are read from this apiserver's
 * AddressBlocks of n1 by a real informer cache, as coild's.
 */
class CoildStandIn {
  readonly cache = new FakeCoildCache();
  readonly podNetwork = new FakePodNetwork();
  readonly ipam: NodeIpam;
  private readonly server: IntrospectionServer;
  private readonly blocks: Cache;
  private readonly requests: LeakReleaseRequests;

  constructor(client: Client, transport: ApiTransport) {
    const logger = silentLogger();
    const requester = new BlockRequester({ cache: this.cache.asCache(), client: new FakeBlockClient().asClient(), nodeName: 'n1', logger });
    this.ipam = new NodeIpam({ cache: this.cache.asCache(), requester, logger, coolingMs: 0, lowWaterMark: 0 });
    const releaser = new LeakReleaser({ ipam: this.ipam, podNetwork: this.podNetwork, locks: new KeyedMutex(), client, nodeName: 'n1', logger });
    this.blocks = new Cache(transport, logger);
    this.blocks.ensure(Kinds.AddressBlock, { labelSelector: `${LABEL_NODE}=n1` });
    this.requests = new LeakReleaseRequests({ cache: this.blocks, client, releaser, nodeName: 'n1', logger, ready: () => true });
    this.server = new IntrospectionServer({
      health: () => undefined, ready: () => undefined, snapshot: () => ipamSnapshot(this.ipam, 'n1', [], Date.now()),
      security: { mode: 'secure', authorizer: new RequestAuthorizer({ client }), tls: selfSignedCert(['coild-n1']) },
    });
  }

  /** Wires an attachment as coild's ADD would (allocation + veth). @returns its IPv4 address */
  async wire(containerId: string, pod?: { namespace: string; name: string }): Promise<string> {
    const a = await this.ipam.allocate({ pool: 'default', containerId, ifname: 'eth0', ...(pod && { podNamespace: pod.namespace, podName: pod.name }) });
    await this.podNetwork.setup(`/run/netns/${containerId}`, { containerId, ifname: 'eth0', pool: 'default', ipv4: a.ipv4!, hostIPv4: '10.250.0.1' });
    return a.ipv4!;
  }

  start(host: string): Promise<number> {
    this.ipam.start();
    this.requests.start();
    this.blocks.start();
    return this.server.listen({ host, port: 0 });
  }

  async close(): Promise<void> {
    this.requests.stop();
    await this.blocks.stop();
    await this.server.close();
  }
}

describe('kubectl coil ipam (envtest, coild on n1 played by a stand-in)', { skip }, () => {
  let cp: ControlPlane;
  let client: Client;
  let coild: CoildStandIn;
  let port = 0;
  let dir = '';
  const address = `198.18.${1 + Math.floor(Math.random() * 250)}.${1 + Math.floor(Math.random() * 250)}`;

  /** Runs the tool (as `as`, a kubeconfig file; the admin by default). @returns exit status, stdout and stderr */
  const toolAs = async (as: string, ...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> => {
    try {
      const r = await run(NODE, [TOOL, ...args, `--kubeconfig=${as}`, ...(args[1] === 'check' || args[1] === 'show' ? [`--coild-port=${port}`] : [])], { env: { ...process.env, KUBECONFIG: '' } });
      return { code: 0, stdout: r.stdout, stderr: r.stderr };
    } catch (e) {
      const x = e as { code: number; stdout: string; stderr: string };
      return { code: x.code, stdout: x.stdout, stderr: x.stderr };
    }
  };
  const tool = (...args: string[]) => toolAs(cp.kubeconfigPath, ...args);
  /**
   * A kubeconfig of user `name` (a client certificate of the test CA) bound to the chart's
   * ClusterRole `role` only, its rules taken from the chart's generated files/rbac.yaml.
   */
  const userBoundTo = async (name: string, role: 'view' | 'admin' | undefined): Promise<string> => {
    const rbac = parse(await readFile(join(REPO_ROOT, 'charts/coil/files/rbac.yaml'), 'utf8')) as { kubectlCoil: Record<string, object[]> };
    if (role) {
      const roleName = `coil-ipam-${role}`;
      if (!(await client.get(Kinds.ClusterRole, { name: roleName }))) await client.create(Kinds.ClusterRole, { metadata: { name: roleName }, rules: rbac.kubectlCoil[role] as never });
      await client.create(Kinds.ClusterRoleBinding, { metadata: { name: `${name}-${roleName}` }, roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: roleName }, subjects: [{ kind: 'User', name, apiGroup: 'rbac.authorization.k8s.io' }] });
    }
    const pair = await cp.ca.issue(name, `/CN=${name}`, 'client');
    const b64 = (x: string) => Buffer.from(x).toString('base64');
    const file = join(dir, `${name}.kubeconfig`);
    await writeFile(file, JSON.stringify({
      apiVersion: 'v1', kind: 'Config', 'current-context': 'c',
      clusters: [{ name: 'c', cluster: { server: cp.server, 'certificate-authority-data': b64(cp.ca.caPem) } }],
      users: [{ name, user: { 'client-certificate-data': b64(pair.certPem), 'client-key-data': b64(pair.keyPem) } }],
      contexts: [{ name: 'c', context: { cluster: 'c', user: name } }],
    }), { mode: 0o600 });
    return file;
  };
  const check = async (name: string, ...flags: string[]): Promise<{ code: number; report: IpamReport; file: string }> => {
    const r = await tool('ipam', 'check', '-o', 'json', ...flags);
    const file = join(dir, `${name}.json`);
    await writeFile(file, r.stdout);
    return { code: r.code, report: JSON.parse(r.stdout) as IpamReport, file };
  };
  const pod = async (name: string, node: string, ip: string, namespace = 'demo'): Promise<void> => {
    await client.create(Kinds.Pod, { metadata: { name, namespace }, spec: { nodeName: node, containers: [{ name: 'c', image: 'pause' }], automountServiceAccountToken: false } });
    await client.patchStatus(Kinds.Pod, { namespace, name }, { phase: 'Running', podIP: ip, podIPs: [{ ip }] });
  };
  const block = (index: number, node: string) =>
    client.create(Kinds.AddressBlock, { metadata: { name: `default-${index}`, labels: { [LABEL_POOL]: 'default', [LABEL_NODE]: node }, finalizers: [FIN_COIL] }, index, ipv4: `10.100.0.${index * 32}/27` });
  const blockExists = async (name: string): Promise<boolean> => (await client.get(Kinds.AddressBlock, { name })) !== undefined;

  before(async () => {
    await run('ip', ['addr', 'add', `${address}/32`, 'dev', 'lo']);
    dir = await mkdtemp(join(tmpdir(), 'kubectl-coil-'));
    cp = await ControlPlane.start({ crds: coilCrds() });
    client = adminClient(cp);
    coild = new CoildStandIn(client, new ApiTransport(cp.kubeConfig));
    port = await coild.start(address);
    for (const ns of ['demo', 'other']) await client.create(Kinds.Namespace, { metadata: { name: ns } });
    for (const ns of [NS, 'demo', 'other']) await cp.request('POST', `/api/v1/namespaces/${ns}/serviceaccounts`, { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'default' } });
    // The chart's reader of coild's /ipam (charts/coil/templates/rbac.yaml), whose tokens the tool asks for.
    await cp.request('POST', `/api/v1/namespaces/${NS}/serviceaccounts`, { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: IPAM_READER_SERVICE_ACCOUNT } });
    await client.create(Kinds.ClusterRole, { metadata: { name: IPAM_READER_SERVICE_ACCOUNT }, rules: [{ nonResourceURLs: ['/ipam'], verbs: ['get'] }] });
    await client.create(Kinds.ClusterRoleBinding, { metadata: { name: IPAM_READER_SERVICE_ACCOUNT }, roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: IPAM_READER_SERVICE_ACCOUNT }, subjects: [{ kind: 'ServiceAccount', name: IPAM_READER_SERVICE_ACCOUNT, namespace: NS }] });
    await createPool(client, 'default', { subnets: [{ ipv4: '10.100.0.0/24' }] });
    for (const n of ['n1', 'n2', 'gone']) await createNode(client, n);
    await block(0, 'n1');
    await block(1, 'n2');
    await block(2, 'gone');
    coild.cache.emit(Kinds.AddressBlock, 'ADDED', fakeBlock('default', 0, '10.100.0.0/27'));
    // coild's Pod on n1; n2 has none (its coild view is then reported unreadable, not a finding).
    await client.create(Kinds.Pod, { metadata: { name: 'coild-n1', namespace: NS, labels: COILD_LABELS }, spec: { nodeName: 'n1', hostNetwork: true, containers: [{ name: 'coild', image: 'coil' }], automountServiceAccountToken: false } });
    await client.patchStatus(Kinds.Pod, { namespace: NS, name: 'coild-n1' }, { phase: 'Running', podIP: address, podIPs: [{ ip: address }] });
    await pod('web-1', 'n1', await coild.wire('c-web-1', { namespace: 'demo', name: 'web-1' }));
    await pod('web-2', 'n2', '10.100.0.33');
  });
  after(async () => {
    await coild?.close();
    await cp?.stop();
    await run('ip', ['addr', 'del', `${address}/32`, 'dev', 'lo']).catch(() => undefined);
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  test('a healthy cluster: check finds nothing (exit 0) and says whose coild it could not read; show prints pools, blocks and an address\'s owner', async () => {
    const r = await tool('ipam', 'check');
    assert.equal(r.code, 0, r.stdout + r.stderr);
    assert.match(r.stdout, /no findings \(1 node\(s\) checked through coild\)/);
    assert.match(r.stdout, /warning: coild of node n2 not read/);
    const show = await tool('ipam', 'show');
    assert.equal(show.code, 0, show.stderr);
    assert.match(show.stdout, /^POOL\s+SIZE\s+BLOCKS\s+MAX-BLOCKS\s+BLOCKS-%\s+USED\s+FREE\n/);
    assert.match(show.stdout, /\ndefault\s+256\s+3\s+8\s+37\.5\s+2\s+254\n/);
    const blocks = await tool('ipam', 'show', '--show-blocks');
    assert.match(blocks.stdout, /default-0\s+default\s+n1\s+10\.100\.0\.0\/27\s+1\s+31\s+0\s+ok/);
    assert.match(blocks.stdout, /default-1\s+default\s+n2\s+10\.100\.0\.32\/27\s+\?\s+\?\s+\?\s+coild not read/);
    const ip = await tool('ipam', 'show', '--ip', '10.100.0.33', '-o', 'json');
    assert.deepEqual(JSON.parse(ip.stdout), { address: '10.100.0.33', block: 'default-1', pool: 'default', node: 'n2', pods: ['demo/web-2'] });
    const web1 = (await client.get(Kinds.Pod, { namespace: 'demo', name: 'web-1' }))!.status!.podIP!;
    const own = JSON.parse((await tool('ipam', 'show', '--ip', web1, '-o', 'json')).stdout) as { pods: string[]; allocation?: { containerId: string; pod?: string } };
    assert.deepEqual([own.pods, own.allocation], [['demo/web-1'], { containerId: 'c-web-1', ifname: 'eth0', pod: 'demo/web-1' }], "coild's allocation, from the coild of the block's node");
    assert.equal((await tool('ipam', 'show', '--ip', 'nope')).code, 2);
    const yaml = parse((await tool('ipam', 'show', '-o', 'yaml')).stdout) as { pools: { pool: string; used: number; maxBlocks: string }[] };
    assert.deepEqual([yaml.pools[0]!.pool, yaml.pools[0]!.used, yaml.pools[0]!.maxBlocks], ['default', 2, '8']);
  });

  test('the standard flags work: --context picks a kubeconfig context (an unknown one is refused), -n names coil\'s namespace', async () => {
    const ctx = cp.kubeConfig.getCurrentContext();
    assert.equal((await tool('ipam', 'check', '--context', ctx)).code, 0);
    const bad = await tool('ipam', 'check', '--context', 'nope');
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /--context: no context "nope" in the kubeconfig/);
    const elsewhere = await tool('ipam', 'check', '-n', 'other');
    assert.match(elsewhere.stdout, /no findings \(0 node\(s\) checked through coild\)/);
    assert.match(elsewhere.stdout, /warning: coild of node n1 not read .*in namespace other/);
  });

  test('seeded faults are each found with UIDs and resourceVersions; the report names the cluster and the version; exit 3', async () => {
    await client.delete(Kinds.Node, { name: 'gone' });
    await pod('dup', 'n2', '10.100.0.33', 'other');
    await client.create(Kinds.BlockRequest, { metadata: { name: 'req-default-n2' }, spec: { poolName: 'default', nodeName: 'n2' } });
    const leaked = await coild.wire('c-leak', { namespace: 'demo', name: 'deleted-pod' });
    // Not a leak: coild has wired the sandbox of a Pod whose podIPs the kubelet has not written yet.
    await coild.wire('c-starting', { namespace: 'demo', name: 'starting' });
    await client.create(Kinds.Pod, { metadata: { name: 'starting', namespace: 'demo' }, spec: { nodeName: 'n1', containers: [{ name: 'c', image: 'pause' }], automountServiceAccountToken: false } });
    await new Promise((r) => setTimeout(r, 1_100)); // the BlockRequest's creationTimestamp has second precision
    const { code, report } = await check('seeded', '--blockrequest-wait=1s');
    assert.equal(code, 3);
    const kubeSystem = await client.get(Kinds.Namespace, { name: NS });
    assert.equal(report.cluster.uid, kubeSystem!.metadata!.uid);
    assert.equal(report.version, KUBECTL_COIL_VERSION);
    assert.deepEqual(report.nodesChecked, ['n1']);
    assert.deepEqual(report.findings.map((f) => f.key), [
      'orphan-block/default-2', 'duplicate-pod-ip/10.100.0.33', 'leaked-address/n1/c-leak/eth0', 'stale-blockrequest/req-default-n2',
    ]);
    const orphan = report.findings[0]!;
    const b = (await client.get(Kinds.AddressBlock, { name: 'default-2' }))!;
    assert.deepEqual(orphan.objects, [{ kind: 'AddressBlock', name: 'default-2', uid: b.metadata!.uid, resourceVersion: b.metadata!.resourceVersion }]);
    assert.deepEqual(report.findings[1]!.objects.map((o) => `${o.namespace}/${o.name}`).sort(), ['demo/web-2', 'other/dup']);
    assert.deepEqual(report.findings[2]!.addresses, [leaked]);
    const table = await tool('ipam', 'check', '--blockrequest-wait=1s');
    assert.equal(table.code, 3);
    const wide = await tool('ipam', 'check', '--blockrequest-wait=1s', '-o', 'wide');
    assert.match(wide.stdout, new RegExp(`AddressBlock/default-2\\(uid=${b.metadata!.uid},rv=${b.metadata!.resourceVersion}\\)`));
    assert.match(table.stdout, /orphan-block\s+gone\s+AddressBlock default-2 \(10\.100\.0\.64\/27\) belongs to Node gone, which does not exist/);
  });

  test('release refuses a report of another cluster and does nothing', async () => {
    const { file } = await check('mine', '--blockrequest-wait=1s');
    const foreign = JSON.parse(await readFile(file, 'utf8')) as IpamReport;
    const other = join(dir, 'foreign.json');
    await writeFile(other, JSON.stringify({ ...foreign, cluster: { ...foreign.cluster, uid: '00000000-0000-0000-0000-000000000000' } }));
    const r = await tool('ipam', 'release', '--from-report', file, '--from-report', other);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /foreign\.json: the report is of another cluster .* nothing was done/);
    assert.ok(await blockExists('default-2'));
    assert.ok(coild.ipam.lookup('c-leak', 'eth0'));
  });

  test('--dry-run prints what release would do and changes nothing', async () => {
    const { file } = await check('dry', '--blockrequest-wait=1s');
    const r = await tool('ipam', 'release', '--from-report', file, '--dry-run');
    assert.equal(r.code, 0, r.stdout + r.stderr);
    assert.match(r.stdout, /would\s+orphan-block\s+would delete AddressBlock default-2/);
    assert.match(r.stdout, /would\s+leaked-address\s+would ask coild on n1 to release 10\.100\.0\.\d+ \(container c-leak.*annotating AddressBlock default-0/);
    assert.match(r.stdout, /report-only duplicate-pod-ip\s+delete all but one of the Pods/);
    assert.ok(await blockExists('default-2'));
    assert.ok(coild.ipam.lookup('c-leak', 'eth0'));
  });

  test('a report made before a change is refused for the changed object, and only what every report names is acted on', async () => {
    const before = await check('before', '--blockrequest-wait=1s');
    // The orphan block changes after the first report (someone labels it): its resourceVersion moves.
    await client.mergePatch(Kinds.AddressBlock, { name: 'default-2' }, { metadata: { labels: { touched: 'yes' } } });
    const r = await tool('ipam', 'release', '--from-report', before.file, '--dry-run');
    assert.equal(r.code, 3, r.stdout + r.stderr);
    assert.match(r.stdout, /skipped\s+orphan-block\s+AddressBlock default-2 changed since the report/);
    // A second report taken after the change names the block at another resourceVersion: the two agree on nothing about it.
    const later = await check('later', '--blockrequest-wait=1s');
    const both = await tool('ipam', 'release', '--from-report', before.file, '--from-report', later.file, '--dry-run');
    assert.doesNotMatch(both.stdout, /orphan-block/);
    assert.match(both.stdout, /would\s+leaked-address/);
    assert.ok(await blockExists('default-2'));
  });

  test("the chart's coil-ipam-view is enough for show, check and a dry run, and not for release", async () => {
    const viewer = await userBoundTo('viewer', 'view');
    const c = await toolAs(viewer, 'ipam', 'check', '-o', 'json', '--blockrequest-wait=1s');
    assert.equal(c.code, 3, c.stderr);
    const report = JSON.parse(c.stdout) as IpamReport;
    assert.deepEqual(report.nodesChecked, ['n1'], 'coild read through pods/proxy');
    assert.ok(report.findings.some((f) => f.kind === 'orphan-block') && report.findings.some((f) => f.kind === 'leaked-address'));
    assert.equal((await toolAs(viewer, 'ipam', 'show', '--show-blocks')).code, 0);
    const file = join(dir, 'viewer.json');
    await writeFile(file, c.stdout);
    assert.equal((await toolAs(viewer, 'ipam', 'release', '--from-report', file, '--dry-run')).code, 0);
    const r = await toolAs(viewer, 'ipam', 'release', '--from-report', file);
    assert.equal(r.code, 3);
    assert.match(r.stdout, /failed\s+orphan-block\s+403 /);
    assert.match(r.stdout, /failed\s+leaked-address\s+403 /);
    assert.ok(await blockExists('default-2'));
    assert.ok(coild.ipam.lookup('c-leak', 'eth0'));
  });

  test('a user holding neither role gets one line saying what is forbidden, for each command', async () => {
    const nobody = await userBoundTo('nobody', undefined);
    const file = (await check('for-nobody', '--blockrequest-wait=1s')).file;
    for (const args of [['ipam', 'show'], ['ipam', 'check'], ['ipam', 'release', '--from-report', file]]) {
      const r = await toolAs(nobody, ...args);
      assert.equal(r.code, 1, `${args.join(' ')}: ${r.stdout}${r.stderr}`);
      assert.equal(r.stdout, '');
      const lines = r.stderr.trimEnd().split('\n');
      assert.equal(lines.length, 1, r.stderr);
      assert.match(lines[0]!, /^kubectl coil: .*forbidden: User "nobody" cannot (list|get)/);
    }
  });

  test("coild's /ipam through the API server's pod proxy without coil's token: 401, and no review at the apiserver", async () => {
    const reviews = async (): Promise<number> => (await cp.request('GET', '/metrics')).body.split('\n')
      .filter((l) => l.startsWith('apiserver_request_total{') && /resource="(tokenreviews|subjectaccessreviews)"/.test(l)).reduce((n, l) => n + Number(l.split(' ').pop()), 0);
    const before = await reviews();
    for (let i = 0; i < 20; i++) {
      const r = await cp.request('GET', `/api/v1/namespaces/${NS}/pods/https:coild-n1:${port}/proxy/ipam`);
      assert.equal(r.status, 401, r.body);
    }
    assert.equal(await reviews(), before);
  });

  test('release acts on what two reports agree on: the orphan block deleted (finalizer too), the leak released by coild, running pods untouched (as a user holding only coil-ipam-admin)', async () => {
    const operator = await userBoundTo('operator', 'admin');
    const a = await check('a', '--blockrequest-wait=1s');
    const b = await check('b', '--blockrequest-wait=1s');
    const r = await toolAs(operator, 'ipam', 'release', '--from-report', a.file, '--from-report', b.file);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    assert.match(r.stdout, /done\s+orphan-block\s+deleted AddressBlock default-2 of gone Node gone/);
    assert.match(r.stdout, /done\s+leaked-address\s+coild on n1 released 10\.100\.0\.\d+/);
    assert.equal(await blockExists('default-2'), false);
    assert.equal(coild.ipam.lookup('c-leak', 'eth0'), undefined);
    assert.equal(await coild.podNetwork.inspect('c-leak', 'eth0'), undefined);
    assert.ok(coild.ipam.lookup('c-web-1', 'eth0'), "a running pod's allocation was released");
    const after = await check('after', '--blockrequest-wait=1s');
    assert.deepEqual(after.report.findings.map((f) => f.kind), ['duplicate-pod-ip', 'stale-blockrequest']);
  });

  test('a leak whose Pod appears before release is kept, by the tool and by coild', async () => {
    const ip = await coild.wire('c-late', { namespace: 'demo', name: 'late' });
    const { file, report } = await check('late', '--blockrequest-wait=1s');
    assert.ok(report.findings.some((f) => f.key === 'leaked-address/n1/c-late/eth0'));
    await pod('late', 'n1', ip);
    const r = await tool('ipam', 'release', '--from-report', file);
    assert.equal(r.code, 3);
    assert.match(r.stdout, /skipped\s+leaked-address\s+Pod demo\/late on n1 has 10\.100\.0\.\d+ now/);
    assert.ok(coild.ipam.lookup('c-late', 'eth0'));
  });
});
