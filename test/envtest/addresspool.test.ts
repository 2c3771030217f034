/**
 * The AddressPool reconciler against the real apiserver: the finalizer, status and gauges follow
 * the pool's AddressBlocks; deleting a pool waits for its blocks; a freed index is handed out again.
 */
import 'reflect-metadata';
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { AddressPool } from '../../src/api/v2/addresspool.js';
import { blockRequestResult, isAnswered } from '../../src/api/v2/blockrequest.js';
import { coilCrds } from '../../src/api/v2/crd.js';
import { FIN_COIL } from '../../src/api/v2/keys.js';
import { Kinds } from '../../src/api/v2/kinds.js';
import type { Client } from '../../src/runtime/client.js';
import type { Manager } from '../../src/runtime/manager.js';
import { ControlPlane, eventually } from './control-plane.js';
import { adminClient, createPool, createRequest, ipamManager } from './controller-support.js';
import { metricValue, scrape } from './runtime-support.js';

describe('AddressPool reconciler', () => {
  let cp: ControlPlane;
  let mgr: Manager;
  let client: Client;

  const pool = (name: string): Promise<AddressPool | undefined> => client.get(Kinds.AddressPool, { name });
  const allocate = async (p: string, node: string): Promise<string> => {
    const req = await createRequest(client, p, node);
    const br = await eventually(async () => {
      const r = await client.get(Kinds.BlockRequest, { name: req.metadata!.name! });
      return r && isAnswered(r.status) ? r : false;
    });
    const res = blockRequestResult(br.status);
    assert.equal(res.kind, 'allocated');
    await client.delete(Kinds.BlockRequest, { name: req.metadata!.name! });
    return (res as { addressBlockName: string }).addressBlockName;
  };
  /** Releases a block the way coild does: drop the finalizer, delete. */
  const release = async (name: string): Promise<void> => {
    const b = (await client.get(Kinds.AddressBlock, { name }))!;
    await client.removeFinalizer(Kinds.AddressBlock, b, FIN_COIL);
    await client.delete(Kinds.AddressBlock, { name });
  };

  before(async () => {
    cp = await ControlPlane.start({ crds: coilCrds() });
    client = adminClient(cp);
    mgr = await ipamManager(cp, { addressPool: true, blockRequest: true });
    await mgr.start();
  });
  after(async () => {
    await mgr?.stop();
    await cp?.stop();
  });

  test('adds the finalizer to a pool created without the webhook', async () => {
    await createPool(client, 'bare', { subnets: [{ ipv4: '10.9.0.0/24' }] });
    await eventually(async () => (await pool('bare'))?.metadata?.finalizers?.includes(FIN_COIL) === true);
  });

  test('status and gauges show allocated and total blocks, and follow allocations and releases', async () => {
    await createPool(client, 'counted', { blockSizeBits: 4, subnets: [{ ipv4: '10.10.0.0/24' }, { ipv4: '10.11.0.0/25' }] });
    await eventually(async () => (await pool('counted'))?.status?.maxBlocks === '24');
    assert.equal((await pool('counted'))?.status?.allocatedBlocks, 0);
    const a = await allocate('counted', 'n1');
    const b = await allocate('counted', 'n2');
    await eventually(async () => (await pool('counted'))?.status?.allocatedBlocks === 2);
    const m = await scrape(mgr.ports.metrics!);
    assert.equal(metricValue(m, 'coil_controller_max_blocks', { pool: 'counted' }), 24);
    assert.equal(metricValue(m, 'coil_controller_allocated_blocks', { pool: 'counted' }), 2);
    await release(a);
    await release(b);
    await eventually(async () => (await pool('counted'))?.status?.allocatedBlocks === 0);
    await eventually(async () => metricValue(await scrape(mgr.ports.metrics!), 'coil_controller_allocated_blocks', { pool: 'counted' }) === 0);
  });

  test('a released index is handed out again, lowest first', async () => {
    await createPool(client, 'reuse', { subnets: [{ ipv4: '10.12.0.0/24' }] });
    assert.equal(await allocate('reuse', 'n1'), 'reuse-0');
    assert.equal(await allocate('reuse', 'n2'), 'reuse-1');
    await release('reuse-0');
    await eventually(async () => (await pool('reuse'))?.status?.allocatedBlocks === 1);
    assert.equal(await allocate('reuse', 'n3'), 'reuse-0');
  });

  test('deleting a pool waits for its blocks, then completes and drops its gauges', async () => {
    await createPool(client, 'doomed', { subnets: [{ ipv4: '10.13.0.0/24' }] });
    const blocks = [await allocate('doomed', 'n1'), await allocate('doomed', 'n2')];
    await client.delete(Kinds.AddressPool, { name: 'doomed' });
    await eventually(async () => (await pool('doomed'))?.metadata?.deletionTimestamp !== undefined);
    // Still there while blocks remain.
    await new Promise((r) => setTimeout(r, 500));
    assert.deepEqual((await pool('doomed'))?.metadata?.finalizers, [FIN_COIL]);
    await release(blocks[0]!);
    await new Promise((r) => setTimeout(r, 300));
    assert.ok(await pool('doomed'), 'pool went while a block remained');
    await release(blocks[1]!);
    await eventually(async () => (await pool('doomed')) === undefined);
    await eventually(async () => metricValue(await scrape(mgr.ports.metrics!), 'coil_controller_max_blocks', { pool: 'doomed' }) === undefined);
  });

  test('an IPv6 pool too large for a number reports maxBlocks exactly', async () => {
    await createPool(client, 'huge', { blockSizeBits: 8, subnets: [{ ipv6: 'fd30::/48' }] });
    await eventually(async () => (await pool('huge'))?.status?.maxBlocks === (1n << 72n).toString());
  });
});
