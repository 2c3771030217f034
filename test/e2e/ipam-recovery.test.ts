/**
 * Issue 25 on the real nodes (hack/lab/cluster.ts, dual stack): AddressBlocks lost while pods use
 * them, and what the admin's tool says about it. One lab for the suite; each scenario runs in its
 * own namespace (and pool), and cleans up after itself so the next starts from a working cluster.
 *
 * - the scenario of the issue's "Why", as a new user ran it from README: pods running (Deployment
 *   `web` over the nodes and a client), `helm uninstall coil --wait`, every AddressBlock and
 *   AddressPool deleted, the chart installed again (no --wait), `web` scaled up;
 * - variant (a): a block removed with its finalizer while pods use it (`kubectl delete`, then the
 *   finalizer stripped, as an admin does when a delete hangs);
 * - variant (b): an etcd restored from a backup older than some AddressBlocks, simulated (see
 *   that test) by deleting, with the apiserver stopped, every coil object etcd created after the
 *   "backup" revision (taken when a pool exists and none of its blocks), and starting the
 *   apiserver again;
 * - variant (c), issue 33: dual-stack pods, the uninstall and clean-up, the chart installed again
 *   with an IPv4-only default pool (the README's first example): the pods' IPv6 addresses, which
 *   no block holds any more, stay routed and `ipam check` names each (exit 3); then the dual-stack
 *   pool restored the same way, and check is clean.
 *
 * Each ends with the same checks: every pod that ran before the fault, and every pod started after
 * it, is Ready with an IPv4 and an IPv6 address and reaches a pod on another node (ping from
 * inside it, each family), no two Pods hold one address (from the API), and `kubectl coil ipam
 * check` finds nothing. Then `kubectl coil ipam check`/`release` on a leak made on purpose, and on
 * a report older than a change in the cluster (release exits 3 and names the Pod that holds the
 * address now).
 *
 * `kubectl coil` is `dist/src/kubectl-coil/main.js`, built with the rest by `npm run build`.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, test, type TestContext } from 'node:test';
import * as k8s from '@kubernetes/client-node';
import { Cluster, type Leftovers } from '../../hack/lab/cluster.js';
import type { KubeNode } from '../../hack/lab/kube-node.js';
import { eventually, REPO_ROOT } from '../envtest/control-plane.js';
import { prerequisite } from '../support/prerequisite.js';
import { cidrContainsAddress, parseAddress, parseCidr } from '../../src/ipam/cidr.js';

const run = promisify(execFile);
const isRoot = process.getuid?.() === 0;

/** The admin's tool (issue 25, item 3), built by the project. */
const KUBECTL_COIL = join(REPO_ROOT, 'dist/src/kubectl-coil/main.js');

type Block = { metadata: { name: string; uid?: string; labels: Record<string, string>; finalizers?: string[] }; index: number; ipv4?: string; ipv6?: string };

/** What a scenario left: the checks every scenario ends with. */
interface Assessment {
  /** Pods that ran before the fault. */
  readonly pods: number;
  /** `<pod> (<node>) IPv4|IPv6 <address>`: no pod on another node answers its ping. */
  readonly cutOff: string[];
  /** Pods that ran before the fault and are gone or no longer Running. */
  readonly lost: string[];
  /** `<address>: <pod>, <pod>`: one address held by more than one Pod. */
  readonly duplicates: string[];
}

