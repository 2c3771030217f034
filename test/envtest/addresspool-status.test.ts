/**
 * The AddressPool status never gets in anyone's way (the status is ours: Coil's pool has none):
 * - a client that updates the object its create returned — Coil's own webhook tests append subnets
 *   that way — meets no 409 from the controller's status write;
 * - on Coil's CRD (no status subresource; what `helm install` over Coil leaves in place), the
 *   controller allocates and exports its gauges without a single failing status write, and starts
 *   writing status once the CRDs are upgraded;
 * - under churn the status is written at most once per interval: every coild watches every pool.
 */
import 'reflect-metadata';
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { parse } from 'yaml';
import type { AddressPool } from '../../src/api/v2/addresspool.js';
import { blockRequestResult, isAnswered } from '../../src/api/v2/blockrequest.js';
import { coilCrds } from '../../src/api/v2/crd.js';
import { FIN_COIL } from '../../src/api/v2/keys.js';
import { addIpam } from '../../src/controller/ipam-registry.js';
import { Kinds } from '../../src/api/v2/kinds.js';
import { ApiTransport } from '../../src/runtime/api-transport.js';
import type { Client } from '../../src/runtime/client.js';
import { Informer } from '../../src/runtime/informer.js';
import { silentLogger } from '../../src/runtime/logging.js';
import { isConflict } from '../../src/runtime/errors.js';
import type { Manager } from '../../src/runtime/manager.js';
import { Registry } from '../../src/runtime/registry.js';
import { ControlPlane, REPO_ROOT, eventually } from './control-plane.js';
import { adminClient, createPool, createRequest, ipamManager, registerWebhooks } from './controller-support.js';
import { metricValue, recordingLogger, scrape } from './runtime-support.js';

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

describe('AddressPool status and clients that update what create returned', () => {
  let cp: ControlPlane;
  let mgr: Manager;
  let client: Client;

  before(async () => {
    cp = await ControlPlane.start({ crds: coilCrds() });
    mgr = await ipamManager(cp, { webhooks: true, addressPool: true, blockRequest: true }, { poolStatusSettleMs: 2_000 });
    await mgr.start();
    await registerWebhooks(cp, addIpam(new Registry(), { addressPool: false, blockRequest: false, gc: false }), mgr.ports.webhook!, 'coilv2-ipam');
    client = adminClient(cp);
    // The apiserver loads webhook configurations asynchronously; wait until the mutator acts.
    let probes = 0;
    await eventually(async () => {
      const name = `probe-${++probes}`;
      const p = await createPool(client, name, { subnets: [{ ipv4: `192.168.${probes}.0/24` }] });
      // Read again: the object create returned may be stale by now (that is what this file tests).
      await client.removeFinalizer(Kinds.AddressPool, (await client.get(Kinds.AddressPool, { name }))!, FIN_COIL);
      await client.delete(Kinds.AddressPool, { name });
      return p.metadata?.finalizers?.includes(FIN_COIL) === true;
    });
  });
  after(async () => {
    await mgr?.stop();
    await cp?.stop();
  });

  test('create, then append a subnet to the returned object: 0 conflicts in 20 (Coil: 0 in 20)', async () => {
    let conflicts = 0;
    for (let i = 0; i < 20; i++) {
      const created = await createPool(client, `append-${i}`, { subnets: [{ ipv4: `10.70.${i}.0/26` }] });
      // A client that looks at what it got, then changes it: time enough for the controller to react.
      await sleep(300);
      const next: AddressPool = { ...created, spec: { ...created.spec, subnets: [...created.spec.subnets, { ipv4: `10.71.${i}.0/26` }] } };
      try {
        await client.update(Kinds.AddressPool, next);
      } catch (e) {
        if (!isConflict(e)) throw e;
        conflicts++;
      }
    }
    assert.equal(conflicts, 0);
    // The status still comes, once the spec settled: 2 subnets of 2 blocks each.
    await eventually(async () => (await client.get(Kinds.AddressPool, { name: 'append-19' }))?.status?.maxBlocks === '4');
  });

  test('allocations under churn write the status at most once per poolStatusIntervalMs: each write is an event to every coild', async () => {
    await createPool(client, 'churned', { blockSizeBits: 2, subnets: [{ ipv4: '10.72.0.0/24' }] });
    await eventually(async () => (await client.get(Kinds.AddressPool, { name: 'churned' }))?.status?.allocatedBlocks === 0);
    const writes: number[] = [];
    const watch = new Informer(Kinds.AddressPool, new ApiTransport(cp.kubeConfig), silentLogger());
    watch.onEvent((e) => {
      if (e.object.metadata?.name === 'churned' && e.type === 'MODIFIED' && e.old?.status?.allocatedBlocks !== e.object.status?.allocatedBlocks) writes.push(Date.now());
    });
    watch.start();
    await watch.waitForSync();
    try {
      // 15 requests, one every 300 ms: a write a second would be 4 or 5 in these 4.5 s.
      for (let i = 0; i < 15; i++) {
        await createRequest(client, 'churned', `n${i}`);
        await sleep(300);
      }
      assert.ok(writes.length <= 1, `${writes.length} status writes in 4.5 s of allocations`);
      // The status still catches up, one interval later.
      await eventually(async () => (await client.get(Kinds.AddressPool, { name: 'churned' }))?.status?.allocatedBlocks === 15, { timeoutMs: 20_000 });
    } finally {
      await watch.stop();
    }
  });
});

