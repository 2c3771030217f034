/**
 * coild's side of the BlockRequest handshake against the real apiserver, with coild stand-ins made
 * of coild's own parts (its informer cache as coild declares it, declareCoildCache; the
 * BlockRequester), each over its own connections:
 * - a cold start of K nodes asking at once opens no BlockRequest watch on the apiserver (a watch by
 *   label of a custom resource is given every event of the kind to filter: K watchers × 3K events,
 *   the N² that closed thousands of watchers at 500–1,000 nodes, docs/performance.md#scale), reads
 *   few requests by name, and ends with exactly one block per node;
 * - under a controller that answers as one that does not label its blocks with the request
 *   (status `Complete` + `addressBlockName` only, played by hand here) the requester still resolves
 *   `allocated`, and a `Failed` answer resolves `failed`; both requests are then deleted by coild;
 * - an `allocated` answer whose block the node's cache does not show 10 s on (its watch lagging,
 *   as the apiserver's did at N=5,000, docs/performance.md#where-this-machine-stops; here a cache
 *   not started yet) is checked by a GET of the block: one the apiserver holds is waited for
 *   and resolves `allocated` once the cache shows it; one it does not hold is `lost`.
 */
import 'reflect-metadata';
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { coilCrds } from '../../src/api/v2/crd.js';
import { LABEL_NODE, LABEL_POOL, LABEL_REQUEST } from '../../src/api/v2/keys.js';
import { Kinds } from '../../src/api/v2/kinds.js';
import type { BlockRequest } from '../../src/api/v2/blockrequest.js';
import type { CoildConfig } from '../../src/node-agent/config.js';
import { BlockRequester, type BlockRequestOutcome } from '../../src/node-agent/ipam/block-request.js';
import { declareCoildCache } from '../../src/node-agent/rbac.js';
import { ApiTransport } from '../../src/runtime/api-transport.js';
import { Cache } from '../../src/runtime/cache.js';
import { Client } from '../../src/runtime/client.js';
import { silentLogger } from '../../src/runtime/logging.js';
import type { KindDescriptor, ObjectKey } from '../../src/runtime/kind.js';
import type { KubernetesObject } from '@kubernetes/client-node';
import { FakeClock } from '../fakes/clock.fake.js';
import { until } from '../fakes/timing.js';
import { ControlPlane, eventually } from './control-plane.js';
import { adminClient, createNode, createPool, ipamManager } from './controller-support.js';

/** Nodes of the cold start: enough that K² (576) and K (24) lie far apart. */
const K = 24;

/** A coild stand-in: coild's cache for `node` and its BlockRequester, over connections of its own. */
class CoildStandIn {
  readonly cache: Cache;
  readonly requester: BlockRequester;

  constructor(cp: ControlPlane, readonly node: string) {
    const transport = new ApiTransport(cp.kubeConfig);
    this.cache = new Cache(transport, silentLogger());
    declareCoildCache(this.cache, { nodeName: node, enableIpam: true, enableEgress: false } as CoildConfig);
    this.requester = new BlockRequester({ cache: this.cache, client: new Client(transport, 'coild'), nodeName: node, logger: silentLogger() });
  }

  async start(): Promise<void> {
    this.cache.start();
    await this.cache.waitForSync(60_000);
    this.requester.start();
  }

  async stop(): Promise<void> {
    this.requester.stop();
    await this.cache.stop();
  }
}

/** From the apiserver's /metrics: watches open and requests served, for one resource of coil's group. */
async function apiserverSays(cp: ControlPlane, resource: string): Promise<{ watches: number; requests: Map<string, number> }> {
  const res = await cp.request('GET', '/metrics');
  assert.equal(res.status, 200);
  let watches = 0;
  const requests = new Map<string, number>();
  for (const line of res.body.split('\n')) {
    const m = /^(\w+)\{(.*)\} (\S+)$/.exec(line);
    if (!m || !m[2]!.includes(`resource="${resource}"`) || !m[2]!.includes('group="coil.cybozu.com"')) continue;
    const verb = /verb="(\w+)"/.exec(m[2]!)?.[1];
    if (m[1] === 'apiserver_longrunning_requests' && verb === 'WATCH') watches += Number(m[3]);
    if (m[1] === 'apiserver_request_total' && verb && !m[2]!.includes('subresource="status"')) requests.set(verb, (requests.get(verb) ?? 0) + Number(m[3]));
  }
  return { watches, requests };
}

