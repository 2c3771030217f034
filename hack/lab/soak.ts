/**
 * A soak of the stand-in lab (stand-in-lab.ts): randomised pod ADD/DEL from several workers, with faults interleaved, and
 * the invariant checker after every phase. At the end every pod is deleted and every block must
 * be released. Used by test/e2e/soak.test.ts (short) and `npm run soak` (long).
 *
 * Pods live in namespace `soak`, whose pool `soak` has 4-address blocks, so block requests are
 * frequent and faults land in the middle of them.
 */
import * as k8s from '@kubernetes/client-node';
import type { Violation } from '../../test/invariants/check.js';
import { eventually } from '../../test/envtest/control-plane.js';
import { kubectl } from '../../test/envtest/tools.js';
import type { StandInLab as Lab } from './stand-in-lab.js';
import type { LabNode } from './topology.js';
import { prng } from '../../test/support/prng.js';

/** Faults the soak can inject (issue 8 item 2). */
export const FAULTS = ['coild-kill', 'leader-kill', 'apiserver-restart', 'etcd-restart', 'node-remove', 'late-answer'] as const;
export type FaultName = (typeof FAULTS)[number];

export interface SoakOptions {
  /** Pod ADD + DEL operations to run. */
  readonly operations: number;
  /** Parallel workers (default 4). */
  readonly concurrency?: number;
  /** Upper bound on live pods (default 30). */
  readonly maxPods?: number;
  /** Faults to interleave, each once per round (default all). */
  readonly faults?: readonly FaultName[];
  /** Rounds of the fault list over the run (default 1). */
  readonly faultRounds?: number;
  /** PRNG seed (default: time). */
  readonly seed?: number;
  readonly log?: (message: string) => void;
}

export interface SoakReport {
  seed: number;
  operations: number;
  adds: number;
  dels: number;
  /** ADDs answered with a CNI error (expected while a fault is active); each was DEL'd. */
  addFailures: number;
  faults: { name: FaultName; ms: number }[];
  phases: number;
  violations: (Violation & { phase: number })[];
  blocksLeaked: number;
  addP50Ms: number;
  addP95Ms: number;
  durationMs: number;
}


const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const NS = 'soak';
/**
 * Operations the workers may run past a fault's start before it has finished: enough to land
 * ADDs and DELs in the middle of it, few enough that a slow fault (a 15 s leader failover) does
 * not let the workers use up the whole run while later faults would meet an idle system.
 */
const FAULT_WINDOW_OPS = 24;

/** Creates the soak pool (4-address blocks) and namespace. Idempotent. */
export async function prepareSoak(lab: Lab): Promise<void> {
  await kubectl(lab.cp.kubeconfigPath, ['apply', '-f', '-'], JSON.stringify({
    apiVersion: 'coil.cybozu.com/v2', kind: 'AddressPool', metadata: { name: NS }, spec: { blockSizeBits: 2, subnets: [{ ipv4: '10.121.0.0/16' }] },
  }));
  await kubectl(lab.cp.kubeconfigPath, ['apply', '-f', '-'], JSON.stringify({
    apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS, annotations: { 'coil.cybozu.com/pool': NS } },
  }));
}