describe("AddressPool reconciler on Coil's AddressPool CRD (no status subresource)", () => {
  let cp: ControlPlane;
  let mgr: Manager;
  let client: Client;
  const logs = recordingLogger('ipam-test');

  before(async () => {
    const coils = parse(await readFile(join(REPO_ROOT, 'test/envtest/fixtures/coil-v2.15-addresspools-crd.yaml'), 'utf8')) as { metadata: { name: string } };
    const crds = coilCrds().map((c) => (c.metadata?.name === coils.metadata.name ? coils : c));
    cp = await ControlPlane.start({ crds });
    mgr = await ipamManager(cp, { addressPool: true, blockRequest: true }, { poolStatusSettleMs: 200, crdProbeIntervalMs: 1_000 }, 'ipam-test', { logger: logs.logger });
    await mgr.start();
    client = adminClient(cp);
  });
  after(async () => {
    await mgr?.stop();
    await cp?.stop();
  });

  test('allocates and exports gauges with no failing status write; writes status once the CRD is upgraded', async () => {
    await createPool(client, 'coils', { blockSizeBits: 4, subnets: [{ ipv4: '10.80.0.0/24' }] });
    const req = await createRequest(client, 'coils', 'n1');
    const br = await eventually(async () => {
      const r = await client.get(Kinds.BlockRequest, { name: req.metadata!.name! });
      return r && isAnswered(r.status) ? r : false;
    });
    assert.equal(blockRequestResult(br.status).kind, 'allocated');
    await eventually(async () => metricValue(await scrape(mgr.ports.metrics!), 'coil_controller_allocated_blocks', { pool: 'coils' }) === 1);
    // Well past the settle time: a status write would have been tried (and failed) by now.
    await sleep(3_000);
    // Status writes only: other reconcile errors (an apiserver hiccup under load) are not this test's subject.
    const statusWrites = logs.records.filter((r) => r.err?.message?.includes('/addresspools/coils/status'));
    assert.equal(statusWrites.length, 0, `a status write failed; the controller's warnings:\n${logs.warnings()}`);
    const m = await scrape(mgr.ports.metrics!);
    assert.equal(metricValue(m, 'coil_controller_max_blocks', { pool: 'coils' }), 16);
    assert.equal((await client.get(Kinds.AddressPool, { name: 'coils' }))?.status, undefined);

    // The documented upgrade step: apply the chart's CRDs. Discovery is asked again, status follows.
    await cp.installCrds(coilCrds().filter((c) => c.metadata?.name === 'addresspools.coil.cybozu.com'));
    await client.create(Kinds.BlockRequest, { metadata: { name: 'req-coils-n2' }, spec: { nodeName: 'n2', poolName: 'coils' } });
    await eventually(async () => (await client.get(Kinds.AddressPool, { name: 'coils' }))?.status?.allocatedBlocks === 2, { timeoutMs: 20_000 });
  });
});