const grew = (after: Map<string, number>, before: Map<string, number>, verb: string): number => (after.get(verb) ?? 0) - (before.get(verb) ?? 0);

/** coild's Client, counting its reads of AddressBlocks by name and the reads in flight. */
class BlockReadCountingClient extends Client {
  blockReads = 0;
  inFlight = 0;

  override async get<T extends KubernetesObject>(kind: KindDescriptor<T>, key: ObjectKey): Promise<T | undefined> {
    if (kind.kind === 'AddressBlock') this.blockReads++;
    this.inFlight++;
    try {
      return await super.get(kind, key);
    } finally {
      this.inFlight--;
    }
  }
}

describe('coild\'s BlockRequests against the real apiserver', () => {
  let cp: ControlPlane;
  let admin: Client;

  before(async () => {
    cp = await ControlPlane.start({ crds: coilCrds() });
    admin = adminClient(cp);
  });
  after(async () => {
    await cp?.stop();
  });

  test(`a cold start of ${K} nodes opens no BlockRequest watch and gives each node exactly one block`, async () => {
    const mgr = await ipamManager(cp, { addressPool: true, blockRequest: true });
    await mgr.start();
    const nodes: CoildStandIn[] = [];
    try {
      await createPool(admin, 'cold', { subnets: [{ ipv4: '10.20.0.0/22' }], blockSizeBits: 2 });
      await Promise.all(Array.from({ length: K }, (_, i) => createNode(admin, `cold-${i}`)));
      for (let i = 0; i < K; i++) nodes.push(new CoildStandIn(cp, `cold-${i}`));
      await Promise.all(nodes.map((n) => n.start()));
      // The controller's own BlockRequest watch is the only one (its informer may still be opening it).
      await eventually(async () => (await apiserverSays(cp, 'blockrequests')).watches >= 1, { timeoutMs: 10_000 });
      const before = await apiserverSays(cp, 'blockrequests');
      const outcomes = await Promise.all(nodes.map((n) => n.requester.request('cold', 60_000)));
      assert.deepEqual(outcomes.map((o) => o.kind), nodes.map(() => 'allocated'));
      // Every consumed request deleted by its node (counted by the apiserver: a list of ours would count too).
      const after = await eventually(async () => {
        const now = await apiserverSays(cp, 'blockrequests');
        return grew(now.requests, before.requests, 'DELETE') >= K && now;
      }, { timeoutMs: 15_000 });
      assert.deepEqual(await admin.list(Kinds.BlockRequest), [], 'every request deleted by its node');

      assert.equal(after.watches, 1, `BlockRequest watches open with ${K} coilds running: only the controller's (a coild watching them makes it ${K + 1})`);
      assert.equal(grew(after.requests, before.requests, 'WATCH'), 0, 'no coild opened a BlockRequest watch during the cold start');
      // Each node created its request, read it by name only while it waited longer than a poll
      // (first 1–2 s after creating it, then 2, 4 … s apart), and deleted it.
      assert.equal(grew(after.requests, before.requests, 'POST'), K);
      assert.equal(grew(after.requests, before.requests, 'DELETE'), K);
      const reads = grew(after.requests, before.requests, 'GET');
      assert.ok(reads <= 3 * K, `${reads} reads of a BlockRequest by name for ${K} requests`);
      assert.equal(grew(after.requests, before.requests, 'LIST'), 0, 'the one list of each node ran when it started');

      const blocks = await admin.list(Kinds.AddressBlock, { labelSelector: `${LABEL_POOL}=cold` });
      const perNode = new Map<string, number>();
      for (const b of blocks) perNode.set(b.metadata!.labels![LABEL_NODE]!, (perNode.get(b.metadata!.labels![LABEL_NODE]!) ?? 0) + 1);
      assert.deepEqual(nodes.filter((n) => perNode.get(n.node) !== 1).map((n) => `${n.node}: ${perNode.get(n.node) ?? 0}`), [], 'exactly one block per node');
      assert.equal(blocks.length, K, 'no duplicate block');
      for (const [i, n] of nodes.entries()) {
        const o = outcomes[i]!;
        assert.ok(o.kind === 'allocated' && n.cache.get(Kinds.AddressBlock, { name: o.blockName }), `${n.node}'s block is in its own cache`);
      }
    } finally {
      await Promise.all(nodes.map((n) => n.stop()));
      await mgr.stop();
    }
  });

  describe('an answer read before its block reaches the node\'s cache (answered by hand; the cache started late)', () => {
    const POLL_MS = 1_000;
    const complete = (block: string) => ({
      addressBlockName: block,
      conditions: [{ type: 'Complete', status: 'True', reason: 'allocated', message: `allocated a block ${block}`, lastTransitionTime: new Date().toISOString().replace(/\.\d+Z$/, 'Z') }],
    });

    before(async () => {
      await createPool(admin, 'lag', { subnets: [{ ipv4: '10.22.0.0/24' }], blockSizeBits: 2 });
      await createNode(admin, 'lag-n1');
    });

    /** lag-n1's one request, once created. */
    const outstanding = (): Promise<BlockRequest> => eventually(async () => (await admin.list(Kinds.BlockRequest, { labelSelector: `${LABEL_NODE}=lag-n1` }))[0] ?? false, { timeoutMs: 10_000 });

    /**
     * coild's cache for lag-n1 (not started: its watch "lags") and a BlockRequester over real
     * connections, polling on a FakeClock; `advanceTo` steps it a poll at a time, letting each
     * poll's reads (real requests) settle before the next, however slow the machine.
     */
    function standIn() {
      const transport = new ApiTransport(cp.kubeConfig);
      const cache = new Cache(transport, silentLogger());
      declareCoildCache(cache, { nodeName: 'lag-n1', enableIpam: true, enableEgress: false } as CoildConfig);
      const client = new BlockReadCountingClient(transport, 'coild');
      const clock = new FakeClock();
      const requester = new BlockRequester({ cache, client, nodeName: 'lag-n1', logger: silentLogger(), pollMs: POLL_MS, clock, now: () => clock.now() });
      requester.start();
      return {
        cache, client, requester,
        async advanceTo(ms: number): Promise<void> {
          while (clock.now() + POLL_MS <= ms) {
            clock.advance(POLL_MS);
            await new Promise((res) => setImmediate(res));
            await until(() => client.inFlight === 0, 'the poll\'s reads settle');
            await new Promise((res) => setImmediate(res));
          }
        },
        /** Asks for a block of `lag`: the wait, its outcome once it has ended, and the request once created. */
        async ask(): Promise<{ waiting: Promise<BlockRequestOutcome>; ended: () => string | undefined; br: BlockRequest }> {
          let ended: string | undefined;
          const waiting = requester.request('lag', 120_000);
          void waiting.then((o) => (ended = o.kind));
          return { waiting, ended: () => ended, br: await outstanding() };
        },
        async stop(): Promise<void> {
          requester.stop();
          await cache.stop();
        },
      };
    }

    test('the apiserver holds the block: not lost after 10 s; allocated once the cache shows it', async () => {
      const n = standIn();
      try {
        const { waiting, ended, br } = await n.ask();
        await admin.create(Kinds.AddressBlock, {
          metadata: { name: 'lag-0', labels: { [LABEL_POOL]: 'lag', [LABEL_NODE]: 'lag-n1', [LABEL_REQUEST]: br.metadata!.uid! } },
          index: 0, ipv4: '10.22.0.0/30',
        });
        await admin.patchStatus(Kinds.BlockRequest, { name: br.metadata!.name! }, complete('lag-0'));
        // The answer is read at 2 s, the block at 12 s (and found), the next read due at 22 s.
        await n.advanceTo(15_000);
        assert.equal(n.client.blockReads, 1, 'the block read once, 10 s after the answer');
        assert.equal(ended(), undefined, 'not lost: the apiserver holds the block as this node\'s');
        n.cache.start();
        assert.deepEqual(await waiting, { kind: 'allocated', blockName: 'lag-0' });
        await eventually(async () => (await admin.get(Kinds.BlockRequest, { name: br.metadata!.name! })) === undefined, { timeoutMs: 10_000 });
      } finally {
        await n.stop();
      }
    });

    test('the apiserver does not hold the block: lost at the first read', async () => {
      const n = standIn();
      try {
        const { waiting, ended, br } = await n.ask();
        await admin.patchStatus(Kinds.BlockRequest, { name: br.metadata!.name! }, complete('lag-9'));
        await n.advanceTo(11_000);
        assert.equal(ended(), undefined, 'not given up before the block is read');
        await n.advanceTo(13_000);
        assert.deepEqual(await waiting, { kind: 'lost' });
        assert.equal(n.client.blockReads, 1);
      } finally {
        await n.stop();
      }
    });
  });

  describe('under a controller that does not label its blocks with the request (answered by hand, no controller running)', () => {
    let node: CoildStandIn;

    before(async () => {
      await createPool(admin, 'hand', { subnets: [{ ipv4: '10.21.0.0/24' }], blockSizeBits: 2 });
      await createNode(admin, 'hand-n1');
      node = new CoildStandIn(cp, 'hand-n1');
      await node.start();
    });
    after(async () => {
      await node?.stop();
    });

    /** The node's one request of pool `hand`, once created. */
    const outstanding = (): Promise<BlockRequest> => eventually(async () => (await admin.list(Kinds.BlockRequest, { labelSelector: `${LABEL_NODE}=hand-n1` }))[0] ?? false, { timeoutMs: 10_000 });

    test('status Complete with addressBlockName and an unlabelled block: resolves allocated, then deletes the request', async () => {
      const waiting = node.requester.request('hand', 30_000);
      const br = await outstanding();
      await admin.create(Kinds.AddressBlock, { metadata: { name: 'hand-0', labels: { [LABEL_POOL]: 'hand', [LABEL_NODE]: 'hand-n1' } }, index: 0, ipv4: '10.21.0.0/30' });
      await admin.patchStatus(Kinds.BlockRequest, { name: br.metadata!.name! }, {
        addressBlockName: 'hand-0',
        conditions: [{ type: 'Complete', status: 'True', reason: 'allocated', message: 'allocated a block hand-0', lastTransitionTime: new Date().toISOString().replace(/\.\d+Z$/, 'Z') }],
      });
      assert.deepEqual(await waiting, { kind: 'allocated', blockName: 'hand-0' });
      assert.equal((await admin.get(Kinds.AddressBlock, { name: 'hand-0' }))?.metadata?.labels?.[LABEL_REQUEST], undefined, 'the block carries no request label');
      await eventually(async () => (await admin.get(Kinds.BlockRequest, { name: br.metadata!.name! })) === undefined, { timeoutMs: 10_000 });
    });

    test('status Failed (out of blocks): resolves failed, then deletes the request', async () => {
      const waiting = node.requester.request('hand', 30_000);
      const br = await outstanding();
      const now = new Date().toISOString().replace(/\.\d+Z$/, 'Z');
      await admin.patchStatus(Kinds.BlockRequest, { name: br.metadata!.name! }, {
        conditions: [
          { type: 'Complete', status: 'True', reason: 'completed with failure', message: 'completed with failure', lastTransitionTime: now },
          { type: 'Failed', status: 'True', reason: 'out of blocks', message: 'pool hand does not have free blocks', lastTransitionTime: now },
        ],
      });
      assert.deepEqual(await waiting, { kind: 'failed', reason: 'out of blocks', message: 'pool hand does not have free blocks' });
      await eventually(async () => (await admin.get(Kinds.BlockRequest, { name: br.metadata!.name! })) === undefined, { timeoutMs: 10_000 });
    });
  });
});