/** Runs the soak; the lab must have been started with 2 controllers for `leader-kill`. */
export async function soak(lab: Lab, options: SoakOptions): Promise<SoakReport> {
  const seed = options.seed ?? Date.now() % 2 ** 31;
  const rand = prng(seed);
  const log = options.log ?? (() => undefined);
  const faults = options.faults ?? FAULTS;
  const rounds = options.faultRounds ?? 1;
  const schedule = Array.from({ length: faults.length * rounds }, (_, i) => ({
    at: Math.floor(((i + 1) * options.operations) / (faults.length * rounds + 1)),
    name: faults[i % faults.length]!,
  }));
  const report: SoakReport = { seed, operations: 0, adds: 0, dels: 0, addFailures: 0, faults: [], phases: 0, violations: [], blocksLeaked: 0, addP50Ms: 0, addP95Ms: 0, durationMs: 0 };
  const addTimes: number[] = [];
  const started = performance.now();
  const live = new Set<string>();
  const busy = new Set<string>();
  let next = 0;
  let issued = 0;
  let paused: Promise<void> | undefined;
  let inflight = 0;
  /** Index of the next fault not yet finished. */
  let faultIndex = 0;
  /** Set when the run fails: workers and the injector stop, so the process can exit. */
  let aborted = false;
  const opLimit = () => (faultIndex < schedule.length ? schedule[faultIndex]!.at + FAULT_WINDOW_OPS : options.operations);

  await prepareSoak(lab);
  log(`soak: seed ${seed}, ${options.operations} operations, faults ${schedule.map((f) => `${f.name}@${f.at}`).join(' ')}`);

  const deleteWithRetry = async (name: string) => {
    for (let attempt = 0; ; attempt++) {
      try {
        await lab.deletePod(name);
        return;
      } catch (err) {
        // DEL fails while coild is down; runtimes retry it until it succeeds.
        if (attempt >= 60) throw err;
        await sleep(500);
      }
    }
  };

  const worker = async () => {
    while (issued < options.operations && !aborted) {
      if (paused) await paused;
      if (issued >= Math.min(opLimit(), options.operations)) {
        await sleep(20);
        continue;
      }
      issued++;
      inflight++;
      try {
        const candidates = [...live].filter((n) => !busy.has(n));
        const add = candidates.length === 0 || (live.size < (options.maxPods ?? 30) && rand() < 0.55);
        if (add) {
          const name = `soak-${next++}`;
          busy.add(name);
          const node = lab.nodes[Math.floor(rand() * lab.nodes.length)]!;
          try {
            const pod = await lab.addPod(node, name, NS);
            addTimes.push(pod.addMs);
            live.add(name);
            report.adds++;
          } catch {
            report.addFailures++;
          }
          busy.delete(name);
        } else {
          const name = candidates[Math.floor(rand() * candidates.length)]!;
          busy.add(name);
          await deleteWithRetry(name);
          live.delete(name);
          busy.delete(name);
          report.dels++;
        }
      } finally {
        inflight--;
        report.operations++;
      }
    }
  };

  /** Stops the workers at a quiescent point, runs `fn`, resumes them. */
  const quiesce = async (fn: () => Promise<void>) => {
    let resume!: () => void;
    paused = new Promise((r) => (resume = r));
    await eventually(() => inflight === 0, { timeoutMs: 300_000, intervalMs: 20 });
    try {
      await fn();
    } finally {
      paused = undefined;
      resume();
    }
  };

  const checkPhase = async () => {
    report.phases++;
    // Settle: coild's GC reconciles allocations with veths periodically.
    const violations = await lab.check();
    for (const v of violations) report.violations.push({ ...v, phase: report.phases });
    log(`soak: phase ${report.phases} after ${report.operations} ops: ${live.size} pods, ${violations.length} violations`);
  };

  const injector = async () => {
    for (const fault of schedule) {
      await eventually(() => aborted || report.operations >= fault.at, { timeoutMs: 3_600_000, intervalMs: 50 });
      if (aborted) return;
      const t0 = performance.now();
      await injectFault(lab, fault.name, rand, log, {
        forget: (names) => names.forEach((n) => live.delete(n)),
        podsOn: (node) => [...live].filter((n) => lab.pods.get(n)?.node === node.name && !busy.has(n)),
        quiesce,
      });
      report.faults.push({ name: fault.name, ms: Math.round(performance.now() - t0) });
      await quiesce(checkPhase);
      faultIndex++;
    }
  };

  // A failure anywhere stops everything before it propagates; otherwise the workers would keep
  // polling for a fault that never finishes and the process would never exit.
  const guard = <T>(p: Promise<T>) => p.catch((err: unknown) => {
    aborted = true;
    throw err;
  });
  const runs = [guard(injector()), ...Array.from({ length: options.concurrency ?? 4 }, () => guard(worker()))];
  const settled = await Promise.allSettled(runs);
  const failed = settled.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failed) throw failed.reason;
  await quiesce(checkPhase);

  log(`soak: deleting ${live.size} pods`);
  for (const name of [...live]) await deleteWithRetry(name);
  live.clear();
  const custom = lab.cp.kubeConfig.makeApiClient(k8s.CustomObjectsApi);
  const blocksLeft = async () =>
    ((await custom.listClusterCustomObject({ group: 'coil.cybozu.com', version: 'v2', plural: 'addressblocks', labelSelector: `coil.cybozu.com/pool=${NS}` })) as { items: unknown[] }).items.length;
  await eventually(async () => (await blocksLeft()) === 0, { timeoutMs: 90_000, intervalMs: 500 }).catch(() => undefined);
  report.blocksLeaked = await blocksLeft();
  report.phases++;
  for (const v of await lab.check({ afterGc: true })) report.violations.push({ ...v, phase: report.phases });

  addTimes.sort((a, b) => a - b);
  report.addP50Ms = Math.round(addTimes[Math.floor(addTimes.length * 0.5)] ?? 0);
  report.addP95Ms = Math.round(addTimes[Math.floor(addTimes.length * 0.95)] ?? 0);
  report.durationMs = Math.round(performance.now() - started);
  return report;
}

