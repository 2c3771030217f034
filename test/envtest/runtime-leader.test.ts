/**
 * Lease leader election between Managers sharing one Lease on a real kube-apiserver: exactly one
 * reconciles; a leader that stops without releasing (a crash, as far as the Lease can tell) is
 * replaced once the lease expires; a clean shutdown releases the Lease and hands over at once.
 *
 * Durations are shortened (lease 4 s, renew deadline 3 s, retry 0.5 s) to keep the suite quick;
 * bounds are stated in those units.
 */
import 'reflect-metadata';
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { after, before, describe, test } from 'node:test';
import { Container, inject } from 'inversify';
import { ApiTransport } from '../../src/runtime/api-transport.js';
import { Client } from '../../src/runtime/client.js';
import { Reconciler } from '../../src/runtime/decorators.js';
import type { Result } from '../../src/runtime/errors.js';
import { keyOf } from '../../src/runtime/kind.js';
import { Kinds } from '../../src/api/v2/kinds.js';
import { microTime } from '../../src/runtime/leader-election.js';
import type { Manager, ManagerOptions } from '../../src/runtime/manager.js';
import { sleep } from '../../src/runtime/clock.js';
import { Registry, type Reconcile, type ReconcileContext, type Request } from '../../src/runtime/registry.js';
import { TOKENS } from '../../src/runtime/tokens.js';
import { ControlPlane, eventually } from './control-plane.js';
import { createNamespace, metricValue, sampleCrd, sampleKind, scrape, testManager } from './runtime-support.js';

const Token = sampleKind('Token');
/** Reconciled slowly: `honours-*` objects until the signal aborts (or 3 s), `ignores-*` for 8 s whatever happens. */
const Chore = sampleKind('Chore');
const NS = 'rt-leader';
const LEASE = { name: 'rt-leader', namespace: NS, leaseDurationMs: 4_000, renewDeadlineMs: 3_000, retryPeriodMs: 500 };
const RECONCILES = Symbol('reconciles');

/** Which manager reconciled which key. */
type Reconciles = { identity: string; key: string }[];

const registry = new Registry();

@Reconciler({ name: 'token', for: Token, registry, leaderOnly: true })
class TokenReconciler implements Reconcile {
  constructor(
    @inject(TOKENS.Manager) private readonly mgr: Manager,
    @inject(RECONCILES) private readonly log: Reconciles,
  ) {}

  async reconcile(req: Request): Promise<Result> {
    this.log.push({ identity: this.mgr.identity, key: keyOf(req) });
    return {};
  }
}

/** When (performance.now) each slow reconcile began and returned, and whether its signal was aborted. */
const chores = new Map<string, { startedAt: number; returnedAt?: number; aborted?: boolean }>();

@Reconciler({ name: 'chore', for: Chore, registry, leaderOnly: true })
class ChoreReconciler implements Reconcile {
  async reconcile(req: Request, ctx: ReconcileContext): Promise<Result> {
    if (chores.has(req.name)) return {}; // only the first reconcile of each is slow
    const entry: { startedAt: number; returnedAt?: number; aborted?: boolean } = { startedAt: performance.now() };
    chores.set(req.name, entry);
    await sleep(req.name.startsWith('ignores') ? 8_000 : 3_000, req.name.startsWith('ignores') ? undefined : ctx.signal);
    entry.aborted = ctx.signal?.aborted;
    entry.returnedAt = performance.now();
    return {};
  }
}

/** Resolves with the time (performance.now) at which `mgr` leads, polling every 20 ms. */
async function leadsAt(mgr: Manager, timeoutMs: number): Promise<number> {
  await eventually(() => mgr.isLeader(), { timeoutMs, intervalMs: 20 });
  return performance.now();
}

