/**
 * The real-node lab (hack/lab/cluster.ts) as a test: 3 nodes, each with its own containerd,
 * kubelet and kube-proxy; coil installed with helm from the image hack/build-image.sh built; pods
 * created through the API and started by kubelet through containerd and libcni, which calls the
 * `coil` the chart's init container installed. One set of nodes for the suite; the last test
 * stops it and checks that nothing is left on the machine. A second suite kills `npm run lab`
 * (SIGKILL, no teardown) while its pods run, and checks that `npm run lab -- down` removes it all.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import * as k8s from '@kubernetes/client-node';
import { execFile } from 'node:child_process';
import { copyFile, writeFile } from 'node:fs/promises';
import { promisify } from 'node:util';
import { Cluster, POD_RANGE, type Leftovers } from '../../hack/lab/cluster.js';
import { CRI_NAMESPACE } from '../../hack/lab/containerd.js';
import { eventually, REPO_ROOT } from '../envtest/control-plane.js';
import { prerequisite } from '../support/prerequisite.js';
import { checkInvariants } from '../invariants/check.js';
import { canI } from '../../hack/lab/credentials.js';
import { REAL_FAULTS, realSoak } from '../../hack/lab/real-soak.js';
import { coildMemory } from '../../hack/bench/pod-startup.js';
import { processesIn } from '../../hack/lab/cgroups.js';
import { tcpConnections } from '../support/tcp-connections.js';
import { cidrContainsAddress, parseAddress, parseCidr } from '../../src/ipam/cidr.js';
import { parseAllDocuments } from 'yaml';
import { toolPath } from '../envtest/tools.js';

const isRoot = process.getuid?.() === 0;
const NS = 'e2e';
/** Namespace of the fault tests' pods (pool default). */
const FAULTS_NS = 'e2e-faults';
/** Namespace of pool `faults` (FAULTS_RANGE), made by the leader-delete test. */
const POOL_NS = 'e2e-pool';
const FAULTS_RANGE = '10.121.0.0/24';
const EGRESS_NS = 'e2e-egress';

type Block = { metadata: { name: string; labels: Record<string, string> }; ipv4?: string };

/** True when IPv4 `address` is inside `cidr` (pure). */
function inCidr(address: string, cidr: string): boolean {
  const toInt = (a: string) => a.split('.').reduce((n, o) => n * 256 + Number(o), 0);
  const [base, bits] = cidr.split('/');
  const size = 2 ** (32 - Number(bits));
  return Math.floor(toInt(address) / size) === Math.floor(toInt(base!) / size);
}

/** True when IPv6 `address` is inside `cidr` (the product's CIDR arithmetic). */
function inCidr6(address: string, cidr: string): boolean {
  return cidrContainsAddress(parseCidr(cidr), parseAddress(address));
}