interface FaultContext {
  /** The soak forgets pods the fault removed behind its back. */
  forget(names: string[]): void;
  podsOn(node: LabNode): string[];
  quiesce(fn: () => Promise<void>): Promise<void>;
}

/** Injects one fault while the workers keep running (unless the fault quiesces them). */
async function injectFault(lab: Lab, name: FaultName, rand: () => number, log: (m: string) => void, ctx: FaultContext): Promise<void> {
  const node = lab.nodes[Math.floor(rand() * lab.nodes.length)]!;
  log(`soak: fault ${name}${name === 'coild-kill' || name === 'node-remove' || name === 'late-answer' ? ` on ${node.name}` : ''}`);
  switch (name) {
    case 'coild-kill':
      await lab.stopCoild(node, { crash: true });
      await sleep(300);
      await lab.startCoild(node);
      return;
    case 'leader-kill': {
      const leader = await lab.leaderReplica();
      if (leader === undefined) throw new Error('no leader to kill');
      await lab.stopController({ replica: leader, crash: true });
      await eventually(async () => (await lab.leaderReplica()) !== undefined, { timeoutMs: 40_000, intervalMs: 250 });
      await lab.startController(leader);
      return;
    }
    case 'apiserver-restart':
      await lab.cp.stopApiServer();
      await sleep(1000);
      await lab.cp.startApiServer();
      return;
    case 'etcd-restart':
      await lab.cp.stopEtcd();
      await sleep(1000);
      await lab.cp.startEtcd();
      return;
    case 'node-remove':
      // The node dies with its pods: no CNI DEL runs; the Node object is deleted (as a cloud
      // controller would), the controller must collect its blocks; then the node comes back.
      await ctx.quiesce(async () => {
        const gone = ctx.podsOn(node);
        await lab.stopCoild(node, { crash: true });
        for (const pod of gone) await lab.forgetPod(pod);
        ctx.forget(gone);
        await lab.removeNode(node);
        const custom = lab.cp.kubeConfig.makeApiClient(k8s.CustomObjectsApi);
        await eventually(async () => ((await custom.listClusterCustomObject({ group: 'coil.cybozu.com', version: 'v2', plural: 'addressblocks', labelSelector: `coil.cybozu.com/node=${node.name}` })) as { items: unknown[] }).items.length === 0, { timeoutMs: 60_000, intervalMs: 250 });
        await lab.addNode(node);
      });
      return;
    case 'late-answer':
      // No controller: ADDs needing a block time out in coild; the answer arrives afterwards.
      await ctx.quiesce(async () => {
        const replicas = [...Array(lab.controllerPorts.length).keys()];
        for (const replica of replicas) await lab.stopController({ replica });
        const names: string[] = [];
        for (let i = 0; i < 6; i++) {
          const name = `late-${Date.now()}-${i}`;
          try {
            await lab.addPod(node, name, NS);
            names.push(name);
          } catch {
            break; // coild gave up waiting for a block
          }
        }
        for (const replica of replicas) await lab.startController(replica);
        for (const n of names) await lab.deletePod(n);
      });
      return;
  }
}