describe('runtime: leader election over a Lease', () => {
  let cp: ControlPlane;
  let client: Client;
  const reconciles: Reconciles = [];
  const managers: Manager[] = [];
  const lost: string[] = [];

  const start = async (identity: string, extra: Partial<ManagerOptions> = {}): Promise<Manager> => {
    const container = new Container();
    container.bind(RECONCILES).toConstantValue(reconciles);
    const mgr = testManager(cp, registry, { identity, container, leaderElection: LEASE, onLeadershipLost: () => lost.push(identity), ...extra });
    managers.push(mgr);
    await mgr.start();
    return mgr;
  };

  before(async () => {
    cp = await ControlPlane.start({ crds: [sampleCrd(Token), sampleCrd(Chore)] });
    await createNamespace(cp, NS);
    client = new Client(new ApiTransport(cp.kubeConfig), 'test');
  });
  after(async () => {
    for (const m of managers) await m.stop();
    await cp?.stop();
  });

  test('with two managers on one Lease exactly one reconciles', async () => {
    const a = await start('manager-a');
    await leadsAt(a, 10_000);
    const b = await start('manager-b');
    for (let i = 0; i < 5; i++) await client.create(Token, { metadata: { name: `t${i}`, namespace: NS } });
    await eventually(() => new Set(reconciles.map((r) => r.key)).size === 5);
    await new Promise((r) => setTimeout(r, 2 * LEASE.retryPeriodMs));
    assert.deepEqual([...new Set(reconciles.map((r) => r.identity))], ['manager-a']);
    assert.equal(a.isLeader(), true);
    assert.equal(b.isLeader(), false);
    assert.equal(metricValue(await scrape(a.ports.metrics!), 'leader_election_master_status', { name: LEASE.name }), 1);
    assert.equal(metricValue(await scrape(b.ports.metrics!), 'leader_election_master_status', { name: LEASE.name }), 0);
    const lease = await client.get(Kinds.Lease, { namespace: NS, name: LEASE.name });
    assert.equal(lease?.spec?.holderIdentity, 'manager-a');
  });

  test('a leader stopped without releasing is replaced once the lease expires, not before', async (t) => {
    const [a, b] = managers as [Manager, Manager];
    await a.stop({ releaseLease: false });
    const killedAt = performance.now();
    const takeoverMs = (await leadsAt(b, 3 * LEASE.leaseDurationMs)) - killedAt;
    t.diagnostic(`takeover after an unreleased stop: ${Math.round(takeoverMs)} ms (lease ${LEASE.leaseDurationMs} ms)`);
    // The standby counts the lease duration from when it last saw a renewal (at most one retry
    // period before the stop), then needs one more attempt to write the Lease.
    assert.ok(takeoverMs >= LEASE.leaseDurationMs - 2 * LEASE.retryPeriodMs, `lease stolen early: ${takeoverMs} ms`);
    assert.ok(takeoverMs <= LEASE.leaseDurationMs + 3 * LEASE.retryPeriodMs, `takeover too slow: ${takeoverMs} ms`);
    await eventually(() => reconciles.filter((r) => r.identity === 'manager-b').length >= 5);
    const lease = await client.get(Kinds.Lease, { namespace: NS, name: LEASE.name });
    assert.equal(lease?.spec?.holderIdentity, 'manager-b');
    assert.equal(lease?.spec?.leaseTransitions, 1);
  });

  test('a clean shutdown releases the Lease and a standby takes over at once', async (t) => {
    const b = managers[1]!;
    const c = await start('manager-c');
    await new Promise((r) => setTimeout(r, 2 * LEASE.retryPeriodMs));
    assert.equal(c.isLeader(), false);
    await b.stop();
    const stoppedAt = performance.now();
    const handoverMs = (await leadsAt(c, LEASE.leaseDurationMs)) - stoppedAt;
    t.diagnostic(`handover after a clean shutdown: ${Math.round(handoverMs)} ms`);
    assert.ok(handoverMs < LEASE.leaseDurationMs / 2, `handover waited for expiry: ${handoverMs} ms`);
    assert.deepEqual(lost, [], 'no manager lost its lease involuntarily');
  });

  test('a leader that cannot renew gives up within the renew deadline and reports the loss', async (t) => {
    const c = managers[2]!;
    assert.equal(c.isLeader(), true);
    // Another writer takes the Lease over and keeps renewing it, as a split-brain peer would.
    const hijacked = performance.now();
    const stop = new AbortController();
    const intruder = (async () => {
      while (!stop.signal.aborted) {
        const lease = await client.get(Kinds.Lease, { namespace: NS, name: LEASE.name });
        await client.update(Kinds.Lease, { ...lease!, spec: { ...lease!.spec, holderIdentity: 'intruder', renewTime: microTime() } }).catch(() => undefined);
        await new Promise((r) => setTimeout(r, 200));
      }
    })();
    try {
      await eventually(() => lost.includes('manager-c'), { timeoutMs: 3 * LEASE.leaseDurationMs, intervalMs: 20 });
      const lostAfterMs = performance.now() - hijacked;
      t.diagnostic(`leadership given up ${Math.round(lostAfterMs)} ms after the Lease was taken`);
      assert.ok(lostAfterMs <= LEASE.renewDeadlineMs + 3 * LEASE.retryPeriodMs, `gave up late: ${lostAfterMs} ms`);
      assert.equal(c.isLeader(), false);
    } finally {
      stop.abort();
      await intruder;
    }
  });

  test('SIGTERM shuts down gracefully: lease released, exit code 0', async () => {
    const d = await start('manager-d');
    await leadsAt(d, 3 * LEASE.leaseDurationMs);
    const proc = new EventEmitter() as unknown as NodeJS.Process;
    const exited = new Promise<number>((resolve) => d.handleSignals(resolve, proc));
    proc.emit('SIGTERM', 'SIGTERM');
    assert.equal(await exited, 0);
    assert.equal(d.isLeader(), false);
    const lease = await client.get(Kinds.Lease, { namespace: NS, name: LEASE.name });
    assert.equal(lease?.spec?.holderIdentity, '', 'released for the next leader');
  });

  /** Resolves with the time at which the Lease no longer names `identity` (polled every 20 ms). */
  const leaseLeftAt = async (identity: string, timeoutMs: number): Promise<number> => {
    await eventually(async () => (await client.get(Kinds.Lease, { namespace: NS, name: LEASE.name }))?.spec?.holderIdentity !== identity, { timeoutMs, intervalMs: 20 });
    return performance.now();
  };

  test('a reconcile still running at the drain deadline is aborted, and the Lease is released only after it returned', async (t) => {
    const e = await start('manager-e', { gracefulShutdownTimeoutMs: 300 });
    await leadsAt(e, 3 * LEASE.leaseDurationMs);
    await client.create(Chore, { metadata: { name: 'honours-1', namespace: NS } });
    await eventually(() => chores.has('honours-1'));
    const stopping = e.stop();
    const releasedAt = await leaseLeftAt('manager-e', 2 * LEASE.leaseDurationMs);
    await stopping;
    const chore = chores.get('honours-1')!;
    assert.ok(chore.returnedAt !== undefined && chore.returnedAt <= releasedAt, 'the Lease was released while the reconcile still ran');
    t.diagnostic(`reconcile returned ${Math.round(chore.returnedAt - chore.startedAt)} ms after it began; Lease released ${Math.round(releasedAt - chore.returnedAt)} ms after it returned`);
    assert.equal(chore.aborted, true, 'the reconcile\'s signal was aborted');
    const lease = await client.get(Kinds.Lease, { namespace: NS, name: LEASE.name });
    assert.equal(lease?.spec?.holderIdentity, '', 'released, not expired');
  });

  test('a reconcile that ignores its aborted signal keeps the Lease from being released', async () => {
    const f = await start('manager-f', { gracefulShutdownTimeoutMs: 300 });
    await leadsAt(f, 3 * LEASE.leaseDurationMs);
    await client.create(Chore, { metadata: { name: 'ignores-1', namespace: NS } });
    await eventually(() => chores.has('ignores-1'));
    await f.stop();
    assert.equal(chores.get('ignores-1')!.returnedAt, undefined, 'still running');
    const lease = await client.get(Kinds.Lease, { namespace: NS, name: LEASE.name });
    assert.equal(lease?.spec?.holderIdentity, 'manager-f', 'not released while the reconcile runs');
    await eventually(() => chores.get('ignores-1')!.returnedAt !== undefined, { timeoutMs: 10_000 });
  });
});