describe('the real-node lab (e2e)', { skip: prerequisite(isRoot ? undefined : 'the lab needs root (namespaces, cgroups, mounts)') }, () => {
  let cluster: Cluster;
  let stopped = false;

  before(async () => {
    cluster = await Cluster.up({ nodes: 3, log: (m) => console.log(`lab: ${m}`) });
  });
  after(async () => {
    if (!stopped) await cluster?.stop();
  });

  const pods = async (namespace: string, selector: string): Promise<k8s.V1Pod[]> =>
    (await cluster.api(k8s.CoreV1Api).listNamespacedPod({ namespace, labelSelector: selector })).items;

  test('every node runs the image build-image.sh built, and kubelet started coil-controller and coild from it', async () => {
    const coil = [...cluster.images.values()].find((i) => i.ref.startsWith('ghcr.io/coil-ts/coil:'))!;
    assert.ok(coil.archive.startsWith(join(REPO_ROOT, 'dist/image/')), coil.archive);
    for (const node of cluster.nodes) assert.equal(await node.imageDigest(coil.ref), coil.manifestDigest, `${node.name} has ${coil.ref} at the archive's digest`);
    const system = await pods('kube-system', 'app.kubernetes.io/name=coil');
    const coild = system.filter((p) => p.metadata?.labels?.['app.kubernetes.io/component'] === 'coild');
    const controllers = system.filter((p) => p.metadata?.labels?.['app.kubernetes.io/component'] === 'coil-controller');
    assert.equal(coild.length, 3, 'one coild per node');
    assert.deepEqual(new Set(coild.map((p) => p.spec?.nodeName)), new Set(cluster.nodes.map((n) => n.name)));
    assert.equal(controllers.length, 2);
    for (const pod of [...coild, ...controllers]) {
      assert.equal(pod.status?.phase, 'Running', pod.metadata?.name);
      for (const c of pod.status?.containerStatuses ?? []) {
        assert.equal(c.image, coil.ref);
        assert.ok([coil.configDigest, coil.manifestDigest].some((d) => c.imageID.endsWith(d)), `${pod.metadata?.name}/${c.name} runs ${c.imageID}`);
      }
    }
  });

  test("the chart's init container installed coil and its conflist on every node", async () => {
    const built = await stat(join(REPO_ROOT, 'dist/bin/coil'));
    for (const node of cluster.nodes) {
      assert.equal((await stat(node.host.hostPath('/opt/cni/bin/coil'))).size, built.size, `${node.name}: coil`);
      const conflist = JSON.parse(await readFile(node.host.hostPath('/etc/cni/net.d/10-coil.conflist'), 'utf8')) as { plugins: { type: string }[] };
      assert.deepEqual(conflist.plugins.map((p) => p.type), ['coil', 'portmap']);
    }
  });

  test('pods of a Deployment and a bare Pod, created through the API, get addresses from their nodes\' blocks', async () => {
    await cluster.applyWorkload(NS, 'web', 6);
    for (const node of cluster.nodes) await cluster.createPod(NS, `client-${node.name}`, { nodeName: node.name, labels: { app: 'client' } });
    const all = [...(await cluster.waitForPods(NS, 'app=web', 6)), ...(await cluster.waitForPods(NS, 'app=client', 3))];
    const blocks = ((await cluster.api(k8s.CustomObjectsApi).listClusterCustomObject({ group: 'coil.cybozu.com', version: 'v2', plural: 'addressblocks' })) as { items: Block[] }).items;
    const ips = new Set<string>();
    for (const pod of all) {
      const ip = pod.status!.podIP!;
      assert.ok(inCidr(ip, POD_RANGE), `${pod.metadata?.name}: ${ip} in ${POD_RANGE}`);
      const own = blocks.filter((b) => b.metadata.labels['coil.cybozu.com/node'] === pod.spec?.nodeName);
      assert.ok(own.some((b) => inCidr(ip, b.ipv4!)), `${pod.metadata?.name}: ${ip} in a block of ${pod.spec?.nodeName}`);
      ips.add(ip);
    }
    assert.equal(ips.size, all.length, 'no address given twice');
  });

  test('pods on different nodes ping each other over the routes BIRD learned', async () => {
    const clients = await cluster.waitForPods(NS, 'app=client', 3);
    for (const from of clients) {
      for (const to of clients.filter((p) => p.spec?.nodeName !== from.spec?.nodeName)) {
        await cluster.waitForBgpRoute(from.spec!.nodeName!, to.status!.podIP!);
        assert.ok(await cluster.ping(NS, from.metadata!.name!, to.status!.podIP!), `${from.metadata?.name} -> ${to.metadata?.name} ${to.status?.podIP}`);
      }
    }
  });

  test('dual stack: each pod also has an IPv6 address of its node\'s block, and pods on different nodes ping each other over IPv6 (ping -6)', async () => {
    const clients = await cluster.waitForPods(NS, 'app=client', 3);
    const blocks = ((await cluster.api(k8s.CustomObjectsApi).listClusterCustomObject({ group: 'coil.cybozu.com', version: 'v2', plural: 'addressblocks' })) as { items: (Block & { ipv6?: string })[] }).items;
    const ipv6Of = (p: k8s.V1Pod): string => {
      const found = (p.status?.podIPs ?? []).map((a) => a.ip).filter((a) => a.includes(':'));
      assert.equal(found.length, 1, `${p.metadata?.name}: podIPs ${JSON.stringify(p.status?.podIPs)}`);
      return found[0]!;
    };
    for (const p of clients) {
      const own = blocks.filter((b) => b.metadata.labels['coil.cybozu.com/node'] === p.spec?.nodeName && b.ipv6);
      assert.ok(own.some((b) => inCidr6(ipv6Of(p), b.ipv6!)), `${p.metadata?.name}: ${ipv6Of(p)} in an IPv6 block of ${p.spec?.nodeName}`);
    }
    for (const from of clients) {
      for (const to of clients.filter((p) => p.spec?.nodeName !== from.spec?.nodeName)) {
        await cluster.waitForBgpRoute(from.spec!.nodeName!, ipv6Of(to));
        assert.ok(await cluster.ping(NS, from.metadata!.name!, ipv6Of(to)), `${from.metadata?.name} -> ${to.metadata?.name} ${ipv6Of(to)}`);
      }
    }
  });

  test('a pod reaches the apiserver through the kubernetes Service (kube-proxy, the nodes\' relays)', async () => {
    const [client] = await cluster.waitForPods(NS, 'app=client', 3);
    const out = await cluster.exec(NS, client!.metadata!.name!, ['sh', '-c', 'nc -w 3 10.0.0.1 443 </dev/null && echo connected']);
    assert.match(out, /connected/);
  });

  test('deleting a pod releases its address through CNI DEL (coild no longer lists it)', async () => {
    const [victim] = await cluster.waitForPods(NS, 'app=web', 6);
    const name = victim!.metadata!.name!;
    const node = cluster.node(victim!.spec!.nodeName!);
    const listed = async () => (await cluster.coildIpam(node.name)).includes(name);
    assert.ok(await listed(), `coild on ${node.name} lists ${name}`);
    await cluster.api(k8s.CoreV1Api).deleteNamespacedPod({ name, namespace: NS });
    await eventually(async () => !(await listed()), { timeoutMs: 60_000, intervalMs: 500 });
    await cluster.waitForPods(NS, 'app=web', 6);
  });

  /**
   * Every invariant holds (test/invariants/check.ts) and each pod with an address has one
   * allocation. The view is read again for up to 30 s while it does not hold: a pod being torn
   * down (its object gone, its sandbox not yet) is not a violation; the last view's failure is.
   */
  const assertInvariants = async (options: { afterGc?: boolean } = {}): Promise<void> => {
    const verify = async (): Promise<void> => {
      const view = await cluster.view();
      for (const node of view.nodes) assert.ok(node.allocations, `coild on ${node.name} answered /ipam`);
      assert.equal(view.nodes.flatMap((n) => n.allocations ?? []).length, view.pods.length, 'one allocation per pod with an address');
      for (const p of view.pods) assert.ok(p.containerId, `${p.namespace}/${p.name} is in its node's libcni cache`);
      assert.deepEqual(checkInvariants(view, options), []);
    };
    const deadline = Date.now() + 30_000;
    for (;;) {
      try {
        return await verify();
      } catch (err) {
        if (Date.now() > deadline) throw err;
        await new Promise((r) => setTimeout(r, 1000));
      }
    }
  };

  /** A new bare pod on `node` in `namespace` starts, with an address of `range` (the namespace's pool). */
  const podStartsOn = async (nodeName: string, name: string, namespace = FAULTS_NS, range = POD_RANGE): Promise<k8s.V1Pod> => {
    await cluster.createPod(namespace, name, { nodeName, labels: { app: name } });
    const [pod] = await cluster.waitForPods(namespace, `app=${name}`, 1);
    assert.equal(pod!.spec?.nodeName, nodeName);
    assert.ok(inCidr(pod!.status!.podIP!, range), `${name}: ${pod!.status!.podIP} in ${range}`);
    return pod!;
  };

  test('the invariant checker finds nothing wrong on the real nodes (addresses, blocks, veths, coild\'s allocations)', async () => {
    await assertInvariants();
  });

  /**
   * The soak on the real nodes (hack/lab/real-soak.ts): COIL_REAL_SOAK_OPERATIONS pod creations
   * and deletions (default 150) by 4 workers, each fault of REAL_FAULTS once per round
   * (COIL_REAL_SOAK_FAULT_ROUNDS, default 1) at a moment and in an order drawn from the seed (random and printed; COIL_REAL_SOAK_SEED replays one), the invariant
   * checker after each fault, and every block of the soak's pool released at the end.
   */
  test('soak: random pod creations and deletions with faults of real parts — no invariant violated, no block leaked', async () => {
    const operations = Number(process.env.COIL_REAL_SOAK_OPERATIONS ?? 150);
    const seed = process.env.COIL_REAL_SOAK_SEED === undefined ? undefined : Number(process.env.COIL_REAL_SOAK_SEED);
    const faultRounds = Number(process.env.COIL_REAL_SOAK_FAULT_ROUNDS ?? 1);
    const report = await realSoak(cluster, { operations, faultRounds, concurrency: 4, maxPods: 24, log: (m) => console.log(m), ...(seed === undefined ? {} : { seed }) });
    console.log(`real soak report: ${JSON.stringify(report)}`);
    assert.equal(report.operations, operations);
    assert.deepEqual(report.faults.map((f) => f.name).sort(), Array.from({ length: faultRounds }, () => REAL_FAULTS).flat().sort(), 'every fault was injected in every round');
    assert.ok(report.creates > operations / 3, `${report.creates} pods started`);
    // A pod may fail to start while a fault is in progress (coild down, the apiserver away); once
    // the fault has healed and its invariant check passed, every pod must start.
    assert.deepEqual(Object.keys(report.createFailures).filter((k) => k.startsWith('no fault:')), [], `seed ${report.seed}: pods that failed with no fault in progress`);
    assert.deepEqual(report.violations, [], `seed ${report.seed}`);
    assert.equal(report.blocksLeaked, 0, `seed ${report.seed}: blocks of pool soak left`);
  });

  test('each program runs with least privilege: the service accounts its real pods run as (RBAC, by impersonation)', async () => {
    const system = await pods('kube-system', 'app.kubernetes.io/name=coil');
    const account = (component: string) => system.find((p) => p.metadata?.labels?.['app.kubernetes.io/component'] === component)!.spec!.serviceAccountName!;
    const coild = account('coild');
    const controller = account('coil-controller');
    assert.equal(await canI(cluster.cp, coild, 'create', 'blockrequests.coil.cybozu.com'), true);
    assert.equal(await canI(cluster.cp, coild, 'create', 'addressblocks.coil.cybozu.com'), false, 'only the controller creates blocks');
    assert.equal(await canI(cluster.cp, coild, 'delete', 'addresspools.coil.cybozu.com'), false);
    assert.equal(await canI(cluster.cp, coild, 'get', 'secrets'), false);
    assert.equal(await canI(cluster.cp, controller, 'create', 'addressblocks.coil.cybozu.com'), true);
    assert.equal(await canI(cluster.cp, controller, 'create', 'pods'), false);
  });

  test('an Egress becomes a Deployment and a Service; its NAT pod runs on a real node (FoU is not in this kernel, and its readyz says so)', async () => {
    await cluster.kubectl(['apply', '-f', '-'], [
      JSON.stringify({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: EGRESS_NS } }),
      JSON.stringify({ apiVersion: 'coil.cybozu.com/v2', kind: 'Egress', metadata: { name: 'nat', namespace: EGRESS_NS }, spec: { replicas: 1, destinations: ['0.0.0.0/0'] } }),
    ].join('\n'));
    const apps = cluster.api(k8s.AppsV1Api);
    const deployment = await eventually(async () => apps.readNamespacedDeployment({ name: 'nat', namespace: EGRESS_NS }).catch(() => false as const), { timeoutMs: 60_000, intervalMs: 500 });
    assert.equal(deployment.metadata?.ownerReferences?.[0]?.kind, 'Egress');
    // The reconciler writes the Deployment and then the Service: the Service may lag the Deployment
    // by a moment (a CI run read it right after the Deployment and got 404).
    const service = await eventually(async () => cluster.api(k8s.CoreV1Api).readNamespacedService({ name: 'nat', namespace: EGRESS_NS }).catch(() => false as const), { timeoutMs: 60_000, intervalMs: 500 });
    assert.deepEqual(service.spec?.ports?.map((p) => [p.port, p.protocol]), [[5555, 'UDP']]);
    assert.match(service.spec?.clusterIP ?? '', /^10\.0\./);
    const selector = 'app.kubernetes.io/instance=nat,app.kubernetes.io/component=egress';
    const pod = await eventually(async () => {
      const [p] = await pods(EGRESS_NS, selector);
      return p?.status?.phase === 'Running' && p.status.podIP && p.status.containerStatuses?.[0]?.started ? p : false;
    }, { timeoutMs: 120_000, intervalMs: 500 });
    assert.equal(pod.spec?.containers[0]?.image, coilImage().ref, 'the NAT pod runs the controller\'s own image');
    assert.ok(inCidr(pod.status!.podIP!, POD_RANGE), `the NAT pod got ${pod.status?.podIP} from coil`);
    const node = cluster.node(pod.spec!.nodeName!);
    // coil-egress serves /readyz before it has probed the kernel ("kernel features not probed
    // yet"; a CI run read that first): wait for the probe's verdict, which names FoU.
    await eventually(async () => {
      const readyz = await node.http(pod.status!.podIP!, 8081, '/readyz');
      assert.match(readyz, /fou/i, `readyz: ${readyz}`);
    }, { timeoutMs: 60_000, intervalMs: 500 });
    const egress = JSON.parse(await cluster.kubectl(['get', 'egress', '-n', EGRESS_NS, 'nat', '-o', 'json'])) as { status?: { selector?: string; replicas?: number } };
    assert.match(egress.status?.selector ?? '', /app\.kubernetes\.io\/instance=nat/);
    await cluster.kubectl(['delete', 'namespace', EGRESS_NS, '--timeout=120s']);
  });

  /**
   * The authenticated endpoints on real nodes (docs/observability.md#access), seen from an
   * unprivileged Pod — no ServiceAccount token mounted, a non-root user, the pod network — that
   * runs Node from the coil image: every port of coild on each node, of each coil-controller and
   * of a NAT pod answers 401 without a token and with a made-up one, except the kubelet's probes;
   * what that costs the API server is read from its own `apiserver_request_total` before and after.
   */
  test('every port of coild, coil-controller and coil-egress answers an unprivileged Pod 401 except the probes, at no API cost without a token and within the rate limit with made-up ones', async () => {
    const ns = 'e2e-auth';
    await cluster.kubectl(['apply', '-f', '-'], [
      JSON.stringify({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns } }),
      JSON.stringify({ apiVersion: 'coil.cybozu.com/v2', kind: 'Egress', metadata: { name: 'nat', namespace: ns }, spec: { replicas: 1, destinations: ['0.0.0.0/0'] } }),
      JSON.stringify({ apiVersion: 'v1', kind: 'Pod', metadata: { name: 'prober', namespace: ns }, spec: {
        automountServiceAccountToken: false, terminationGracePeriodSeconds: 1, securityContext: { runAsUser: 65534, runAsNonRoot: true },
        containers: [{ name: 'node', image: coilImage().ref, imagePullPolicy: 'IfNotPresent', command: ['sleep', 'infinity'] }] } }),
    ].join('\n'));
    const running = async (selector: string): Promise<k8s.V1Pod> => eventually(async () => {
      const [p] = await pods(ns, selector);
      return p?.status?.phase === 'Running' && p.status.podIP && p.status.containerStatuses?.[0]?.started ? p : false;
    }, { timeoutMs: 120_000, intervalMs: 500 });
    const nat = await running('app.kubernetes.io/instance=nat,app.kubernetes.io/component=egress');
    await running('!app.kubernetes.io/instance');
    const system = await pods('kube-system', 'app.kubernetes.io/name=coil');
    const hostIPs = (component: string) => system.filter((p) => p.metadata?.labels?.['app.kubernetes.io/component'] === component && p.status?.phase === 'Running').map((p) => p.status!.hostIP!);
    const url = (scheme: string, ip: string, port: number, path: string) => `${scheme}://${ip.includes(':') ? `[${ip}]` : ip}:${port}${path}`;
    // What must answer 401 (no token), and the probes that must answer (200, or 500 with the reason).
    const guarded: string[] = [];
    const probes: string[] = [];
    for (const ip of hostIPs('coild')) {
      guarded.push(url('https', ip, 9384, '/metrics'), url('https', ip, 9385, '/ipam'), url('https', ip, 9385, '/anything'));
      probes.push(url('https', ip, 9385, '/healthz'), url('https', ip, 9385, '/readyz'));
    }
    for (const ip of hostIPs('coil-controller')) {
      guarded.push(url('https', ip, 9386, '/metrics'), url('http', ip, 9387, '/metrics'));
      probes.push(url('http', ip, 9387, '/healthz'), url('http', ip, 9387, '/readyz'));
    }
    guarded.push(url('https', nat.status!.podIP!, 8080, '/metrics'), url('http', nat.status!.podIP!, 8081, '/ipam'));
    probes.push(url('http', nat.status!.podIP!, 8081, '/healthz'), url('http', nat.status!.podIP!, 8081, '/readyz'));
    /** Runs `urls` `times` over from the prober, each with `token(i)`; returns the statuses' counts per URL. */
    const probe = async (urls: readonly string[], times: number, token: 'none' | 'made-up'): Promise<Record<string, Record<string, number>>> => {
      const script = `process.env.NODE_TLS_REJECT_UNAUTHORIZED='0';process.removeAllListeners('warning');(async()=>{const out={};
        for(const u of ${JSON.stringify(urls)}){out[u]={};for(let i=0;i<${times};i++){
          const h=${token === 'made-up' ? "{authorization:'Bearer made-up-'+i+'-'+Math.random().toString(36).slice(2)}" : '{}'};
          const s=await fetch(u,{headers:h}).then(async r=>{await r.text();return r.status},e=>'error '+(e.cause?.code??e.message));out[u][s]=(out[u][s]??0)+1}}
        process.stdout.write(JSON.stringify(out))})()`;
      return JSON.parse(await cluster.exec(ns, 'prober', ['node', '-e', script])) as Record<string, Record<string, number>>;
    };
    const reviews = async (): Promise<{ tokenreviews: number; subjectaccessreviews: number }> => {
      const text = (await cluster.cp.request('GET', '/metrics')).body;
      const sum = (resource: string): number => text.split('\n')
        .filter((l) => l.startsWith('apiserver_request_total{') && l.includes(`resource="${resource}"`)).reduce((n, l) => n + Number(l.split(' ').pop()), 0);
      return { tokenreviews: sum('tokenreviews'), subjectaccessreviews: sum('subjectaccessreviews') };
    };

    const seen = { ...(await probe(guarded, 1, 'none')), ...(await probe(probes, 1, 'none')) };
    for (const u of guarded) assert.deepEqual(seen[u], { 401: 1 }, `${u} without a token`);
    for (const u of probes) assert.ok(seen[u]![200] === 1 || seen[u]![500] === 1, `${u}: ${JSON.stringify(seen[u])}`);
    const madeUp = await probe(guarded, 1, 'made-up');
    for (const u of guarded) assert.ok(madeUp[u]![401] === 1 || madeUp[u]![429] === 1, `${u} with a made-up token: ${JSON.stringify(madeUp[u])}`);

    const ipam = guarded[1]!;
    let before = await reviews();
    assert.deepEqual((await probe([ipam], 1000, 'none'))[ipam], { 401: 1000 });
    let after = await reviews();
    console.log(`1,000 requests without a token to ${ipam}: ${after.tokenreviews - before.tokenreviews} TokenReviews, ${after.subjectaccessreviews - before.subjectaccessreviews} SubjectAccessReviews at the API server`);
    assert.deepEqual(after, before, 'no API request for a request without a token');
    before = await reviews();
    const t0 = performance.now();
    const counts = (await probe([ipam], 1000, 'made-up'))[ipam]!;
    const seconds = (performance.now() - t0) / 1000;
    after = await reviews();
    const spent = after.tokenreviews - before.tokenreviews;
    console.log(`1,000 made-up tokens to ${ipam} in ${seconds.toFixed(1)} s: ${spent} TokenReviews (${JSON.stringify(counts)}); the limit allows 10 + 2/s = ${10 + Math.ceil(2 * seconds)}`);
    assert.ok(spent <= 10 + Math.ceil(2 * seconds), `${spent} TokenReviews in ${seconds.toFixed(1)} s`);
    assert.equal(after.subjectaccessreviews, before.subjectaccessreviews);
    assert.equal((counts[401] ?? 0) + (counts[429] ?? 0), 1000, JSON.stringify(counts));

    // The chart's monitors, rendered with every program on, scraped as Prometheus would: each
    // endpoint's scheme, tlsConfig and authorization (the Secret's token) against every target.
    const rendered = (await runFile(await toolPath('helm'), ['template', 'coil', join(REPO_ROOT, 'charts/coil'), '-n', 'kube-system',
      '--set', 'monitoring.controller.enabled=true', '--set', 'monitoring.coild.enabled=true', '--set', 'monitoring.egress.enabled=true'])).stdout;
    type Endpoint = { port: string; path: string; scheme?: string; tlsConfig?: { insecureSkipVerify?: boolean }; authorization?: { type: string; credentials: { name: string; key: string } } };
    const monitors = parseAllDocuments(rendered).map((d) => d.toJS() as { kind?: string; metadata: { name: string }; spec: { podMetricsEndpoints?: Endpoint[]; endpoints?: Endpoint[] } })
      .filter((d) => d?.kind === 'PodMonitor' || d?.kind === 'ServiceMonitor');
    assert.deepEqual(monitors.map((m) => m.metadata.name).sort(), ['coil-controller', 'coil-egress', 'coild']);
    const targets: Record<string, string[]> = {
      'coil-controller': hostIPs('coil-controller').map((ip) => `${ip}:9386`), coild: hostIPs('coild').map((ip) => `${ip}:9384`), 'coil-egress': [`${nat.status!.podIP!}:8080`],
    };
    for (const m of monitors) {
      const [e] = m.spec.podMetricsEndpoints ?? m.spec.endpoints ?? [];
      assert.equal(e?.authorization?.type, 'Bearer', m.metadata.name);
      // The Secret the chart made, once Kubernetes' token controller filled it.
      const token = await eventually(async () => {
        const secret = JSON.parse(await cluster.kubectl(['get', 'secret', '-n', 'kube-system', e!.authorization!.credentials.name, '-o', 'json'])) as { data?: Record<string, string> };
        const data = secret.data?.[e!.authorization!.credentials.key];
        return data ? Buffer.from(data, 'base64').toString() : false;
      }, { timeoutMs: 30_000, intervalMs: 500 });
      const script = `${e!.tlsConfig?.insecureSkipVerify ? "process.env.NODE_TLS_REJECT_UNAUTHORIZED='0';process.removeAllListeners('warning');" : ''}(async()=>{const out=[];
        for(const t of ${JSON.stringify(targets[m.metadata.name])}){const r=await fetch('${e!.scheme ?? 'http'}://'+t+'${e!.path}',{headers:{authorization:'Bearer '+${JSON.stringify(token)}}});out.push([t,r.status,(await r.text()).includes('process_start_time_seconds')])}
        process.stdout.write(JSON.stringify(out))})()`;
      const scraped = JSON.parse(await cluster.exec(ns, 'prober', ['node', '-e', script])) as [string, number, boolean][];
      for (const [t, status, metrics] of scraped) assert.deepEqual([status, metrics], [200, true], `${m.metadata.name} scraped ${t} with the monitor's settings`);
    }
    await cluster.kubectl(['delete', 'namespace', ns, '--timeout=120s']);
  });

  /**
   * `kubectl coil` as admins hold the chart's roles, with ServiceAccount tokens in their
   * kubeconfigs: coil-ipam-view shows and checks (coild's views read through pods/proxy with a
   * coil-ipam-reader token), coil-ipam-admin also releases, neither gets one "forbidden" line.
   */
  test('kubectl coil as coil-ipam-view (show, check), coil-ipam-admin (release) and neither (one forbidden line)', async () => {
    const ns = 'e2e-admins';
    await cluster.kubectl(['create', 'namespace', ns]);
    const kubeconfigAs = async (name: string, role?: string): Promise<string> => {
      await cluster.kubectl(['create', 'serviceaccount', name, '-n', ns]);
      if (role) await cluster.kubectl(['create', 'clusterrolebinding', `${ns}-${name}`, `--clusterrole=${role}`, `--serviceaccount=${ns}:${name}`]);
      const token = (await cluster.kubectl(['create', 'token', name, '-n', ns, '--duration=1h'])).trim();
      const file = join(cluster.dir, `${name}.kubeconfig`);
      await writeFile(file, JSON.stringify({
        apiVersion: 'v1', kind: 'Config', 'current-context': 'c',
        clusters: [{ name: 'c', cluster: { server: cluster.cp.server, 'certificate-authority-data': Buffer.from(cluster.cp.ca.caPem).toString('base64') } }],
        users: [{ name, user: { token } }], contexts: [{ name: 'c', context: { cluster: 'c', user: name } }],
      }), { mode: 0o600 });
      return file;
    };
    const tool = async (kubeconfig: string, ...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> => {
      try {
        const { stdout, stderr } = await runFile(process.execPath, [join(REPO_ROOT, 'dist/src/kubectl-coil/main.js'), ...args, '--kubeconfig', kubeconfig], { timeout: 120_000, env: { ...process.env, KUBECONFIG: '' } });
        return { code: 0, stdout, stderr };
      } catch (err) {
        const e = err as { code?: number; stdout?: string; stderr?: string };
        return { code: e.code ?? -1, stdout: e.stdout ?? '', stderr: e.stderr ?? '' };
      }
    };
    const viewer = await kubeconfigAs('viewer', 'coil-ipam-view');
    const admin = await kubeconfigAs('admin', 'coil-ipam-admin');
    const nobody = await kubeconfigAs('nobody');
    const shown = await tool(viewer, 'ipam', 'show', '--show-blocks');
    assert.equal(shown.code, 0, shown.stderr);
    assert.doesNotMatch(shown.stderr, /not read/, 'every coild read');
    const checked = await tool(viewer, 'ipam', 'check', '-o', 'json');
    assert.ok(checked.code === 0 || checked.code === 3, checked.stderr);
    const report = JSON.parse(checked.stdout) as { nodesChecked: string[]; coildUnreachable: unknown[] };
    assert.deepEqual(report.nodesChecked.sort(), cluster.nodes.map((n) => n.name).sort(), "every coild's /ipam read with the coil-ipam-reader token");
    assert.deepEqual(report.coildUnreachable, []);
    const file = join(cluster.dir, 'e2e-admins-report.json');
    await writeFile(file, checked.stdout);
    const released = await tool(admin, 'ipam', 'release', '--from-report', file);
    assert.equal(released.code, 0, released.stdout + released.stderr);
    for (const args of [['ipam', 'show'], ['ipam', 'check'], ['ipam', 'release', '--from-report', file]]) {
      const r = await tool(nobody, ...args);
      assert.equal(r.code, 1, `${args.join(' ')}: ${r.stdout}${r.stderr}`);
      const lines = r.stderr.trimEnd().split('\n');
      assert.equal(lines.length, 1, r.stderr);
      assert.match(lines[0]!, /^kubectl coil: .*forbidden/);
    }
    await cluster.kubectl(['delete', 'namespace', ns, '--timeout=120s']);
    for (const name of ['viewer', 'admin']) await cluster.kubectl(['delete', 'clusterrolebinding', `${ns}-${name}`]);
  });

  test("fault: coild's container killed — kubelet restarts it, it recovers every allocation, and a new pod on that node starts", async () => {
    const node = cluster.nodes[0]!;
    const [coild] = (await pods('kube-system', 'app.kubernetes.io/component=coild')).filter((p) => p.spec?.nodeName === node.name);
    const restarts = coild!.status?.containerStatuses?.find((c) => c.name === 'coild')?.restartCount ?? 0;
    await node.killContainer('kube-system', coild!.metadata!.name!, 'coild');
    await eventually(async () => {
      const [p] = (await pods('kube-system', 'app.kubernetes.io/component=coild')).filter((x) => x.spec?.nodeName === node.name);
      const c = p?.status?.containerStatuses?.find((x) => x.name === 'coild');
      return (c?.restartCount ?? 0) > restarts && c?.ready === true;
    }, { timeoutMs: 120_000, intervalMs: 500 });
    await podStartsOn(node.name, 'after-coild-kill');
    await assertInvariants();
  });

  test('fault: a node\'s kubelet restarted — its pods keep their addresses, and a new pod there starts', async () => {
    const node = cluster.nodes[1]!;
    const before = await snapshot();
    await node.restart('kubelet');
    await cluster.waitNodesReady();
    assert.deepEqual(await snapshot(), before);
    await podStartsOn(node.name, 'after-kubelet-restart');
    await assertInvariants();
  });

  test('fault: the leading controller pod deleted — another takes the lease and allocates the blocks a new pool needs', async () => {
    const leases = cluster.api(k8s.CoordinationV1Api);
    const holder = (await leases.readNamespacedLease({ name: 'coil-leader', namespace: 'kube-system' })).spec?.holderIdentity ?? '';
    const leader = holder.slice(0, holder.lastIndexOf('_'));
    assert.ok(leader, `lease holder ${holder}`);
    await cluster.api(k8s.CoreV1Api).deleteNamespacedPod({ name: leader, namespace: 'kube-system' });
    await eventually(async () => {
      const h = (await leases.readNamespacedLease({ name: 'coil-leader', namespace: 'kube-system' })).spec?.holderIdentity ?? '';
      return h !== '' && !h.startsWith(`${leader}_`);
    }, { timeoutMs: 90_000, intervalMs: 500 });
    // A pool of its own for the namespace: its first block can only come from the new leader.
    await cluster.kubectl(['apply', '-f', '-'], [
      JSON.stringify({ apiVersion: 'coil.cybozu.com/v2', kind: 'AddressPool', metadata: { name: 'faults' }, spec: { blockSizeBits: 2, subnets: [{ ipv4: FAULTS_RANGE }] } }),
      JSON.stringify({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: POOL_NS } }),
    ].join('\n'));
    // Not in the applied object: createPod applies the Namespace again, and `kubectl apply`
    // would remove an annotation its previous apply set.
    await cluster.kubectl(['annotate', 'namespace', POOL_NS, 'coil.cybozu.com/pool=faults']);
    await podStartsOn(cluster.nodes[2]!.name, 'after-leader-delete', POOL_NS, FAULTS_RANGE);
    await cluster.waitRollout('deployment/coil-controller');
    await assertInvariants();
  });

  test('fault: kube-apiserver and etcd restarted — coild and the controller carry on, and new pods start', async () => {
    await cluster.cp.stopApiServer();
    await cluster.cp.startApiServer();
    await podStartsOn(cluster.nodes[0]!.name, 'after-apiserver-restart');
    await cluster.cp.stopEtcd();
    await cluster.cp.startEtcd();
    await podStartsOn(cluster.nodes[1]!.name, 'after-etcd-restart');
    await assertInvariants();
  });

  test('fault: a node removed (its machine gone, its Node deleted) — the controller collects its blocks, its pods move, the rest keep working', async () => {
    const gone = cluster.nodes[2]!.name;
    const blocksOf = async (node: string) =>
      ((await cluster.api(k8s.CustomObjectsApi).listClusterCustomObject({ group: 'coil.cybozu.com', version: 'v2', plural: 'addressblocks', labelSelector: `coil.cybozu.com/node=${node}` })) as { items: Block[] }).items;
    assert.ok((await blocksOf(gone)).length > 0, `${gone} holds blocks`);
    await cluster.removeNode(gone);
    // What the pod garbage collector does after its quarantine, at once: the pods bound to a
    // Node that no longer exists are deleted (no kubelet is left to confirm it).
    await cluster.kubectl(['delete', 'pods', '-A', `--field-selector=spec.nodeName=${gone}`, '--force', '--grace-period=0']);
    await eventually(async () => (await blocksOf(gone)).length === 0, { timeoutMs: 60_000, intervalMs: 500 });
    await cluster.waitForPods(NS, 'app=web', 6);
    await cluster.waitRollout('deployment/coil-controller');
    await assertInvariants();
  });

  const runFile = promisify(execFile);
  const coilImage = () => [...cluster.images.values()].find((i) => i.ref.startsWith('ghcr.io/coil-ts/coil:'))!;
  type Snapshot = Map<string, { ip: string; node: string }>;
  const snapshot = async (): Promise<Snapshot> =>
    new Map((await pods(NS, 'app in (web,client)')).filter((p) => !p.metadata?.deletionTimestamp)
      .map((p) => [p.metadata!.name!, { ip: p.status!.podIP!, node: p.spec!.nodeName! }]));
  const crossNodePings = async (): Promise<void> => {
    const clients = await cluster.waitForPods(NS, 'app=client', cluster.nodes.length);
    for (const from of clients) {
      for (const to of clients.filter((p) => p.spec?.nodeName !== from.spec?.nodeName)) {
        await cluster.waitForBgpRoute(from.spec!.nodeName!, to.status!.podIP!);
        assert.ok(await cluster.ping(NS, from.metadata!.name!, to.status!.podIP!), `${from.metadata?.name} -> ${to.status?.podIP}`);
      }
    }
  };

  /**
   * The routes of `table` on `node` ('' also when there is no such table: IPv6 drops an emptied
   * one, and a node whose coild never exported a block has none of either family).
   */
  const routesIn = async (node: { host: { exec(argv: string[]): Promise<string> } }, family: '-4' | '-6', table: string): Promise<string> => {
    try {
      return (await node.host.exec(['ip', family, 'route', 'show', 'table', table])).trim();
    } catch (err) {
      if (/FIB table does not exist/.test((err as Error).message)) return '';
      throw err;
    }
  };

  test("coild's memory in its pod after the e2e (printed for the record)", async () => {
    for (const node of cluster.nodes) {
      const m = await coildMemory(node.name);
      const count = (await cluster.api(k8s.CoreV1Api).listPodForAllNamespaces({ fieldSelector: `spec.nodeName=${node.name}` })).items.length;
      console.log(`coild on ${node.name} (${count} pods on the node): RSS ${(m.rss / 1e6).toFixed(1)} MB, peak ${(m.hwm / 1e6).toFixed(1)} MB; its pod ${(m.podRss / 1e6).toFixed(1)} MB`);
      assert.ok(m.rss > 0 && m.hwm >= m.rss, `${node.name}: ${JSON.stringify(m)}`);
    }
  });

  test('coild and coil-controller each hold one HTTP/2 connection to the apiserver through the relays, and kubectl-coil answers over HTTP/2', async () => {
    // The programs' pids among the pods kubelet runs, by their main script (entrypoint.sh).
    const programs = async (script: RegExp): Promise<{ node: string; pid: number }[]> => {
      const found: { node: string; pid: number }[] = [];
      for (const node of cluster.nodes) {
        for (const pid of await processesIn(`/${node.name}/kubepods`)) {
          const cmd = (await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '')).split('\0');
          if (cmd.some((a) => script.test(a))) found.push({ node: node.name, pid });
        }
      }
      return found;
    };
    const coilds = await programs(/\/node-agent\/main(\.bundle)?\.c?js$/);
    const controllers = await programs(/\/controller\/main\.js$/);
    // The fault tests before this one removed a node: one coild per node still in the lab.
    assert.equal(coilds.length, cluster.nodes.length);
    assert.ok(controllers.length >= 1);
    // The in-cluster address (the kubernetes Service, 443) or the node's relay (6443).
    await eventually(async () => {
      for (const p of [...coilds, ...controllers]) assert.equal(await tcpConnections(p.pid, [443, 6443]), 1, `pid ${p.pid} on ${p.node}`);
      return true;
    }, { timeoutMs: 20_000 });
    console.log(`connections to the apiserver: 1 for each of ${coilds.length} coilds and ${controllers.length} coil-controllers`);
    const shown = await cluster.exec('kube-system', 'ds/coild', ['kubectl-coil', 'ipam', 'show', '-o', 'json']);
    assert.ok(JSON.parse(shown), shown);
    // The image's kubectl-coil (on the Bun runtime inside coil): every node's coild, running and ready.
    const versions = await cluster.exec('kube-system', 'ds/coild', ['kubectl-coil', 'version']);
    for (const node of cluster.nodes) assert.match(versions, new RegExp(`\\ncoild\\s+${node.name}\\s+\\S+\\s+\\S+\\s+\\S+\\s+true\\n`), versions);
  });

  test('helm upgrade to a changed image restarts coild and the controller and keeps every pod\'s address and connectivity', async () => {
    const before = await snapshot();
    const { ref } = coilImage();
    const tag = 'upgraded';
    const upgraded = `${ref.slice(0, ref.lastIndexOf(':'))}:${tag}`;
    for (const node of cluster.nodes) {
      await runFile(node.ctrBin, ['--address', node.containerdSocket, '--namespace', CRI_NAMESPACE, 'images', 'tag', '--force', ref, upgraded]);
    }
    await cluster.upgradeChart([`image.tag=${tag}`]);
    // helm's --wait is satisfied once all but maxUnavailable replicas are ready (1 for both
    // coil-controller and coild), with an old pod still running: wait for the whole rollout.
    await cluster.waitRollout('deployment/coil-controller');
    await cluster.waitRollout('daemonset/coild');
    const system = await pods('kube-system', 'app.kubernetes.io/name=coil');
    for (const pod of system.filter((p) => !p.metadata?.deletionTimestamp)) {
      assert.equal(pod.spec?.containers[0]?.image, upgraded, `${pod.metadata?.name} runs the new image`);
    }
    assert.deepEqual(await snapshot(), before, 'same pods, same addresses, same nodes');
    // Recovered allocations carry no pod name (the veth alias holds pool, container and ifname:
    // recovery.ts), so the new coild's state is checked by address.
    for (const [name, { ip, node }] of before) {
      const body = await cluster.coildIpam(node);
      assert.ok(body.startsWith('{'), `the new coild on ${node} answers /ipam: ${JSON.stringify(body)}`);
      const ipam = JSON.parse(body) as { allocations: { ipv4?: string }[] };
      assert.ok(ipam.allocations.some((a) => a.ipv4 === ip), `the new coild on ${node} recovered ${name}'s ${ip}`);
    }
    await crossNodePings();
  });

  test('helm uninstall leaves every node ready for another CNI, running pods their network, and no object on a finalizer; a ptp pod then starts', async () => {
    await cluster.uninstallChart();
    const custom = cluster.api(k8s.CustomObjectsApi);
    // Everything coil left, read again for up to 60 s (coild cleans up as its pod stops, the
    // post-delete hook after that); a failure lists all of it, not just the first thing found.
    // A node where coil pods still run keeps their wiring — tables 116 and 119 and the rule — so
    // they keep their network (docs/ipam-recovery.md#after-an-uninstall); only the conflist goes.
    const core = cluster.api(k8s.CoreV1Api);
    const leftBehind = async (): Promise<string[]> => {
      const left: string[] = [];
      const running = (await core.listPodForAllNamespaces()).items.filter((p) => !p.spec?.hostNetwork && p.status?.phase === 'Running' && p.status?.podIP);
      for (const node of cluster.nodes) {
        if (await stat(node.host.hostPath('/etc/cni/net.d/10-coil.conflist')).then(() => true, () => false)) left.push(`${node.name}: /etc/cni/net.d/10-coil.conflist`);
        if (running.some((p) => p.spec?.nodeName === node.name)) continue;
        for (const family of ['-4', '-6'] as const) {
          for (const table of ['119', '116']) {
            const routes = await routesIn(node, family, table);
            if (routes !== '') left.push(`${node.name}: table ${table} (${family}): ${routes.split('\n').join('; ')}`);
          }
          const rules = (await node.host.exec(['ip', family, 'rule', 'show'])).split('\n').filter((l) => /^2000:/.test(l));
          if (rules.length > 0) left.push(`${node.name}: rule (${family}) ${rules.join('; ')}`);
        }
      }
      for (const plural of ['addresspools', 'addressblocks']) {
        const items = ((await custom.listClusterCustomObject({ group: 'coil.cybozu.com', version: 'v2', plural })) as { items: { metadata: { name: string; finalizers?: string[] } }[] }).items;
        for (const o of items) if ((o.metadata.finalizers ?? []).length > 0) left.push(`${plural}/${o.metadata.name}: finalizers ${o.metadata.finalizers!.join(',')}`);
      }
      return left;
    };
    let left = await leftBehind();
    for (const deadline = Date.now() + 60_000; left.length > 0 && Date.now() < deadline; left = await leftBehind()) await new Promise((r) => setTimeout(r, 500));
    assert.deepEqual(left, [], 'what helm uninstall left on the nodes and in the API');
    await cluster.kubectl(['delete', 'addressblocks.coil.cybozu.com', '--all', '--timeout=30s']);
    await cluster.kubectl(['delete', 'addresspool.coil.cybozu.com', 'default', '--timeout=30s']);

    // Another CNI: Debian's ptp + host-local (containernetworking-plugins) on one node.
    const node = cluster.nodes[0]!;
    for (const plugin of ['ptp', 'host-local']) await copyFile(`/usr/lib/cni/${plugin}`, node.host.hostPath(`/opt/cni/bin/${plugin}`));
    await writeFile(node.host.hostPath('/etc/cni/net.d/20-ptp.conflist'), JSON.stringify({
      cniVersion: '1.0.0', name: 'ptp-net',
      plugins: [{ type: 'ptp', ipMasq: false, ipam: { type: 'host-local', ranges: [[{ subnet: '10.250.0.0/24' }]], routes: [{ dst: '0.0.0.0/0' }] } }],
    }));
    await cluster.createPod(NS, 'after-coil', { nodeName: node.name, labels: { app: 'after-coil' } });
    const [pod] = await cluster.waitForPods(NS, 'app=after-coil', 1);
    assert.ok(inCidr(pod!.status!.podIP!, '10.250.0.0/24'), `the ptp pod got ${pod!.status!.podIP}`);
  });

  test('stopping the lab leaves no namespace, mount, cgroup, process or file behind', async () => {
    stopped = true;
    await cluster.stop();
    const left: Leftovers = await Cluster.leftovers({ prefix: cluster.prefix, dir: cluster.dir });
    assert.deepEqual(left, { netns: [], mounts: [], cgroups: [], processes: [], dir: false });
  });
});

