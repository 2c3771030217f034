/**
 * CNI 1.1 as the container runtimes call it, on the real-node lab (hack/lab/cluster.ts) with
 * kubelet: which CNI commands containerd 2 sends to `coil` with the chart's default conflist
 * (cniVersion 1.1.0), the node's network readiness following coild (containerd's CRI Status →
 * kubelet's NetworkReady → the Node's Ready condition), the node lifecycle controller's taints
 * against coild's tolerations while coild is away, an attachment whose sandbox went without a DEL
 * freed by coild's own GC (containerd never sends CNI GC), and containerd 1.6 with both conflist
 * versions. What containerd's source says about each call is in docs/real-nodes.md#cni-11-on-containerd-2.
 */
import assert from 'node:assert/strict';
import { readdir, readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import * as k8s from '@kubernetes/client-node';
import { Cluster, RELEASE_NAMESPACE } from '../../hack/lab/cluster.js';
import type { KubeNode } from '../../hack/lab/kube-node.js';
import { eventually } from '../envtest/control-plane.js';
import { prerequisite } from '../support/prerequisite.js';
import { tolerates } from '../support/tolerations.js';

const isRoot = process.getuid?.() === 0;
const NS = 'e2e-cni';
/** The label that takes coild off a node (the DaemonSet's node affinity, patched in by the test). */
const NO_COILD = 'e2e.coil/no-coild';

/** The values of coild's `grpc_server_handled_total` by method and code (`Status/OK` → 12). */
function handledCounts(metrics: string): Map<string, number> {
  const counts = new Map<string, number>();
  for (const line of metrics.split('\n')) {
    const m = /^grpc_server_handled_total\{([^}]*)\} (\S+)$/.exec(line);
    if (!m) continue;
    const labels = Object.fromEntries([...m[1]!.matchAll(/(\w+)="([^"]*)"/g)].map((l) => [l[1], l[2]]));
    const key = `${labels.grpc_method}/${labels.grpc_code}`;
    counts.set(key, (counts.get(key) ?? 0) + Number(m[2]));
  }
  return counts;
}

const sum = (counts: Map<string, number>, method: string) => [...counts].filter(([k]) => k.startsWith(`${method}/`)).reduce((n, [, v]) => n + v, 0);

describe('CNI 1.1 on containerd 2 (e2e, real nodes)', { skip: prerequisite(isRoot ? undefined : 'the lab needs root (namespaces, cgroups, mounts)') }, () => {
  let cluster: Cluster;

  before(async () => {
    // coild's own GC every 10 s (default 5 min), so the test sees it free an address in seconds.
    cluster = await Cluster.up({ nodes: 2, containerd: '2', chartValues: ['coild.addressBlockGCInterval=10s'], log: (m) => console.log(`lab: ${m}`) });
  });
  after(async () => {
    await cluster?.stop();
  });

  const core = () => cluster.api(k8s.CoreV1Api);
  const nodeObject = (name: string) => core().readNode({ name });
  const readyCondition = async (name: string) => (await nodeObject(name)).status?.conditions?.find((c) => c.type === 'Ready');
  const coildPod = async (node: string) => (await core().listNamespacedPod({ namespace: RELEASE_NAMESPACE, labelSelector: 'app.kubernetes.io/component=coild', fieldSelector: `spec.nodeName=${node}` })).items;

  /** coild's gRPC metrics on `node` (https :9384 with the chart's coil-metrics-reader token). */
  let metricsToken: string | undefined;
  const coildMetrics = async (node: KubeNode): Promise<Map<string, number>> => {
    metricsToken ??= (await cluster.kubectl(['create', 'token', 'coil-metrics-reader', '-n', RELEASE_NAMESPACE, '--duration=1h'])).trim();
    const body = await node.http('127.0.0.1', 9384, '/metrics', metricsToken);
    assert.match(body, /grpc_server_handled_total/, `${node.name}: coild's metrics`);
    return handledCounts(body);
  };

  test('the chart writes a cniVersion 1.1.0 conflist, and containerd 2 sends coil STATUS for its runtime Status (kubelet asks every 5 s)', async () => {
    for (const node of cluster.nodes) {
      const conflist = JSON.parse(await readFile(node.host.hostPath('/etc/cni/net.d/10-coil.conflist'), 'utf8')) as { cniVersion: string };
      assert.equal(conflist.cniVersion, '1.1.0', node.name);
      // Each STATUS reaches coild as one gRPC Status call: the count grows while kubelet polls.
      const first = sum(await coildMetrics(node), 'Status');
      const later = await eventually(async () => {
        const n = sum(await coildMetrics(node), 'Status');
        return n > first ? n : false;
      }, { timeoutMs: 30_000, intervalMs: 2000 });
      assert.ok(later > first, `${node.name}: Status calls ${first} → ${later}`);
      assert.equal((await readyCondition(node.name))?.status, 'True', `${node.name} Ready`);
    }
  });

  test("a node whose coild is gone turns NotReady with coil's STATUS message, its pods stay (coild tolerates the lifecycle controller's taints), and it is Ready again once coild serves", async () => {
    const [, node] = cluster.nodes;
    assert.ok(node, 'two nodes');
    await cluster.applyWorkload(NS, 'stay', 2, { nodeName: node.name });
    const before = await cluster.waitForPods(NS, 'app=stay', 2);

    // coild off the node through the DaemonSet's node affinity (a label on the node), as an
    // admin's nodeSelector would; the patch itself rolls coild on every node once.
    await cluster.kubectl(['patch', 'daemonset', 'coild', '-n', RELEASE_NAMESPACE, '--type=merge', '-p', JSON.stringify({
      spec: { template: { spec: { affinity: { nodeAffinity: { requiredDuringSchedulingIgnoredDuringExecution: { nodeSelectorTerms: [{ matchExpressions: [{ key: NO_COILD, operator: 'DoesNotExist' }] }] } } } } } },
    })]);
    await cluster.waitRollout('daemonset/coild');
    await cluster.waitNodesReady();
    await cluster.kubectl(['label', 'node', node.name, `${NO_COILD}=true`]);
    await eventually(async () => (await coildPod(node.name)).length === 0, { timeoutMs: 90_000, intervalMs: 500 });

    // kubelet reads containerd's NetworkReady every 5 s and posts a changed Ready condition.
    const notReady = await eventually(async () => {
      const c = await readyCondition(node.name);
      return c?.status === 'False' ? c : false;
    }, { timeoutMs: 90_000, intervalMs: 500 });
    console.log(`${node.name} Ready=False: ${notReady.reason}: ${notReady.message}`);
    assert.match(notReady.message ?? '', /NetworkReady=false/);
    // containerd's CRI Status: "Network plugin returns error: <the plugin's CNI error message>".
    assert.match(notReady.message ?? '', /reason:NetworkPluginNotReady message:Network plugin returns error: cannot reach coild at \/run\/coild\.sock/, "coil's own message");

    // The node lifecycle controller taints the NotReady node; coild's pod tolerates every taint
    // (so it is scheduled there and never evicted while the node is NotReady).
    const taints = await eventually(async () => {
      const t = (await nodeObject(node.name)).spec?.taints ?? [];
      return t.some((x) => x.key === 'node.kubernetes.io/not-ready' && x.effect === 'NoExecute') ? t : false;
    }, { timeoutMs: 60_000, intervalMs: 500 });
    console.log(`${node.name} taints: ${taints.map((t) => `${t.key}:${t.effect}`).join(', ')}`);
    const ds = await cluster.api(k8s.AppsV1Api).readNamespacedDaemonSet({ name: 'coild', namespace: RELEASE_NAMESPACE });
    const tolerations = ds.spec?.template.spec?.tolerations ?? [];
    for (const taint of taints) assert.ok(tolerations.some((t) => tolerates(t, taint)), `coild tolerates ${taint.key}:${taint.effect}`);

    // coild back: the node is Ready again, its taints go, and its pods were never touched.
    await cluster.kubectl(['label', 'node', node.name, `${NO_COILD}-`]);
    await eventually(async () => (await readyCondition(node.name))?.status === 'True', { timeoutMs: 180_000, intervalMs: 500 });
    await eventually(async () => !((await nodeObject(node.name)).spec?.taints ?? []).some((t) => t.key.startsWith('node.kubernetes.io/not-ready')), { timeoutMs: 60_000, intervalMs: 500 });
    const after = await cluster.waitForPods(NS, 'app=stay', 2);
    assert.deepEqual(after.map((p) => [p.metadata?.uid, p.status?.podIPs]), before.map((p) => [p.metadata?.uid, p.status?.podIPs]), 'the same pods, with the same addresses');
    for (const p of after) assert.equal(p.status?.containerStatuses?.[0]?.restartCount, 0, `${p.metadata?.name} not restarted`);
    // The taint eviction controller armed each pod's 300 s eviction when the NoExecute taint came
    // and cancelled it when the taint went ("Cancelling deletion"); "Marking for deletion" would
    // mean the pod was evicted.
    const evictions = (await core().listNamespacedEvent({ namespace: NS })).items.filter((e) => e.reason === 'TaintManagerEviction').map((e) => e.message ?? '');
    console.log(`taint eviction events: ${evictions.join('; ') || 'none'}`);
    assert.deepEqual(evictions.filter((m) => !m.startsWith('Cancelling deletion')), [], 'no eviction');
    assert.equal(await cluster.ping(NS, after[0]!.metadata!.name!, after[1]!.status!.podIP!), true, 'the pods still reach each other');

    await cluster.kubectl(['patch', 'daemonset', 'coild', '-n', RELEASE_NAMESPACE, '--type=json', '-p', '[{"op":"remove","path":"/spec/template/spec/affinity"}]']);
    await cluster.waitRollout('daemonset/coild');
  });

  test('containerd sends DEL with the cached result (prevResult) when a pod goes, and coild frees its address; it never sends CHECK or GC', async () => {
    const node = cluster.nodes[0]!;
    await cluster.createPod(NS, 'gone', { nodeName: node.name });
    const [pod] = await cluster.waitForPods(NS, 'app=gone', 1);
    const before = await coildMetrics(node);
    // libcni keeps ADD's result in its cache (/var/lib/cni/results/<network>-<sandbox id>-<ifname>)
    // and sends it as DEL's prevResult; the DEL removes the entry.
    const cacheDir = node.host.hostPath('/var/lib/cni/results');
    const podIps = pod!.status?.podIPs?.map((p) => p.ip) ?? [];
    let entry = '';
    for (const f of (await readdir(cacheDir)).filter((n) => n.startsWith('k8s-pod-network-'))) {
      const cached = JSON.parse(await readFile(join(cacheDir, f), 'utf8')) as { result?: { cniVersion?: string; ips?: { address: string }[] } };
      if (JSON.stringify(cached.result?.ips?.map((i) => i.address.split('/')[0])) !== JSON.stringify(podIps)) continue;
      assert.equal(cached.result?.cniVersion, '1.1.0', f);
      entry = f;
    }
    assert.ok(entry, `libcni's cached result for ${podIps.join(' ')} in ${cacheDir}`);
    await cluster.kubectl(['delete', 'pod', '-n', NS, 'gone', '--wait=true', '--timeout=60s']);
    const addresses = new Set(pod!.status?.podIPs?.map((p) => p.ip));
    await eventually(async () => {
      const allocs = (JSON.parse(await cluster.coildIpam(node.name)) as { allocations: { ipv4?: string; ipv6?: string }[] }).allocations;
      return !allocs.some((a) => addresses.has(a.ipv4 ?? '') || addresses.has(a.ipv6 ?? ''));
    }, { timeoutMs: 60_000, intervalMs: 500 });
    const afterDel = await coildMetrics(node);
    assert.ok((afterDel.get('Del/OK') ?? 0) > (before.get('Del/OK') ?? 0), 'a DEL reached coild and succeeded');
    for (const n of cluster.nodes) {
      const m = await coildMetrics(n);
      assert.equal(sum(m, 'Check'), 0, `${n.name}: no CHECK from containerd`);
      assert.equal(sum(m, 'GC'), 0, `${n.name}: no GC from containerd`);
    }

    await assert.rejects(stat(join(cacheDir, entry)), /ENOENT/, "the DEL removed libcni's cache entry");
  });

  test("an attachment whose sandbox went without a DEL (its netns gone) is freed by coild's own GC, since containerd sends no CNI GC", async () => {
    const node = cluster.nodes[0]!;
    // A CNI ADD no runtime will DEL: `coil` called in the node with the test's own netns, for a
    // Pod that is deleted afterwards (what a runtime that lost a sandbox leaves).
    const name = 'lost';
    await cluster.kubectl(['apply', '-f', '-'], JSON.stringify({
      apiVersion: 'v1', kind: 'Pod', metadata: { name, namespace: NS },
      spec: { nodeSelector: { 'e2e.coil/none': 'none' }, containers: [{ name: 'main', image: 'coil.local/busybox:1' }] },
    }));
    const containerId = 'e2e-lost-sandbox';
    const conflist = JSON.parse(await readFile(node.host.hostPath('/etc/cni/net.d/10-coil.conflist'), 'utf8')) as { cniVersion: string; name: string; plugins: Record<string, unknown>[] };
    await writeFile(node.host.hostPath(`/run/${containerId}.json`), JSON.stringify({ cniVersion: conflist.cniVersion, name: conflist.name, ...conflist.plugins.find((p) => p.type === 'coil') }));
    await node.host.exec(['ip', 'netns', 'add', containerId]);
    try {
      const out = await node.host.exec(['env', 'CNI_COMMAND=ADD', `CNI_CONTAINERID=${containerId}`, `CNI_NETNS=/run/netns/${containerId}`, 'CNI_IFNAME=eth0', 'CNI_PATH=/opt/cni/bin',
        `CNI_ARGS=K8S_POD_NAMESPACE=${NS};K8S_POD_NAME=${name};K8S_POD_INFRA_CONTAINER_ID=${containerId}`, 'sh', '-c', `/opt/cni/bin/coil < /run/${containerId}.json`]);
      const addresses = ((JSON.parse(out) as { ips?: { address: string }[] }).ips ?? []).map((i) => i.address.split('/')[0]!);
      assert.ok(addresses.length > 0, out);
      await cluster.kubectl(['delete', 'pod', '-n', NS, name, '--wait=true', '--timeout=60s']);
      const held = async () => (JSON.parse(await cluster.coildIpam(node.name)) as { allocations: { containerId?: string }[] }).allocations.some((a) => a.containerId === containerId);
      assert.equal(await held(), true, 'coild holds the attachment');
      // The sandbox goes without a DEL: its netns is removed, and the kernel takes the veth with it.
      await node.host.exec(['ip', 'netns', 'del', containerId]);
      await eventually(async () => !(await held()), { timeoutMs: 60_000, intervalMs: 1000 });
    } finally {
      await node.host.exec(['ip', 'netns', 'del', containerId]).catch(() => undefined);
    }
  });
});

describe('containerd 1.6 and the conflist version (e2e, real nodes)', { skip: prerequisite(isRoot ? undefined : 'the lab needs root (namespaces, cgroups, mounts)') }, () => {
  let cluster: Cluster;

  before(async () => {
    cluster = await Cluster.up({ nodes: 1, containerd: '1.6', installChart: false, log: (m) => console.log(`lab: ${m}`) });
  });
  after(async () => {
    await cluster?.stop();
  });

  test("containerd 1.6's libcni refuses a cniVersion 1.1.0 conflist's pods; the chart's 1.0.0 setting serves them", async () => {
    const node = cluster.nodes[0]!;
    // The chart's default (1.1.0), which the lab's 1.6 values would have replaced.
    await cluster.installCoil(['cni.netconf.cniVersion=1.1.0']);
    await cluster.createPod(NS, 'p');
    const failure = await eventually(async () => {
      const events = (await cluster.api(k8s.CoreV1Api).listNamespacedEvent({ namespace: NS })).items;
      return events.find((e) => e.reason === 'FailedCreatePodSandBox') ?? false;
    }, { timeoutMs: 120_000, intervalMs: 1000 });
    console.log(`containerd 1.6 with a 1.1.0 conflist: ${failure.message}`);
    // libcni 1.1.2 (Debian's containerd 1.6.20) knows results up to 1.0.0: coil's ADD ran, and its
    // 1.1.0 result is refused; containerd then tears the sandbox's network down (DEL).
    assert.match(failure.message ?? '', /plugin type="coil" failed \(add\): unsupported CNI result version "1\.1\.0"/);
    await cluster.upgradeChart(['cni.netconf.cniVersion=1.0.0']);
    const conflist = JSON.parse(await readFile(node.host.hostPath('/etc/cni/net.d/10-coil.conflist'), 'utf8')) as { cniVersion: string };
    assert.equal(conflist.cniVersion, '1.0.0');
    const [pod] = await cluster.waitForPods(NS, 'app=p', 1, 240_000);
    assert.ok(pod?.status?.podIP, 'the pod runs with a coil address');
    // The refused ADDs' addresses were freed by their DELs: no allocation without its pod.
    assert.deepEqual(await cluster.check(), []);
  });
});
