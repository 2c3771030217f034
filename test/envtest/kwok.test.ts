/**
 * The scale benchmark's kwok (hack/bench/kwok.ts) against a real apiserver: it makes the Nodes
 * annotated for it Ready and renews their Leases, leaves other Nodes alone, and never writes a
 * Pod — a Pod bound to one of its Nodes keeps the IP that coil's stand-in wrote, and no Pod
 * carries a kwok field manager (kwok's default Pod Stages would have made it Running with an IP
 * of kwok's own the moment it was bound). Builds kwok on first use (hack/build-kwok.sh, ~1 min).
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import type { V1Pod } from '@kubernetes/client-node';
import { Kinds } from '../../src/api/v2/kinds.js';
import { ApiTransport } from '../../src/runtime/api-transport.js';
import { Client } from '../../src/runtime/client.js';
import { KWOK_NODE_ANNOTATION, Kwok } from '../../hack/bench/kwok.js';
import { ControlPlane, eventually } from './control-plane.js';

let cp: ControlPlane;
let kwok: Kwok;
let dir = '';
let client: Client;

before(async () => {
  cp = await ControlPlane.start();
  dir = await mkdtemp(join(tmpdir(), 'coil-kwok-'));
  client = new Client(new ApiTransport(cp.kubeConfig), 'stand-in');
  kwok = new Kwok(cp.kubeconfigPath, dir);
  await kwok.start();
});

after(async () => {
  await kwok?.stop();
  await cp?.stop();
  await rm(dir, { recursive: true, force: true });
});

const byKwok = (o: { metadata?: { managedFields?: { manager?: string }[] } }) => o.metadata?.managedFields?.some((f) => /kwok/i.test(f.manager ?? '')) ?? false;
const ready = (o: { status?: { conditions?: { type: string; status: string }[] } }) => o.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;

test('kwok keeps its Nodes Ready with a renewed Lease and never writes a Pod', async () => {
  await client.create(Kinds.Node, { metadata: { name: 'sim', annotations: { [KWOK_NODE_ANNOTATION.key]: KWOK_NODE_ANNOTATION.value } } });
  await client.create(Kinds.Node, { metadata: { name: 'other' } });
  await client.create(Kinds.Namespace, { metadata: { name: 'kwok-test' } });
  // Bound before the stand-in writes its IP: the window in which kwok's Pod Stages would act.
  await client.create(Kinds.Pod, { metadata: { name: 'p', namespace: 'kwok-test' }, spec: { nodeName: 'sim', containers: [{ name: 'c', image: 'none' }] } } as V1Pod);

  const node = await eventually(async () => {
    const n = await client.get(Kinds.Node, { name: 'sim' });
    return n && ready(n) ? n : false;
  }, { timeoutMs: 30_000, intervalMs: 200 });
  assert.ok(byKwok(node), `kwok wrote the Node's status: ${JSON.stringify(node.metadata?.managedFields?.map((f) => f.manager))}`);
  const lease = await eventually(async () => (await client.get(Kinds.Lease, { namespace: 'kube-node-lease', name: 'sim' })) ?? false, { timeoutMs: 30_000, intervalMs: 200 });
  const renewed = lease.spec?.renewTime;
  await client.patchStatus(Kinds.Pod, { namespace: 'kwok-test', name: 'p' }, { phase: 'Running', podIP: '10.128.0.7', podIPs: [{ ip: '10.128.0.7' }] });

  // A Lease renewal is due every 10 s (a quarter of its 40 s): wait for one.
  await eventually(async () => (await client.get(Kinds.Lease, { namespace: 'kube-node-lease', name: 'sim' }))?.spec?.renewTime !== renewed, { timeoutMs: 20_000, intervalMs: 500 });

  const pod = await client.get(Kinds.Pod, { namespace: 'kwok-test', name: 'p' });
  assert.equal(pod?.status?.podIP, '10.128.0.7', 'the Pod keeps the stand-in\'s IP');
  assert.deepEqual(pod?.status?.podIPs, [{ ip: '10.128.0.7' }]);
  assert.equal(byKwok(pod!), false, `no kwok field manager on the Pod: ${JSON.stringify(pod?.metadata?.managedFields?.map((f) => f.manager))}`);

  const other = await client.get(Kinds.Node, { name: 'other' });
  assert.equal(ready(other!), false, 'a Node without the annotation is not kwok\'s');
  assert.equal(await client.get(Kinds.Lease, { namespace: 'kube-node-lease', name: 'other' }), undefined);
});