describe('a killed lab is removed by `npm run lab -- down`', { skip: prerequisite(isRoot ? undefined : 'the lab needs root (namespaces, cgroups, mounts)') }, () => {
  test('SIGKILL while pods run, then down: nothing left behind', async () => {
    const node = join(REPO_ROOT, 'node_modules/.bin/node');
    const lab = spawn(node, [join(REPO_ROOT, 'dist/hack/lab.js'), '--nodes=1'], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    lab.stdout.on('data', (c: Buffer) => (out += c));
    // The lab exiting before it runs fails at once (its output says why), not after the timeout.
    const exited = once(lab, 'exit').then(([code]) => { throw new Error(`the lab exited (${String(code)}) before it ran`); });
    await Promise.race([eventually(() => out.includes('lab: running'), { timeoutMs: 600_000, intervalMs: 500 }), exited]).catch((err: unknown) => {
      lab.kill('SIGKILL');
      throw new Error(`the lab did not come up:\n${out}`, { cause: err });
    });
    exited.catch(() => undefined);
    lab.kill('SIGKILL');
    await once(lab, 'exit');
    const left = await Cluster.leftovers();
    assert.ok(left.netns.length > 0 && left.processes.length > 0, 'the killed lab left its nodes (containers outlive it)');
    const down = spawn(node, [join(REPO_ROOT, 'dist/hack/lab.js'), 'down'], { stdio: 'inherit' });
    const [code] = (await once(down, 'exit')) as [number];
    assert.equal(code, 0);
    assert.deepEqual(await Cluster.leftovers(), { netns: [], mounts: [], cgroups: [], processes: [], dir: false });
  });
});
