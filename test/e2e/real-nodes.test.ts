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
import { Cluster, POD_RANGE, type Leftovers } from '../../hack/lab/cluster.js';
import { eventually, REPO_ROOT } from '../envtest/control-plane.js';
import { prerequisite } from '../support/prerequisite.js';

const isRoot = process.getuid?.() === 0;
const NS = 'e2e';

type Block = { metadata: { name: string; labels: Record<string, string> }; ipv4?: string };

/** True when IPv4 `address` is inside `cidr` (pure). */
function inCidr(address: string, cidr: string): boolean {
  const toInt = (a: string) => a.split('.').reduce((n, o) => n * 256 + Number(o), 0);
  const [base, bits] = cidr.split('/');
  const size = 2 ** (32 - Number(bits));
  return Math.floor(toInt(address) / size) === Math.floor(toInt(base!) / size);
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

  test('a pod reaches the apiserver through the kubernetes Service (kube-proxy, the nodes\' relays)', async () => {
    const [client] = await cluster.waitForPods(NS, 'app=client', 3);
    const out = await cluster.exec(NS, client!.metadata!.name!, ['sh', '-c', 'nc -w 3 10.0.0.1 443 </dev/null && echo connected']);
    assert.match(out, /connected/);
  });

  test('deleting a pod releases its address through CNI DEL (coild no longer lists it)', async () => {
    const [victim] = await cluster.waitForPods(NS, 'app=web', 6);
    const name = victim!.metadata!.name!;
    const node = cluster.node(victim!.spec!.nodeName!);
    const listed = async () => (await node.http('127.0.0.1', 9385, '/ipam')).includes(name);
    assert.ok(await listed(), `coild on ${node.name} lists ${name}`);
    await cluster.api(k8s.CoreV1Api).deleteNamespacedPod({ name, namespace: NS });
    await eventually(async () => !(await listed()), { timeoutMs: 60_000, intervalMs: 500 });
    await cluster.waitForPods(NS, 'app=web', 6);
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
