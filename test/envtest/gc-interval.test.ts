/**
 * The AddressBlock GC's sweep period has one source: `--gc-interval`, which the program binds as
 * IpamOptions.gcIntervalMs. The registration its decorator recorded runs at that period, and the
 * program assembles its registry from that registration unchanged (it once copied the entry and
 * overwrote the period, so the decorator's own value never took effect).
 */
import 'reflect-metadata';
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Container } from 'inversify';
import { coilCrds } from '../../src/api/v2/crd.js';
import { FIN_COIL, LABEL_NODE, LABEL_POOL, LABEL_REQUEST } from '../../src/api/v2/keys.js';
import { addIpam, bindIpam, ipamCache } from '../../src/controller/ipam-registry.js';
import { AddressBlockGcReconciler } from '../../src/reconcilers/addressblock-gc.js';
import { Kinds } from '../../src/api/v2/kinds.js';
import { DEFAULT_IPAM_OPTIONS } from '../../src/reconcilers/options.js';
import type { Manager } from '../../src/runtime/manager.js';
import { defaultRegistry, Registry } from '../../src/runtime/registry.js';
import { ControlPlane, eventually } from './control-plane.js';
import { adminClient, createNode } from './controller-support.js';
import { metricValue, scrape, testManager } from './runtime-support.js';

const decorated = () => defaultRegistry().reconcilers.find((r) => r.target === AddressBlockGcReconciler)!;

test('addIpam records the GC reconciler as its decorator registered it', () => {
  const assembled = addIpam(new Registry(), { webhooks: false, addressPool: false, blockRequest: false });
  assert.equal(assembled.reconcilers.length, 1);
  assert.equal(assembled.reconcilers[0], decorated(), 'the registration is not a modified copy');
});

describe('AddressBlock GC sweep period', () => {
  let cp: ControlPlane;
  let mgr: Manager | undefined;

  before(async () => {
    cp = await ControlPlane.start({ crds: coilCrds() });
  });
  after(async () => {
    await mgr?.stop();
    await cp?.stop();
  });

  test('the decorator\'s registration sweeps every bound gcIntervalMs', async () => {
    const client = adminClient(cp);
    await createNode(client, 'n1', { status: 'True', sinceMs: Date.now() });
    await client.create(Kinds.AddressBlock, {
      metadata: { name: 'sweep-0', labels: { [LABEL_POOL]: 'p', [LABEL_NODE]: 'n1', [LABEL_REQUEST]: 'uid-0' }, finalizers: [FIN_COIL] },
      index: 0,
      ipv4: '10.20.0.0/27',
    });
    const registry = new Registry();
    registry.addReconciler(decorated());
    const container = bindIpam(new Container(), { ...DEFAULT_IPAM_OPTIONS, gcIntervalMs: 300 });
    mgr = testManager(cp, registry, { container, cache: { defaults: { initialBackoffMs: 100, maxBackoffMs: 2_000 }, kinds: ipamCache() } });
    await mgr.start();
    const reconciles = async () => metricValue(await scrape(mgr!.ports.metrics!), 'controller_runtime_reconcile_total', { controller: 'addressblock-gc', result: 'success' }) ?? 0;
    const first = await eventually(async () => {
      const n = await reconciles();
      assert.ok(n >= 1, 'the first reconcile');
      return n;
    });
    // Every 300 ms the one block is enqueued again: four more sweeps within a few seconds
    // (at the decorator's former fixed hour, none would come).
    await eventually(async () => (await reconciles()) >= first + 4, { timeoutMs: 6_000, intervalMs: 100 });
    assert.ok(await client.get(Kinds.AddressBlock, { name: 'sweep-0' }), 'a Ready node keeps its block');
  });
});
