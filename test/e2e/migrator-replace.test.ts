/**
 * `coil-migrator replace` in the stand-in lab (hack/lab/stand-in-lab.ts; root only): the v1 state is recreated as `dump` leaves
 * it — the program's own output for a v1 etcd whose blocks belong to the lab nodes, applied while
 * the controller and coild run — plus Pod objects still on v1 addresses. `replace` must move the
 * owned pods to v2 addresses, leave the bare pod (and its block) alone until `--delete-bare-pods`,
 * and free every reserved block, after which coild stops exporting them and the controller counts
 * them free again.
 *
 * Who plays the owner: the lab runs kube-controller-manager but no scheduler, and its kubelet is a
 * library the test drives (it creates the Pod object itself and cannot wire a pod made by a
 * ReplicaSet). So the test plays both roles with {@link OwnerAndKubelet}: as the kubelet it
 * finishes the graceful deletion of any pod on a lab node (CNI DEL, then delete with grace 0), and
 * as the ReplicaSet it creates a replacement through `lab.addPod` (a real CNI ADD through coild)
 * for each deleted pod it owns. The owner object is a ConfigMap: a real ReplicaSet would make KCM
 * manage (and orphan or multiply) the very pods the test is driving.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { CoreV1Api, type V1Pod } from '@kubernetes/client-node';
import { StandInLab as Lab } from '../../hack/lab/stand-in-lab.js';
import { ip } from '../../hack/lab/topology.js';
import type { AddressBlock } from '../../src/api/v2/addressblock.js';
import { LABEL_POOL, LABEL_RESERVED } from '../../src/api/v2/keys.js';
import { cidrContainsAddress, parseAddress, parseCidr } from '../../src/ipam/cidr.js';
import { ANN_V1_RESERVED } from '../../src/migrator/convert.js';
import { Kinds } from '../../src/api/v2/kinds.js';
import { ApiTransport } from '../../src/runtime/api-transport.js';
import { Client } from '../../src/runtime/client.js';
import { eventually } from '../envtest/control-plane.js';
import { kubectl } from '../envtest/tools.js';
import { runMigrator, V1Etcd } from '../migrator/v1-etcd.js';
import { prerequisite } from '../support/prerequisite.js';

const isRoot = process.getuid?.() === 0;
const NS = 'default';

/** The v1 layout: node 0 holds .0/27 and .64/27, node 1 holds .32/27 (lab pool 10.120.0.0/16, /27 blocks). */
const V1_BLOCKS = [['10.120.0.0/27', 0], ['10.120.0.64/27', 0], ['10.120.0.32/27', 1]] as const;

function inAny(ipText: string, cidrs: readonly string[]): boolean {
  const a = parseAddress(ipText);
  return cidrs.some((c) => cidrContainsAddress(parseCidr(c), a));
}

/** Plays kubelet (finishes graceful deletions) and ReplicaSet (re-creates owned pods) for the test. */
class OwnerAndKubelet {
  private stopped = false;
  private loop?: Promise<void>;
  readonly errors: string[] = [];
  /** Deleted pod name → name of its replacement. */
  readonly replacements = new Map<string, string>();

  constructor(
    private readonly lab: Lab,
    private readonly client: Client,
    private readonly owner: { name: string; uid: string },
  ) {}

  start(): void {
    this.loop = (async () => {
      while (!this.stopped) {
        await this.tick().catch((e: Error) => void this.errors.push(e.stack ?? e.message));
        await new Promise((r) => setTimeout(r, 200));
      }
    })();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.loop;
  }

  private async tick(): Promise<void> {
    const nodes = new Map(this.lab.nodes.map((n) => [n.name, n]));
    for (const pod of await this.client.list(Kinds.Pod)) {
      const name = pod.metadata!.name!;
      const node = nodes.get(pod.spec?.nodeName ?? '');
      if (!pod.metadata?.deletionTimestamp || node === undefined) continue;
      if (this.lab.pods.has(name)) await this.lab.deletePod(name);
      await forceGone(this.lab, this.client, pod);
      if (!pod.metadata.ownerReferences?.some((r) => r.uid === this.owner.uid)) continue;
      const replacement = `${name.replace(/-r\d+$/, '')}-r${this.replacements.size}`;
      await this.lab.addPod(node, replacement, NS);
      await this.client.mergePatch(Kinds.Pod, { namespace: NS, name: replacement }, { metadata: { ownerReferences: [ownerRef(this.owner)] } });
      this.replacements.set(name, replacement);
    }
  }
}

