/**
 * Upgrading coil from the previous release on the real-node lab, as README "Upgrade" says: the
 * previous release (CHANGELOG.md: 0.1.0, commit 5370986) is built from its commit with its own
 * hack/build-image.sh (hack/lab/release-build.ts, cached by commit), its image imported into the
 * nodes and its chart installed; pods run on both nodes and an Egress exists; then the CRDs are
 * adopted with README's commands and `helm upgrade --reset-then-reuse-values` installs this tree's
 * chart and image. Every pod keeps its UID, its address and its node, none restarts or is evicted,
 * pods still reach each other across nodes, and `spec.snatAddresses` — new in 0.2.0, silently
 * dropped by 0.1.0's CRD — is stored and served after the upgrade.
 *
 * The lab runs the oldest Kubernetes coil supports unless `$COIL_KUBERNETES` says otherwise, on
 * containerd 1.6 unless `$COIL_LAB_CONTAINERD` says otherwise: an older cluster is the one being
 * upgraded, and so CI's one run of this file is also its real-node e2e on the other end of the
 * Kubernetes range and on the other runtime (docs/real-nodes.md#kubernetes-versions-and-runtimes-in-ci).
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, test } from 'node:test';
import * as k8s from '@kubernetes/client-node';
import { Cluster, POD_RANGE, RELEASE_NAMESPACE, type Leftovers } from '../../hack/lab/cluster.js';
import { buildRelease, type ReleaseBuild } from '../../hack/lab/release-build.js';
import { REPO_ROOT, eventually, kubernetesReleases, kubernetesVersion } from '../envtest/control-plane.js';
import { toolPath } from '../envtest/tools.js';
import { prerequisite } from '../support/prerequisite.js';
import { cidrContainsAddress, parseAddress, parseCidr } from '../../src/ipam/cidr.js';

const run = promisify(execFile);
const isRoot = process.getuid?.() === 0;
/** The previous release's commit (CHANGELOG.md). */
const PREVIOUS = '537098695aef8d0768370354fd6076bc3e6ba8c8';
const NS = 'upgrade';
const EGRESS_NS = 'upgrade-egress';
/** A shared SNAT address for the Egress (TEST-NET-1: documentation, routed nowhere). */
const SNAT = '192.0.2.10';

type PodState = { uid: string; node: string; ips: string[]; restarts: number };
type Egress = { spec: { destinations: string[]; snatAddresses?: string[] } };

