/**
 * `coil_controller_ipam_findings{kind}` against the real apiserver: the counts of the checks of
 * `kubectl coil ipam check`, computed from coil-controller's cache at scrape time — an orphan
 * block, a block stuck deleting, a stale BlockRequest and a full pool each counted, and each
 * count going back to 0 when the fault is gone. The GC is not run here (it would delete the
 * orphan at once); thresholds are short so the faults age within the test.
 */
import 'reflect-metadata';
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { coilCrds } from '../../src/api/v2/crd.js';
import { FIN_COIL, LABEL_NODE, LABEL_POOL } from '../../src/api/v2/keys.js';
import { Kinds } from '../../src/api/v2/kinds.js';
import type { Client } from '../../src/runtime/client.js';
import type { Manager } from '../../src/runtime/manager.js';
import { ControlPlane, eventually } from './control-plane.js';
import { ipamCache } from '../../src/controller/ipam-registry.js';
import { stripManagedFields } from '../../src/runtime/informer.js';
import { adminClient, createNode, createPool, ipamManager } from './controller-support.js';
import { metricValue, scrape } from './runtime-support.js';

const NAME = 'coil_controller_ipam_findings';

describe('coil_controller_ipam_findings', () => {
  let cp: ControlPlane;
  let mgr: Manager;
  let client: Client;
  const count = async (kind: string): Promise<number | undefined> => metricValue(await scrape(mgr.ports.metrics!), NAME, { kind });
  const block = (pool: string, index: number, node: string, cidr: string) =>
    client.create(Kinds.AddressBlock, { metadata: { name: `${pool}-${index}`, labels: { [LABEL_POOL]: pool, [LABEL_NODE]: node }, finalizers: [FIN_COIL] }, index, ipv4: cidr });

  before(async () => {
    cp = await ControlPlane.start({ crds: coilCrds() });
    client = adminClient(cp);
    await createPool(client, 'big', { subnets: [{ ipv4: '10.30.0.0/16' }] });
    await createPool(client, 'tiny', { subnets: [{ ipv4: '10.31.0.0/26' }] }); // 2 blocks of /27
    await createNode(client, 'n1');
    mgr = await ipamManager(cp, { findingsMetrics: true }, { findingThresholds: { stuckDeletingMs: 500, blockRequestWaitMs: 1_000, poolUsagePercent: 90 }, findingsRecomputeMs: 0 });
    await mgr.start();
  });
  after(async () => {
    await mgr?.stop();
    await cp?.stop();
  });

  test('a healthy cluster exports 0 for every kind the cache can compute (no pod kinds without Pods cached)', async () => {
    await block('big', 0, 'n1', '10.30.0.0/27');
    await eventually(async () => (await count('orphan-block')) === 0);
    for (const kind of ['block-stuck-deleting', 'stale-blockrequest', 'pool-usage-high']) assert.equal(await count(kind), 0, kind);
    const podsCached = mgr.cache.kinds().some((k) => k.group === '' && k.plural === 'pods');
    assert.equal(await count('duplicate-pod-ip'), podsCached ? 0 : undefined, 'the Pod kinds only when Pods are cached');
    assert.equal(await count('leaked-address'), undefined, 'leaks are coild\'s to count');
  });

  test('each seeded fault is counted, and the count goes back to 0 once it is gone', async () => {
    await block('big', 1, 'gone', '10.30.0.32/27');
    await block('big', 2, 'n1', '10.30.0.64/27');
    await client.delete(Kinds.AddressBlock, { name: 'big-2' }); // the finalizer holds it: deleting
    await client.create(Kinds.BlockRequest, { metadata: { name: 'req-big-n1' }, spec: { poolName: 'big', nodeName: 'n1' } });
    await block('tiny', 0, 'n1', '10.31.0.0/27');
    await block('tiny', 1, 'n1', '10.31.0.32/27');
    await eventually(async () => (await count('orphan-block')) === 1 && (await count('pool-usage-high')) === 1);
    await eventually(async () => (await count('block-stuck-deleting')) === 1 && (await count('stale-blockrequest')) === 1, { timeoutMs: 10_000 });

    await client.delete(Kinds.AddressBlock, { name: 'big-1' });
    for (const name of ['big-1', 'big-2']) {
      const b = await client.get(Kinds.AddressBlock, { name });
      if (b) await client.removeFinalizer(Kinds.AddressBlock, b, FIN_COIL);
    }
    await client.delete(Kinds.BlockRequest, { name: 'req-big-n1' });
    await client.delete(Kinds.AddressBlock, { name: 'tiny-1' }).then(async () => {
      const b = await client.get(Kinds.AddressBlock, { name: 'tiny-1' });
      if (b) await client.removeFinalizer(Kinds.AddressBlock, b, FIN_COIL);
    });
    await eventually(async () => {
      const s = await scrape(mgr.ports.metrics!);
      return ['orphan-block', 'block-stuck-deleting', 'stale-blockrequest', 'pool-usage-high'].every((kind) => metricValue(s, NAME, { kind }) === 0);
    }, { timeoutMs: 10_000 });
  });

  test('a scrape within findingsRecomputeMs of the last computation reuses its counts', async () => {
    const slow = await ipamManager(cp, { findingsMetrics: true }, { findingsRecomputeMs: 3_600_000 }, 'ipam-test-slow');
    await slow.start();
    try {
      const at = async (kind: string) => metricValue(await scrape(slow.ports.metrics!), NAME, { kind });
      await eventually(async () => (await at('orphan-block')) !== undefined);
      assert.equal(await at('orphan-block'), 0);
      await block('big', 9, 'ghost', '10.30.1.32/27');
      await eventually(() => mgr.cache.get(Kinds.AddressBlock, { name: 'big-9' }) !== undefined && slow.cache.get(Kinds.AddressBlock, { name: 'big-9' }) !== undefined);
      assert.equal(await at('orphan-block'), 0, 'recomputed before findingsRecomputeMs');
      await eventually(async () => (await count('orphan-block')) === 1);
    } finally {
      await slow.stop();
    }
  });

  test('with Pods in the cache, duplicate Pod IPs and Pod IPs without a block of their node are counted', async () => {
    const cache = { defaults: { initialBackoffMs: 100, maxBackoffMs: 2_000, transform: stripManagedFields }, kinds: [...ipamCache(), { kind: Kinds.Pod, options: {} }] };
    const withPods = await ipamManager(cp, { findingsMetrics: true }, { findingsRecomputeMs: 0 }, 'ipam-test-pods', { cache });
    await withPods.start();
    try {
      const at = async (kind: string) => metricValue(await scrape(withPods.ports.metrics!), NAME, { kind });
      await eventually(async () => (await at('duplicate-pod-ip')) === 0 && (await at('pod-ip-without-block')) === 0);
      await client.create(Kinds.Namespace, { metadata: { name: 'pods' } });
      await cp.request('POST', '/api/v1/namespaces/pods/serviceaccounts', { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'default' } });
      for (const [name, node] of [['a', 'n1'], ['b', 'n2']] as const) {
        await client.create(Kinds.Pod, { metadata: { name, namespace: 'pods' }, spec: { nodeName: node, containers: [{ name: 'c', image: 'pause' }], automountServiceAccountToken: false } });
        await client.patchStatus(Kinds.Pod, { namespace: 'pods', name }, { phase: 'Running', podIP: '10.30.0.5', podIPs: [{ ip: '10.30.0.5' }] });
      }
      // 10.30.0.5 is in big-0 of n1: b on n2 holds an address no block of n2 holds, and a and b share it.
      await eventually(async () => (await at('duplicate-pod-ip')) === 1 && (await at('pod-ip-without-block')) === 1);
    } finally {
      await withPods.stop();
    }
  });
});