describe('IPAM recovery on the real nodes (issue 25): blocks lost under running pods', { skip: prerequisite(isRoot ? undefined : 'the lab needs root (namespaces, cgroups, mounts)') }, () => {
  let cluster: Cluster;
  let stopped = false;
  const started = performance.now();

  before(async () => {
    cluster = await Cluster.up({ nodes: 3, dualStack: true, log: (m) => console.log(`lab: ${m} (${((performance.now() - started) / 1000).toFixed(1)} s)`) });
  });
  after(async () => {
    if (!stopped) await cluster?.stop();
  });

  const core = () => cluster.api(k8s.CoreV1Api);
  const custom = () => cluster.api(k8s.CustomObjectsApi);
  const blocks = async (pool?: string): Promise<Block[]> =>
    ((await custom().listClusterCustomObject({ group: 'coil.cybozu.com', version: 'v2', plural: 'addressblocks', ...(pool ? { labelSelector: `coil.cybozu.com/pool=${pool}` } : {}) })) as { items: Block[] }).items;
  const addresses = (pod: k8s.V1Pod): string[] => (pod.status?.podIPs ?? []).map((a) => a.ip);
  const family = (address: string): 'IPv4' | 'IPv6' => (address.includes(':') ? 'IPv6' : 'IPv4');

  /**
   * `read` once the API server serves it after a restart. /readyz waits for the watch caches of
   * built-in resources only (KEP-4568, resilient watch cache initialization): until a custom
   * resource's cache is filled, its lists answer 429 "storage is (re)initializing", and
   * @kubernetes/client-node, unlike kubectl (client-go), does not retry a 429. Only that answer is
   * retried, every 500 ms for up to 60 s; any other error is thrown at once.
   */
  const whileInitializing = async <T>(read: () => Promise<T>): Promise<T> => {
    const deadline = Date.now() + 60_000;
    for (;;) {
      try {
        return await read();
      } catch (err) {
        if (!(err instanceof k8s.ApiException && err.code === 429) || Date.now() > deadline) throw err;
        console.log(`the API server answered 429 after its restart, retrying: ${String(err).split('\n')[0]}`);
      }
      await new Promise((r) => setTimeout(r, 500));
    }
  };

  /**
   * An AddressPool of 2-address blocks (so a few pods per node need a second block) and a
   * namespace that uses it; `n` picks 10.12n.0.0/24 and fd00:10:12n::/120 (both 8 host bits).
   */
  const poolNamespace = async (pool: string, namespace: string, n: number): Promise<void> => {
    await cluster.kubectl(['apply', '-f', '-'], [
      JSON.stringify({ apiVersion: 'coil.cybozu.com/v2', kind: 'AddressPool', metadata: { name: pool }, spec: { blockSizeBits: 1, subnets: [{ ipv4: `10.12${n}.0.0/24`, ipv6: `fd00:10:12${n}::/120` }] } }),
      JSON.stringify({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: namespace } }),
    ].join('\n'));
    // Not in the applied object: createPod applies the Namespace again, and `kubectl apply`
    // would remove an annotation its previous apply set.
    await cluster.kubectl(['annotate', '--overwrite', 'namespace', namespace, `coil.cybozu.com/pool=${pool}`]);
  };

  /** Bare pods `names` on `node` in `namespace` (label app=`app`), Ready with addresses; resolves with them. */
  const podsOn = async (namespace: string, node: KubeNode, names: readonly string[], app: string, timeoutMs?: number): Promise<k8s.V1Pod[]> => {
    for (const name of names) await cluster.createPod(namespace, name, { nodeName: node.name, labels: { app, 'e2e/pod': name } });
    return (await Promise.all(names.map((name) => cluster.waitForPods(namespace, `e2e/pod=${name}`, 1, timeoutMs)))).flat();
  };

  /** Pods started after a fault: each Ready (waitForPods) with an IPv4 and an IPv6 address (the lab is dual stack). */
  const assertDualStack = (label: string, pods: readonly k8s.V1Pod[]): void => {
    assert.ok(pods.length > 0, `${label}: pods were started after the fault`);
    for (const p of pods) {
      assert.deepEqual(addresses(p).map(family).sort(), ['IPv4', 'IPv6'], `${label}: ${p.metadata!.namespace}/${p.metadata!.name} on ${p.spec!.nodeName} has one address of each family (${addresses(p).join(' ')})`);
    }
  };

  const running = async (namespace: string, selector: string): Promise<k8s.V1Pod[]> =>
    (await core().listNamespacedPod({ namespace, labelSelector: selector })).items.filter((p) => !p.metadata?.deletionTimestamp && p.status?.phase === 'Running');

  /**
   * The checks. Reachability: each pod of `pre` (those that ran before the fault, and those
   * started after it), each of its addresses: a ping from inside it (kubectl exec) to the same
   * family's address of another pod of `pre` on each other node, one answer enough (so a pod is
   * not blamed for its peer being cut off). Pings that fail are tried again until `settleMs` has
   * passed (routes converge, a block is claimed back).
   */
  const assess = async (label: string, pre: readonly k8s.V1Pod[], settleMs = 45_000): Promise<Assessment> => {
    const now = new Map((await core().listPodForAllNamespaces()).items.map((p) => [p.metadata!.uid!, p]));
    const lost = pre.filter((p) => now.get(p.metadata!.uid!)?.status?.phase !== 'Running' || now.get(p.metadata!.uid!)?.metadata?.deletionTimestamp)
      .map((p) => `${p.metadata!.namespace}/${p.metadata!.name}`);
    const alive = pre.filter((p) => !lost.includes(`${p.metadata!.namespace}/${p.metadata!.name}`));
    type Probe = { from: k8s.V1Pod; address: string; targets: string[] };
    const probes: Probe[] = [];
    for (const from of alive) {
      for (const address of addresses(from)) {
        const targets = [...new Set(alive.filter((p) => p.spec?.nodeName !== from.spec?.nodeName).map((p) => p.spec!.nodeName!))].sort()
          .map((node) => alive.filter((p) => p.spec?.nodeName === node).flatMap(addresses).find((a) => family(a) === family(address)))
          .filter((a): a is string => a !== undefined);
        if (targets.length > 0) probes.push({ from, address, targets });
      }
    }
    const reaches = async (p: Probe): Promise<boolean> => {
      for (const target of p.targets) if (await cluster.ping(p.from.metadata!.namespace!, p.from.metadata!.name!, target)) return true;
      return false;
    };
    let failing = probes;
    const deadline = Date.now() + settleMs;
    for (;;) {
      const results: boolean[] = [];
      for (let i = 0; i < failing.length; i += 4) results.push(...(await Promise.all(failing.slice(i, i + 4).map(reaches))));
      failing = failing.filter((_, i) => !results[i]);
      if (failing.length === 0 || Date.now() > deadline) break;
      await new Promise((r) => setTimeout(r, 2000));
    }
    const cutOff = failing.map((p) => `${p.from.metadata!.namespace}/${p.from.metadata!.name} (${p.from.spec!.nodeName}) ${family(p.address)} ${p.address}`);
    const duplicates = await duplicateAddresses();
    const result = { pods: pre.length, cutOff, lost, duplicates };
    console.log(`${label}: of ${pre.length} pods that ran before, ${new Set(failing.map((p) => p.from.metadata!.uid)).size} cut off (${cutOff.length} of ${probes.length} addresses reach no pod on another node), ${lost.length} gone; ${duplicates.length} addresses held by two pods or more`);
    for (const c of cutOff) console.log(`  cut off: ${c}`);
    for (const d of duplicates) console.log(`  duplicate: ${d}`);
    return result;
  };

  /** Addresses that more than one live Pod holds (host-network pods left out: they share the node's). */
  const duplicateAddresses = async (): Promise<string[]> => {
    const holders = new Map<string, string[]>();
    for (const p of (await core().listPodForAllNamespaces()).items) {
      if (p.spec?.hostNetwork || p.status?.phase === 'Succeeded' || p.status?.phase === 'Failed') continue;
      for (const a of addresses(p)) holders.set(a, [...(holders.get(a) ?? []), `${p.metadata!.namespace}/${p.metadata!.name} (${p.spec?.nodeName})`]);
    }
    return [...holders].filter(([, pods]) => pods.length > 1).map(([a, pods]) => `${a}: ${pods.join(', ')}`).sort();
  };

  /** `kubectl coil …` with the admin kubeconfig; resolves with its exit status and output. */
  const kubectlCoil = async (args: readonly string[]): Promise<{ code: number; stdout: string; stderr: string }> => {
    try {
      const { stdout, stderr } = await run(process.execPath, [KUBECTL_COIL, ...args, '--kubeconfig', cluster.cp.kubeconfigPath], { maxBuffer: 64 << 20, timeout: 120_000 });
      return { code: 0, stdout, stderr };
    } catch (err) {
      const e = err as { code?: number | string; stdout?: string; stderr?: string; message: string };
      if (typeof e.code !== 'number') throw err;
      return { code: e.code, stdout: e.stdout ?? '', stderr: e.stderr ?? e.message };
    }
  };

  /** `kubectl coil ipam check` finds nothing (exit 0). */
  const checkIsClean = (t: TestContext): Promise<void> =>
    t.test('kubectl coil ipam check finds nothing', async () => {
      const r = await eventually(async () => {
        const c = await kubectlCoil(['ipam', 'check', '-o', 'json']);
        return c.code === 0 ? c : false;
      }, { timeoutMs: 60_000, intervalMs: 2000 }).catch(async () => kubectlCoil(['ipam', 'check', '-o', 'json']));
      assert.equal(r.code, 0, `ipam check: ${r.stdout}${r.stderr}`);
    });

  /** The scenario's verdict: its check subtest, then no pod cut off or lost and no duplicate. */
  const verdict = async (t: TestContext, result: Assessment): Promise<void> => {
    await checkIsClean(t);
    assert.deepEqual({ cutOff: result.cutOff, lost: result.lost, duplicates: result.duplicates }, { cutOff: [], lost: [], duplicates: [] },
      `of ${result.pods} pods that ran before: ${result.cutOff.length} addresses cut off, ${result.lost.length} pods gone, ${result.duplicates.length} duplicate addresses`);
  };

  /** What each coild said when it recovered at start (printed: the issue's evidence). */
  const coildRecoveryLogs = async (): Promise<void> => {
    const coilds = (await core().listNamespacedPod({ namespace: 'kube-system', labelSelector: 'app.kubernetes.io/component=coild' })).items;
    for (const p of coilds) {
      const log = await cluster.kubectl(['logs', '-n', 'kube-system', p.metadata!.name!, '-c', 'coild']).catch((err: unknown) => String(err));
      const line = log.split('\n').find((l) => l.includes('recovered allocations'));
      console.log(`  coild on ${p.spec?.nodeName}: ${line ?? '(no recovery line)'}`);
    }
  };

  /**
   * Why a pod started after a fault is not Ready, for the failure's message: the pod's events
   * (kubelet's FailedCreatePodSandBox carries the CNI error), the last lines of coild on its node
   * and of each coil-controller (BlockRequests, claims, leadership). A lab's logs go with it.
   */
  const whyNotReady = async (namespace: string, name: string, node: string): Promise<string> => {
    const events = await cluster.kubectl(['get', 'events', '-n', namespace, '--field-selector', `involvedObject.name=${name}`, '-o', 'custom-columns=TIME:.lastTimestamp,TYPE:.type,REASON:.reason,MESSAGE:.message']).catch((err: unknown) => String(err));
    const out = [`events of ${namespace}/${name}:\n${events.trim()}`];
    const coil = (await core().listNamespacedPod({ namespace: 'kube-system', labelSelector: 'app.kubernetes.io/component in (coild,coil-controller)' })).items
      .filter((p) => p.metadata?.labels?.['app.kubernetes.io/component'] === 'coil-controller' || p.spec?.nodeName === node);
    for (const p of coil) {
      const log = await cluster.kubectl(['logs', '-n', 'kube-system', p.metadata!.name!, '--all-containers', '--tail=60']).catch((err: unknown) => String(err));
      out.push(`${p.metadata!.name} on ${p.spec?.nodeName}, its last 60 lines:\n${log.trim()}`);
    }
    return out.join('\n');
  };

  const deleteNamespace = async (namespace: string): Promise<void> => {
    await cluster.kubectl(['delete', 'namespace', namespace, '--ignore-not-found', '--timeout=180s']).catch((err: unknown) => console.log(`deleting namespace ${namespace}: ${String(err)}`));
  };

  test('the scenario of issue 25: helm uninstall, every AddressBlock and AddressPool deleted, helm install again, web scaled up', async (t) => {
    const ns = 'demo';
    try {
      await cluster.applyWorkload(ns, 'web', 6);
      await cluster.createPod(ns, 'client', { nodeName: cluster.nodes[0]!.name, labels: { app: 'client' } });
      const pre = [...(await cluster.waitForPods(ns, 'app=web', 6)), ...(await cluster.waitForPods(ns, 'app=client', 1))];
      const baseline = await assess('issue 25, before the uninstall', pre, 30_000);
      assert.deepEqual([baseline.cutOff, baseline.duplicates], [[], []], 'the lab works before the fault');

      const t0 = performance.now();
      await cluster.uninstallChart();
      await cluster.kubectl(['delete', 'addressblocks.coil.cybozu.com', '--all', '--timeout=60s']);
      await cluster.kubectl(['delete', 'addresspools.coil.cybozu.com', '--all', '--timeout=60s']);
      await cluster.installCoil();
      await cluster.kubectl(['-n', ns, 'scale', 'deploy/web', '--replicas=12']);
      const web = await cluster.waitForPods(ns, 'app=web', 12, 120_000).catch(async (err: unknown) => {
        await coildRecoveryLogs();
        throw new Error(`web did not reach 12 Ready pods with addresses after the reinstall: ${String(err)}`);
      });
      console.log(`issue 25: uninstall, delete, install and scale-up took ${((performance.now() - t0) / 1000).toFixed(1)} s`);
      await coildRecoveryLogs();
      const preUids = new Set(pre.map((p) => p.metadata!.uid));
      const fresh = web.filter((p) => !preUids.has(p.metadata!.uid));
      assertDualStack('issue 25, web scaled up', fresh);
      await verdict(t, await assess('issue 25, after the reinstall (the pods before and the new ones)', [...pre, ...fresh]));
    } finally {
      await deleteNamespace(ns);
    }
  });

  /**
   * Waits until no node requests blocks of `pool` any more (the count unchanged for 5 s): coild
   * keeps `--low-water-mark` (8) addresses free, so a node with 2-address blocks holds several.
   */
  const blocksSettled = async (pool: string): Promise<Block[]> => {
    let last = -1;
    let since = Date.now();
    return eventually(async () => {
      const now = await blocks(pool);
      if (now.length !== last) {
        last = now.length;
        since = Date.now();
      }
      return Date.now() - since >= 5000 ? now : false;
    }, { timeoutMs: 90_000, intervalMs: 1000 });
  };
  const blockList = (list: readonly Block[]): string =>
    [...list].sort((a, b) => a.index - b.index).map((b) => `${b.metadata.name}@${b.metadata.labels['coil.cybozu.com/node']}`).join(' ');
  const inBlock = (address: string, block: Block): boolean => {
    const cidr = address.includes(':') ? block.ipv6 : block.ipv4;
    return cidr !== undefined && cidrContainsAddress(parseCidr(cidr), parseAddress(address));
  };

  test('variant (a): an AddressBlock removed with its finalizer while pods use it, then more pods on the other nodes', async (t) => {
    const ns = 'e2e-finalizer';
    const pool = 'finalizer';
    try {
      await poolNamespace(pool, ns, 4);
      for (const [i, node] of cluster.nodes.entries()) await podsOn(ns, node, [`pre-${i + 1}-a`, `pre-${i + 1}-b`], 'pre');
      const pre = await running(ns, 'app=pre');
      const settled = await blocksSettled(pool);
      console.log(`variant (a): blocks ${blockList(settled)}`);
      const baseline = await assess('variant (a), before', pre, 30_000);
      assert.deepEqual([baseline.cutOff, baseline.duplicates], [[], []], 'the lab works before the fault');

      // The victim: a block both of whose addresses live pods hold, so its node loses no free
      // address with it and asks for no block; the lowest index, which the controller would hand
      // out first were it not for those pods.
      const victim = settled.sort((a, b) => a.index - b.index).find((b) => pre.filter((p) => inBlock(p.status!.podIP!, b)).length === 2);
      assert.ok(victim, `a block full of the pods' addresses among ${blockList(settled)}`);
      const victimNode = victim.metadata.labels['coil.cybozu.com/node']!;
      const users = pre.filter((p) => inBlock(p.status!.podIP!, victim)).map((p) => p.metadata!.name);
      console.log(`variant (a): removing ${victim.metadata.name} (${victim.ipv4}, ${victim.ipv6}) of ${victimNode}, used by ${users.join(', ')}, finalizers ${JSON.stringify(victim.metadata.finalizers)}`);
      // As an admin does when a delete waits: delete, then strip the finalizer it waits on.
      await cluster.kubectl(['delete', 'addressblock', victim.metadata.name, '--wait=false']);
      await cluster.kubectl(['patch', 'addressblock', victim.metadata.name, '--type=merge', '-p', '{"metadata":{"finalizers":null}}']).catch((err: unknown) => console.log(`patch: ${String(err)}`));
      await eventually(async () => !(await blocks(pool)).some((b) => b.metadata.uid === victim.metadata.uid), { timeoutMs: 30_000, intervalMs: 500 });
      // New pods on the other nodes first (each then asks for a block), then on the victim's node.
      const others = cluster.nodes.filter((n) => n.name !== victimNode);
      const byName = new Map(cluster.nodes.map((n) => [n.name, n]));
      const fresh: k8s.V1Pod[] = [];
      const newPod = async (name: string, node: string): Promise<k8s.V1Pod> => {
        const [pod] = await podsOn(ns, byName.get(node)!, [name], 'new', 60_000).catch(async (err: unknown) => {
          throw new Error(`variant (a): ${name} on ${node} was not Ready with an address within 60 s of its creation: ${String(err)}\n${await whyNotReady(ns, name, node)}`);
        });
        fresh.push(pod!);
        return pod!;
      };
      for (const [i, node] of others.entries()) await newPod(`new-${i + 1}`, node.name);
      // No other node may get the victim's index while pods of the victim's node hold its
      // addresses: the allocator skips such a block, and the victim's coild claims it back
      // (docs/ipam-recovery.md). Its node holds the index again, and no other node ever does.
      const claimed = await eventually(async () => {
        const at = (await blocks(pool)).filter((b) => b.index === victim.index);
        assert.deepEqual(at.filter((b) => b.metadata.labels['coil.cybozu.com/node'] !== victimNode).map((b) => b.metadata.name), [], `no other node holds index ${victim.index}`);
        return at.find((b) => b.metadata.labels['coil.cybozu.com/node'] === victimNode) ?? false;
      }, { timeoutMs: 90_000, intervalMs: 1000 }).catch(async (err: unknown) => {
        throw new Error(`variant (a): index ${victim.index} not held by ${victimNode} again within 90 s (claim back), or held by another node: ${String(err)}; blocks ${blockList(await blocks(pool))}`);
      });
      console.log(`variant (a): ${victimNode} claimed index ${victim.index} back as ${claimed.metadata.name}`);
      await newPod(`new-${others.length + 1}`, victimNode);
      console.log(`variant (a): blocks now ${blockList(await blocks(pool))}`);
      assertDualStack('variant (a), after', fresh);
      await verdict(t, await assess('variant (a), after (the pods before and the new ones)', [...pre, ...fresh]));
    } finally {
      await deleteNamespace(ns);
      await cluster.kubectl(['delete', 'addresspool', pool, '--ignore-not-found', '--timeout=60s']).catch(() => undefined);
    }
  });

  /**
   * etcd's v3 JSON gateway (the lab's etcd listens on plain HTTP on the machine's loopback):
   * `POST /v3/<path>` with base64 keys.
   */
  const etcd = async <T>(path: string, body: object): Promise<T> => {
    const res = await fetch(`${cluster.cp.etcdEndpoint}/v3/${path}`, { method: 'POST', body: JSON.stringify(body) });
    if (!res.ok) throw new Error(`etcd ${path}: HTTP ${res.status} ${await res.text()}`);
    return (await res.json()) as T;
  };
  const b64 = (s: string) => Buffer.from(s).toString('base64');
  /** The end of a prefix range (the prefix with its last byte + 1). */
  const prefixEnd = (prefix: string) => b64(prefix.slice(0, -1) + String.fromCharCode(prefix.charCodeAt(prefix.length - 1) + 1));
  type EtcdKv = { key: string; create_revision: string; mod_revision: string };

  /**
   * The restore is simulated, not done with `etcdutl snapshot restore`: the revision of the
   * "backup" is read once the pool exists and before any of its blocks does, pods (and so blocks)
   * are made, then, with kube-apiserver stopped, every key under /registry/coil.cybozu.com/ that
   * etcd created after that revision is deleted directly in etcd (no finalizer runs, no
   * deletionTimestamp is ever seen), and the apiserver is started again. For coil's objects this
   * is what a restore leaves: those blocks (and BlockRequests) never existed, and clients learn it
   * by relisting after the apiserver's restart (their watches start over), not from a graceful
   * delete. It differs from a full restore in what it keeps: the Pods made after the backup stay
   * in the API and keep running, where a restore would remove their objects too and kubelet would
   * stop them, and nothing else rewinds (Nodes' leases, Deployments). That is the harder case for
   * coil — Pods that exist and run on blocks that do not — and the one a restore produces for
   * every pod that outlives it (a static pod, a Pod restored from another source, a pod kubelet
   * has not stopped yet); rewinding every object would also cost the shared lab its state
   * (kubelet leases, the chart's objects) for no more coverage of coil.
   */
  test('variant (b): an etcd restored from a backup older than some AddressBlocks (simulated), then more pods', async (t) => {
    const ns = 'e2e-restore';
    const pool = 'restore';
    const coilPrefix = '/registry/coil.cybozu.com/';
    try {
      await poolNamespace(pool, ns, 5);
      const backup = (await etcd<{ header: { revision: string } }>('kv/range', { key: b64('/registry/'), range_end: prefixEnd('/registry/'), count_only: true })).header.revision;
      for (const [i, node] of cluster.nodes.entries()) await podsOn(ns, node, [`pre-${i + 1}-a`, `pre-${i + 1}-b`], 'pre');
      const pre = await running(ns, 'app=pre');
      const later = await blocksSettled(pool);
      console.log(`variant (b): backup at revision ${backup}; blocks since ${blockList(later)}`);
      const baseline = await assess('variant (b), before', pre, 30_000);
      assert.deepEqual([baseline.cutOff, baseline.duplicates], [[], []], 'the lab works before the fault');

      await cluster.cp.stopApiServer();
      const kvs = (await etcd<{ kvs?: EtcdKv[] }>('kv/range', { key: b64(coilPrefix), range_end: prefixEnd(coilPrefix), keys_only: true })).kvs ?? [];
      const newer = kvs.filter((kv) => BigInt(kv.create_revision) > BigInt(backup));
      for (const kv of newer) await etcd('kv/deleterange', { key: kv.key });
      await cluster.cp.startApiServer();
      console.log(`variant (b): deleted in etcd: ${newer.map((kv) => Buffer.from(kv.key, 'base64').toString().slice(coilPrefix.length)).join(' ')}`);
      const uids = new Set(later.map((b) => b.metadata.uid));
      assert.ok(!(await whileInitializing(() => blocks(pool))).some((b) => uids.has(b.metadata.uid)), 'the blocks made after the backup are gone');

      // One more pod per node, the nodes in the reverse order of the first blocks' requests.
      const fresh: k8s.V1Pod[] = [];
      for (const [i, node] of [...cluster.nodes].reverse().entries()) {
        fresh.push(...await podsOn(ns, node, [`later-${i + 1}`], 'later', 60_000).catch(async (err: unknown) => {
          throw new Error(`variant (b): later-${i + 1} on ${node.name} was not Ready with an address within 60 s of its creation: ${String(err)}\n${await whyNotReady(ns, `later-${i + 1}`, node.name)}`);
        }));
      }
      console.log(`variant (b): blocks now ${blockList(await blocks(pool))}`);
      assertDualStack('variant (b), after', fresh);
      await verdict(t, await assess('variant (b), after (the pods before and the new ones)', [...pre, ...fresh]));
    } finally {
      await deleteNamespace(ns);
      await cluster.kubectl(['delete', 'addresspool', pool, '--ignore-not-found', '--timeout=60s']).catch(() => undefined);
    }
  });

  /**
   * A leak made on purpose: a CNI ADD for a Pod no kubelet runs (the `coil` the chart installed,
   * called inside the node with a network namespace of the test's own), then the Pod deleted.
   * Nothing will ever send its DEL: coild holds an address, and the host a veth, with no Pod
   * behind them — what a runtime that lost a sandbox leaves.
   */
  const makeLeak = async (node: KubeNode, namespace: string, name: string): Promise<{ containerId: string; addresses: string[]; undo: () => Promise<void> }> => {
    await cluster.kubectl(['apply', '-f', '-'], JSON.stringify({
      apiVersion: 'v1', kind: 'Pod', metadata: { name, namespace },
      // Never scheduled: no node has the label. The ADD only needs the Pod to exist.
      spec: { nodeSelector: { 'e2e.coil/none': 'none' }, containers: [{ name: 'main', image: 'coil.local/busybox:1' }] },
    }));
    const containerId = `e2e-leak-${name}`;
    const conflist = JSON.parse(await readFile(node.host.hostPath('/etc/cni/net.d/10-coil.conflist'), 'utf8')) as { cniVersion: string; name: string; plugins: Record<string, unknown>[] };
    const conf = { cniVersion: conflist.cniVersion, name: conflist.name, ...conflist.plugins.find((p) => p.type === 'coil') };
    await writeFile(node.host.hostPath(`/run/${containerId}.json`), JSON.stringify(conf));
    const cni = (command: string) => [
      'env', `CNI_COMMAND=${command}`, `CNI_CONTAINERID=${containerId}`, `CNI_NETNS=/run/netns/${containerId}`, 'CNI_IFNAME=eth0', 'CNI_PATH=/opt/cni/bin',
      `CNI_ARGS=K8S_POD_NAMESPACE=${namespace};K8S_POD_NAME=${name};K8S_POD_INFRA_CONTAINER_ID=${containerId}`,
      'sh', '-c', `/opt/cni/bin/coil < /run/${containerId}.json`,
    ];
    // The netns lives in the node's own /run (its mount namespace): it goes with the node.
    await node.host.exec(['ip', 'netns', 'add', containerId]);
    const result = JSON.parse(await node.host.exec(cni('ADD'))) as { ips?: { address: string }[] };
    await cluster.kubectl(['delete', 'pod', '-n', namespace, name, '--wait=true', '--timeout=60s']);
    return {
      containerId,
      addresses: (result.ips ?? []).map((i) => i.address.split('/')[0]!),
      undo: async () => {
        await node.host.exec(cni('DEL')).catch(() => undefined);
        await node.host.exec(['ip', 'netns', 'del', containerId]).catch(() => undefined);
      },
    };
  };

  /** coild's allocations on `node` (`GET /ipam`): container ids and addresses. */
  const coildAllocations = async (node: KubeNode): Promise<{ containerId?: string; ipv4?: string; ipv6?: string }[]> =>
    (JSON.parse(await cluster.coildIpam(node.name)) as { allocations: { containerId?: string; ipv4?: string; ipv6?: string }[] }).allocations;

  /** `kubectl coil ipam check -o json`: its exit status and findings. */
  const checkFindings = async (): Promise<{ code: number; findings: { kind: string; node?: string; addresses?: string[]; message: string }[]; text: string }> => {
    const c = await kubectlCoil(['ipam', 'check', '-o', 'json']);
    const findings = c.stdout.trim().startsWith('{') ? (JSON.parse(c.stdout) as { findings: { kind: string; addresses?: string[]; message: string }[] }).findings : [];
    return { code: c.code, findings, text: `${c.stdout}${c.stderr}` };
  };

  test('variant (c), issue 33: dual-stack pods, the README\'s uninstall, blocks and pools deleted, coil installed again with an IPv4-only pool; then the dual-stack pool restored', async (t) => {
    const ns = 'e2e-family';
    /** The README's uninstall and clean-up, then its install with the default pool dual-stack or IPv4-only. */
    const reinstall = async (dualStack: boolean): Promise<void> => {
      await cluster.uninstallChart();
      await cluster.kubectl(['delete', 'addressblocks.coil.cybozu.com', '--all', '--timeout=60s']);
      await cluster.kubectl(['delete', 'addresspools.coil.cybozu.com', '--all', '--timeout=60s']);
      await cluster.installCoil([], { dualStack });
    };
    try {
      for (const [i, node] of cluster.nodes.entries()) await podsOn(ns, node, [`old-${i + 1}`], 'old');
      const pre = await running(ns, 'app=old');
      assert.ok(pre.every((p) => addresses(p).length === 2), `dual-stack pods: ${pre.map((p) => addresses(p).join(' ')).join(', ')}`);
      const baseline = await assess('variant (c), before', pre, 30_000);
      assert.deepEqual([baseline.cutOff, baseline.duplicates], [[], []], 'the lab works before the fault');

      await reinstall(false);
      await coildRecoveryLogs();
      const v4only = await assess('variant (c), the pool IPv4-only', pre);
      const v6 = pre.flatMap(addresses).filter((a) => family(a) === 'IPv6').sort();
      await t.test('ipam check names every IPv6 address no block holds any more, and every address cut off (exit 3)', async () => {
        const r = await eventually(async () => {
          const c = await checkFindings();
          const named = c.findings.filter((f) => f.kind === 'unclaimable-address').flatMap((f) => f.addresses ?? []).sort();
          return c.code === 3 && named.join() === v6.join() ? c : false;
        }, { timeoutMs: 60_000, intervalMs: 2000 }).catch(async () => checkFindings());
        assert.equal(r.code, 3, r.text);
        assert.deepEqual(r.findings.filter((f) => f.kind === 'unclaimable-address').flatMap((f) => f.addresses ?? []).sort(), v6, r.text);
        const named = new Set(r.findings.flatMap((f) => f.addresses ?? []));
        assert.deepEqual(v4only.cutOff.filter((c) => !named.has(c.split(' ').at(-1)!)), [], 'every address cut off is named');
      });
      // coild keeps each IPv6 half in the allocation and exports it alone: nothing is cut off.
      assert.deepEqual({ cutOff: v4only.cutOff, lost: v4only.lost, duplicates: v4only.duplicates }, { cutOff: [], lost: [], duplicates: [] });
      for (const node of cluster.nodes) {
        const routes = await node.host.exec(['ip', '-6', 'route', 'show', 'table', '119']);
        const mine = pre.filter((p) => p.spec?.nodeName === node.name).flatMap(addresses).filter((a) => family(a) === 'IPv6');
        for (const a of mine) assert.match(routes, new RegExp(`^${a.replace(/[.:]/g, '\\$&')} dev lo proto 30`, 'm'), `${node.name} exports ${a} alone: ${routes}`);
      }

      await reinstall(true);
      await coildRecoveryLogs();
      await verdict(t, await assess('variant (c), the dual-stack pool restored', pre));
    } finally {
      await deleteNamespace(ns);
    }
  });

  test('a leak made on purpose: ipam check reports it, and release --from-report frees it', async (t) => {
    const ns = 'e2e-leak';
    const node = cluster.nodes[1]!;
    await cluster.kubectl(['apply', '-f', '-'], JSON.stringify({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns } }));
    const leak = await makeLeak(node, ns, 'ghost');
    const dir = await mkdtemp(join(tmpdir(), 'coil-e2e-report-'));
    try {
      assert.ok(leak.addresses.length > 0, 'the ADD gave the ghost an address');
      assert.ok((await coildAllocations(node)).some((a) => a.containerId === leak.containerId), `coild on ${node.name} holds the ghost's ${leak.addresses.join(' ')}`);
      assert.ok(!(await core().listPodForAllNamespaces()).items.some((p) => addresses(p).some((a) => leak.addresses.includes(a))), 'no Pod holds it');
      await t.test('ipam check -o json reports it; release --from-report frees it; check is clean again', async () => {
        const check = await kubectlCoil(['ipam', 'check', '-o', 'json']);
        assert.notEqual(check.code, 0, 'check exits non-zero when it finds something');
        for (const a of leak.addresses) assert.ok(check.stdout.includes(a), `the report names ${a}: ${check.stdout}`);
        const report = join(dir, 'leak.json');
        await writeFile(report, check.stdout);
        const dry = await kubectlCoil(['ipam', 'release', '--from-report', report, '--dry-run']);
        assert.equal(dry.code, 0, dry.stderr);
        assert.ok((await coildAllocations(node)).some((a) => a.containerId === leak.containerId), '--dry-run changes nothing');
        const release = await kubectlCoil(['ipam', 'release', '--from-report', report]);
        assert.equal(release.code, 0, `${release.stdout}${release.stderr}`);
        await eventually(async () => !(await coildAllocations(node)).some((a) => a.containerId === leak.containerId), { timeoutMs: 30_000, intervalMs: 500 });
        const again = await kubectlCoil(['ipam', 'check', '-o', 'json']);
        assert.equal(again.code, 0, again.stdout);
      });
    } finally {
      await leak.undo();
      await rm(dir, { recursive: true, force: true });
      await deleteNamespace(ns);
    }
  });

  test('a report made before a change in the cluster: release refuses what changed (the leaked address now a live Pod\'s)', async (t) => {
    const ns = 'e2e-stale';
    const pool = 'stale';
    const node = cluster.nodes[2]!;
    await poolNamespace(pool, ns, 6);
    const leak = await makeLeak(node, ns, 'ghost');
    const dir = await mkdtemp(join(tmpdir(), 'coil-e2e-report-'));
    let undone = false;
    try {
      const report = join(dir, 'before.json');
      const before = await kubectlCoil(['ipam', 'check', '-o', 'json']);
      assert.equal(before.code, 3, `check exits 3 when it finds something: ${before.stdout}${before.stderr}`);
      const finding = (JSON.parse(before.stdout) as { findings: { kind: string; node?: string; addresses?: string[] }[] }).findings
        .find((f) => f.kind === 'leaked-address' && f.node === node.name && (f.addresses ?? []).some((a) => leak.addresses.includes(a)));
      assert.ok(finding, `the report names the ghost's ${leak.addresses.join(' ')} leaked on ${node.name}: ${before.stdout}`);
      await writeFile(report, before.stdout);
      // A pod on another node for the heir to reach afterwards.
      const [peer] = await podsOn(ns, cluster.nodes.find((n) => n.name !== node.name)!, ['peer'], 'peer');
      // The change: the leak goes (its DEL comes after all) and a real Pod gets its address. A
      // filler takes the block's other address first, and the heir comes once the freed one has
      // cooled (30 s, src/ipam/block.ts): the only address left to it is the ghost's.
      await podsOn(ns, node, ['filler'], 'filler');
      await leak.undo();
      undone = true;
      await new Promise((r) => setTimeout(r, 32_000));
      await podsOn(ns, node, ['heir'], 'heir');
      const [heir] = await running(ns, 'app=heir');
      const heirAddresses = addresses(heir!);
      console.log(`stale report: the ghost had ${leak.addresses.join(' ')}, the heir has ${heirAddresses.join(' ')}`);
      assert.ok(heirAddresses.some((a) => leak.addresses.includes(a)), 'the heir got the leaked address (the case a stale report endangers)');
      await t.test('release --from-report of the older report leaves the heir its address and its network', async () => {
        const release = await kubectlCoil(['ipam', 'release', '--from-report', report, '-o', 'json']);
        console.log(`release of a stale report: exit ${release.code}\n${release.stdout}${release.stderr}`);
        assert.equal(release.code, 3, `release exits 3 when it skipped a finding: ${release.stdout}${release.stderr}`);
        const steps = (JSON.parse(release.stdout) as { steps: { kind: string; outcome: string; detail: string }[] }).steps.filter((s) => s.kind === 'leaked-address');
        assert.deepEqual(steps.map((s) => [s.outcome, s.detail]), [['skipped', `Pod ${ns}/heir on ${node.name} has ${finding.addresses!.join(', ')} now`]], 'release refuses the ghost\'s finding, naming the Pod that holds its address now');
        assert.ok((await coildAllocations(node)).some((a) => heirAddresses.includes(a.ipv4 ?? '') || heirAddresses.includes(a.ipv6 ?? '')), `coild on ${node.name} still holds the heir's address`);
        for (const address of heirAddresses) {
          const target = addresses(peer!).find((a) => family(a) === family(address));
          assert.ok(target, `the peer has an ${family(address)} address`);
          assert.ok(await cluster.ping(ns, heir!.metadata!.name!, target), `the heir (${address}) still reaches the peer on another node (${target})`);
        }
      });
    } finally {
      if (!undone) await leak.undo();
      await rm(dir, { recursive: true, force: true });
      await deleteNamespace(ns);
      await cluster.kubectl(['delete', 'addresspool', pool, '--ignore-not-found', '--timeout=60s']).catch(() => undefined);
    }
  });

  test('stopping the lab leaves no namespace, mount, cgroup, process or file behind', async () => {
    console.log(`the suite ran ${((performance.now() - started) / 1000).toFixed(1)} s before the stop`);
    stopped = true;
    await cluster.stop();
    const left: Leftovers = await Cluster.leftovers({ prefix: cluster.prefix, dir: cluster.dir });
    assert.deepEqual(left, { netns: [], mounts: [], cgroups: [], processes: [], dir: false });
  });
});