describe('upgrade from the previous release on the real-node lab (e2e)', { skip: prerequisite(isRoot ? undefined : 'the lab needs root (namespaces, cgroups, mounts)') }, () => {
  let cluster: Cluster;
  let previous: ReleaseBuild;
  let stopped = false;
  const log = (m: string) => console.log(`upgrade: ${m}`);

  before(async () => {
    previous = await buildRelease(PREVIOUS, log);
    const kubernetes = kubernetesVersion() ?? kubernetesReleases().at(-1)!;
    const containerd = process.env.COIL_LAB_CONTAINERD ? undefined : '1.6';
    log(`Kubernetes ${kubernetes}, containerd ${containerd ?? process.env.COIL_LAB_CONTAINERD}`);
    cluster = await Cluster.up({ nodes: 2, installChart: false, log, kubernetes, ...(containerd ? { containerd } : {}) });
    for (const node of cluster.nodes) await node.importImage(previous.image.archive, previous.image.ref);
    await cluster.installCoil([], { chart: previous.chart });
  });
  after(async () => {
    if (!stopped) await cluster?.stop();
  });

  const core = () => cluster.api(k8s.CoreV1Api);
  const workload = async (): Promise<Map<string, PodState>> =>
    new Map((await core().listNamespacedPod({ namespace: NS })).items.map((p) => [p.metadata!.name!, {
      uid: p.metadata!.uid!, node: p.spec!.nodeName!, ips: (p.status?.podIPs ?? []).map((a) => a.ip).sort(),
      restarts: (p.status?.containerStatuses ?? []).reduce((n, c) => n + c.restartCount, 0),
    }]));
  const egress = async (): Promise<Egress> => JSON.parse(await cluster.kubectl(['get', 'egress', '-n', EGRESS_NS, 'nat', '-o', 'json'])) as Egress;
  /** Every client pings every other node's client, at each of its addresses (IPv4 and IPv6). */
  const crossNodePings = async (): Promise<number> => {
    const clients = await cluster.waitForPods(NS, 'app=client', cluster.nodes.length);
    let pings = 0;
    for (const from of clients) {
      for (const to of clients.filter((p) => p.spec?.nodeName !== from.spec?.nodeName)) {
        for (const address of (to.status?.podIPs ?? []).map((a) => a.ip)) {
          await cluster.waitForBgpRoute(from.spec!.nodeName!, address);
          assert.ok(await cluster.ping(NS, from.metadata!.name!, address), `${from.metadata?.name} (${from.spec?.nodeName}) -> ${to.metadata?.name} ${address}`);
          pings++;
        }
      }
    }
    return pings;
  };
  let before_: Map<string, PodState>;

  test(`the previous release runs: its image on every node, pods with addresses from coil on both nodes, an Egress`, async () => {
    assert.equal(previous.version, '0.1.0');
    const system = (await core().listNamespacedPod({ namespace: RELEASE_NAMESPACE, labelSelector: 'app.kubernetes.io/name=coil' })).items;
    assert.ok(system.length >= 3, `coil-controller and coild run (${system.map((p) => p.metadata?.name).join(', ')})`);
    for (const p of system) assert.equal(p.spec?.containers[0]?.image, previous.image.ref, `${p.metadata?.name} runs ${previous.image.ref}`);

    await cluster.applyWorkload(NS, 'web', 4);
    for (const node of cluster.nodes) await cluster.createPod(NS, `client-${node.name}`, { nodeName: node.name, labels: { app: 'client' } });
    await cluster.waitForPods(NS, 'app=web', 4);
    await cluster.waitForPods(NS, 'app=client', cluster.nodes.length);
    await cluster.kubectl(['apply', '-f', '-'], [
      JSON.stringify({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: EGRESS_NS } }),
      JSON.stringify({ apiVersion: 'coil.cybozu.com/v2', kind: 'Egress', metadata: { name: 'nat', namespace: EGRESS_NS }, spec: { replicas: 1, destinations: ['0.0.0.0/0'] } }),
    ].join('\n'));
    // What the issue found: under 0.1.0's CRD the API server drops the new field without an error
    // for a client that does not ask for strict field validation (kubectl asks, and is refused).
    await cluster.kubectl(['apply', '--validate=ignore', '-f', '-'], JSON.stringify({
      apiVersion: 'coil.cybozu.com/v2', kind: 'Egress', metadata: { name: 'nat', namespace: EGRESS_NS },
      spec: { replicas: 1, destinations: ['0.0.0.0/0'], snatAddresses: [SNAT] },
    }));
    assert.equal((await egress()).spec.snatAddresses, undefined, "0.1.0's CRD prunes spec.snatAddresses");

    before_ = await workload();
    assert.equal(before_.size, 4 + cluster.nodes.length);
    for (const [name, p] of before_) assert.ok(p.ips.some((ip) => !ip.includes(':') && cidrContainsAddress(parseCidr(POD_RANGE), parseAddress(ip))), `${name} has an address of the pool: ${p.ips.join(' ')}`);
    assert.equal(new Set([...before_.values()].map((p) => p.node)).size, cluster.nodes.length, 'pods on every node');
    log(`before: ${await crossNodePings()} cross-node pings answered`);
  });

  test("helm upgrade to this tree's chart and image after README's CRD adoption: pods keep UID, address and node, none restarts or is evicted, and spec.snatAddresses is stored and served", async () => {
    const current = [...cluster.images.values()].find((i) => i.ref.startsWith('ghcr.io/coil-ts/coil:'))!;
    assert.notEqual(current.ref, previous.image.ref, 'the release number moved on');
    // Nodes NotReady or tainted NoExecute while coild restarts, recorded every second.
    const seen = new Set<string>();
    let watching = true;
    const watcher = (async () => {
      while (watching) {
        for (const n of (await core().listNode().catch(() => ({ items: [] as k8s.V1Node[] }))).items) {
          const ready = n.status?.conditions?.find((c) => c.type === 'Ready');
          if (ready?.status !== 'True') seen.add(`${n.metadata?.name} Ready=${ready?.status}: ${ready?.message ?? ''}`);
          for (const t of n.spec?.taints ?? []) if (t.effect === 'NoExecute') seen.add(`${n.metadata?.name} taint ${t.key}:NoExecute`);
        }
        await new Promise((r) => setTimeout(r, 1000));
      }
    })();
    try {
      const readme = await readFile(join(REPO_ROOT, 'README.md'), 'utf8');
      const adopt = /\*\*From 0\.1\.0[\s\S]*?```sh\n([\s\S]*?)```/.exec(readme)?.[1];
      assert.ok(adopt?.includes('kubectl label crd'), "README's adoption commands");
      await run('bash', ['-euo', 'pipefail', '-c', adopt!], { env: { ...process.env, KUBECONFIG: cluster.cp.kubeconfigPath, PATH: `${dirname(await toolPath('kubectl'))}:${process.env.PATH}` } });
      await cluster.upgradeChart();
      await cluster.waitRollout('deployment/coil-controller');
      await cluster.waitRollout('daemonset/coild');
      await cluster.waitNodesReady();
    } finally {
      watching = false;
      await watcher;
    }
    log(`while upgrading: ${seen.size === 0 ? 'every node Ready, no NoExecute taint' : [...seen].join('; ')}`);

    const system = (await core().listNamespacedPod({ namespace: RELEASE_NAMESPACE, labelSelector: 'app.kubernetes.io/name=coil' })).items.filter((p) => !p.metadata?.deletionTimestamp);
    for (const p of system) assert.equal(p.spec?.containers[0]?.image, current.ref, `${p.metadata?.name} runs ${current.ref}`);
    assert.deepEqual(await workload(), before_, 'every pod: same UID, node and addresses, no restart');
    const evictions = (await core().listNamespacedEvent({ namespace: NS })).items.filter((e) => /Evict|Preempt|TaintManager/.test(e.reason ?? ''));
    assert.deepEqual(evictions.map((e) => `${e.reason}: ${e.message}`), [], 'no eviction');
    log(`after: ${await crossNodePings()} cross-node pings answered`);
    for (const node of cluster.nodes) {
      const ipam = JSON.parse(await cluster.coildIpam(node.name)) as { allocations: { ipv4?: string }[] };
      for (const [name, p] of before_) if (p.node === node.name) assert.ok(ipam.allocations.some((a) => p.ips.includes(a.ipv4 ?? '')), `the new coild on ${node.name} holds ${name}'s ${p.ips.join(' ')}`);
    }

    // The new field: accepted with kubectl's strict validation, stored, served, and passed on.
    await cluster.kubectl(['patch', 'egress', '-n', EGRESS_NS, 'nat', '--type=merge', '-p', JSON.stringify({ spec: { snatAddresses: [SNAT] } })]);
    assert.deepEqual((await egress()).spec.snatAddresses, [SNAT], 'spec.snatAddresses stored and served');
    await eventually(async () => {
      const d = await cluster.api(k8s.AppsV1Api).readNamespacedDeployment({ name: 'nat', namespace: EGRESS_NS });
      return (d.spec?.template.spec?.containers[0]?.args ?? []).includes(`--snat-addresses=${SNAT}`);
    }, { timeoutMs: 60_000, intervalMs: 500 });
  });

  test('stopping the lab leaves no namespace, mount, cgroup, process or file behind', async () => {
    stopped = true;
    await cluster.stop();
    const left: Leftovers = await Cluster.leftovers({ prefix: cluster.prefix, dir: cluster.dir });
    assert.deepEqual(left, { netns: [], mounts: [], cgroups: [], processes: [], dir: false });
  });
});