/** Deletes with grace 0 (what the kubelet does once the containers are gone) and waits until it is gone. */
async function forceGone(lab: Lab, client: Client, pod: V1Pod): Promise<void> {
  const key = { namespace: pod.metadata!.namespace!, name: pod.metadata!.name! };
  await lab.cp.kubeConfig.makeApiClient(CoreV1Api).deleteNamespacedPod({ ...key, gracePeriodSeconds: 0 }).catch(() => undefined);
  await eventually(async () => (await client.get(Kinds.Pod, key))?.metadata?.uid !== pod.metadata!.uid, { timeoutMs: 20_000 });
}

function ownerRef(owner: { name: string; uid: string }) {
  return { apiVersion: 'v1', kind: 'ConfigMap', name: owner.name, uid: owner.uid, controller: true, blockOwnerDeletion: false };
}

describe('coil-migrator replace in the lab', { skip: prerequisite(isRoot ? undefined : 'the lab needs root (network namespaces)') }, () => {
  let lab: Lab;
  let etcd: V1Etcd;
  let client: Client;
  let owner: { name: string; uid: string };
  let actor: OwnerAndKubelet;
  const reservedCidrs = V1_BLOCKS.map(([c]) => c);
  const replace = (...args: string[]) => runMigrator(['replace', '--yes', '--interval=1s', '--pod-timeout=30s', `--kubeconfig=${lab.cp.kubeconfigPath}`, ...args], { timeoutMs: 170_000 });
  const reserved = async () => client.list(Kinds.AddressBlock, { labelSelector: `${LABEL_RESERVED}=true` });
  const table119 = async (i: number) => (await ip(['-n', lab.nodes[i]!.netns, '-4', 'route', 'show', 'table', '119'])).split('\n').filter(Boolean).map((l) => l.split(' ')[0]!);

  before(async () => {
    lab = await Lab.up({ nodes: 2, coildArgs: ['--cooling-period=1s', '--block-release-grace=1s'] });
    client = new Client(new ApiTransport(lab.cp.kubeConfig), 'migrator-e2e');
    etcd = await V1Etcd.start();
    const byNode = new Map<string, string[]>();
    for (const [cidr, i] of V1_BLOCKS) byNode.set(lab.nodes[i]!.name, [...(byNode.get(lab.nodes[i]!.name) ?? []), cidr]);
    await etcd.put([
      ['/coil/pool/default', JSON.stringify({ subnets: ['10.120.0.0/16'], block_size: 5 })],
      ['/coil/block/default/10.120.0.0', JSON.stringify({ free: ['10.120.0.96/27'], nodes: Object.fromEntries(byNode) })],
    ]);
    const dump = await runMigrator(['dump', '--dry-run', `--etcd-endpoints=${etcd.endpoint}`, `--kubeconfig=${lab.cp.kubeconfigPath}`]);
    assert.equal(dump.code, 0, dump.stderr);
    await kubectl(lab.cp.kubeconfigPath, ['apply', '-f', '-'], dump.stdout);

    // The v1 pods: Pod objects bound to the nodes, Running on v1 addresses (v2 coild knows nothing of them).
    const cm = await client.create(Kinds.ConfigMap, { metadata: { name: 'v1-app', namespace: NS } });
    owner = { name: 'v1-app', uid: cm.metadata!.uid! };
    const v1Pods: [string, number, string, boolean][] = [
      ['app-a', 0, '10.120.0.1', true], ['app-b', 0, '10.120.0.2', true],
      ['app-c', 1, '10.120.0.33', true], ['app-d', 1, '10.120.0.34', true],
      ['bare', 0, '10.120.0.65', false],
    ];
    for (const [name, node, podIp, owned] of v1Pods) {
      await client.create(Kinds.Pod, {
        metadata: { name, namespace: NS, ...(owned && { ownerReferences: [ownerRef(owner)] }) },
        spec: { nodeName: lab.nodes[node]!.name, containers: [{ name: 'main', image: 'lab.invalid/v1' }] },
      });
      await client.patchStatus(Kinds.Pod, { namespace: NS, name }, { phase: 'Running', podIP: podIp, podIPs: [{ ip: podIp }], conditions: [{ type: 'Ready', status: 'True' }] });
    }
    // A coild pod as the chart labels it: replace must delete it (the DaemonSet would restart it).
    await client.create(Kinds.Pod, {
      metadata: { name: 'coild-x', namespace: 'kube-system', labels: { 'app.kubernetes.io/name': 'coil', 'app.kubernetes.io/component': 'coild' } },
      spec: { nodeName: lab.nodes[0]!.name, hostNetwork: true, containers: [{ name: 'coild', image: 'lab.invalid/coild' }] },
    });
    actor = new OwnerAndKubelet(lab, client, owner);
    actor.start();
  });
  after(async () => {
    await actor?.stop();
    await etcd?.stop();
    await lab?.stop();
  });

  test('before replace: coild exports the reserved blocks and new pods get addresses outside them', async () => {
    assert.equal((await reserved()).length, 3);
    await eventually(async () => (await table119(0)).includes('10.120.0.0/27') && (await table119(0)).includes('10.120.0.64/27') && (await table119(1)).includes('10.120.0.32/27'), { timeoutMs: 30_000 });
    const fresh = await lab.addPod(lab.nodes[0]!, 'v2-probe', NS);
    assert.ok(!inAny(fresh.ips[0]!, reservedCidrs), `v2-probe got ${fresh.ips[0]}`);
    await lab.deletePod('v2-probe');
  });

  test('replace moves owned pods to v2 addresses, keeps the bare pod and its block, frees the other blocks', async () => {
    const r = await replace();
    assert.equal(r.code, 1, `${r.stdout}\n${r.stderr}\nactor: ${actor.errors.join('\n')}`);
    assert.match(r.stderr, /bare pod default\/bare \(no controller owns it\) left alone/);
    assert.match(r.stderr, /keeping reserved block default-2-v1: still used by default\/bare/);
    assert.deepEqual([...actor.replacements.keys()].sort(), ['app-a', 'app-b', 'app-c', 'app-d']);
    for (const name of actor.replacements.values()) {
      const pod = (await client.get(Kinds.Pod, { namespace: NS, name }))!;
      assert.ok(!inAny(pod.status!.podIP!, reservedCidrs), `${name} is on ${pod.status!.podIP}`);
    }
    assert.deepEqual((await reserved()).map((b) => b.metadata!.name), ['default-2-v1']);
    assert.equal((await client.get(Kinds.AddressPool, { name: 'default' }))?.metadata?.annotations?.[ANN_V1_RESERVED], '2');
    const coild = await client.get(Kinds.Pod, { namespace: 'kube-system', name: 'coild-x' });
    assert.ok(coild === undefined || coild.metadata?.deletionTimestamp, 'the coild pod was deleted');
    await eventually(async () => !(await table119(0)).includes('10.120.0.0/27') && (await table119(0)).includes('10.120.0.64/27') && !(await table119(1)).includes('10.120.0.32/27'), { timeoutMs: 30_000 });
  });

  test('replace --delete-bare-pods deletes the bare pod (not re-created) and frees the last reserved block', async () => {
    const r = await replace('--delete-bare-pods');
    assert.equal(r.code, 0, `${r.stdout}\n${r.stderr}`);
    assert.match(r.stderr, /deleted bare pod default\/bare \(not re-created\)/);
    assert.equal(await client.get(Kinds.Pod, { namespace: NS, name: 'bare' }), undefined);
    assert.deepEqual(await reserved(), []);
    assert.equal((await client.get(Kinds.AddressPool, { name: 'default' }))?.metadata?.annotations?.[ANN_V1_RESERVED], undefined);
    await eventually(async () => !(await table119(0)).includes('10.120.0.64/27'), { timeoutMs: 30_000 });
    assert.deepEqual(actor.errors, []);
  });

  test('after replace the controller counts the freed blocks as free and the replaced pods reach each other', async () => {
    const blocks: AddressBlock[] = await client.list(Kinds.AddressBlock, { labelSelector: `${LABEL_POOL}=default` });
    await eventually(async () => {
      const text = await (await fetch(`http://127.0.0.1:${lab.controllerPorts[0]!.metrics}/metrics`)).text();
      return new RegExp(`^coil_controller_allocated_blocks\\{pool="default"\\} ${blocks.length}$`, 'm').test(text);
    }, { timeoutMs: 30_000 });
    await lab.waitForBgp();
    const [a, c] = [lab.pods.get(actor.replacements.get('app-a')!)!, lab.pods.get(actor.replacements.get('app-c')!)!];
    assert.ok(await lab.ping(a, c.ips[0]!), `${a.name} -> ${c.name} ${c.ips[0]}`);
  });
});
