/**
 * A soak of the stand-in lab (stand-in-lab.ts): randomised pod ADD/DEL from several workers, with faults interleaved, and
 * the invariant checker after every phase. At the end every pod is deleted and every block must
 * be released. Used by test/e2e/soak.test.ts (short) and `npm run soak` (long).
 *
 * Pods live in namespace `soak`, whose pool `soak` has 4-address blocks, so block requests are
 * frequent and faults land in the middle of them.
 */
import { copyFile, mkdir, readdir, writeFile } from 'node:fs/promises';
import { Kinds } from '../../src/api/v2/kinds.js';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as k8s from '@kubernetes/client-node';
import type { Violation } from '../../test/invariants/check.js';
import { isAnswered, type BlockRequest } from '../../src/api/v2/blockrequest.js';
import { eventually } from '../../test/envtest/control-plane.js';
import { kubectl } from '../../test/envtest/tools.js';
import { IpRunner, type BatchLine } from '../../src/netlink/iproute2/ip-runner.js';
import type { PluginObserver } from './stand-in-kubelet.js';
import { LAB_DIR, type StandInLab as Lab } from './stand-in-lab.js';
import type { LabNode } from './topology.js';
import { prng } from '../../test/support/prng.js';

/**
 * Faults the soak can inject. `gc-race` is not a failure but an interleaving: DELs and ADDs with
 * a GC pass of the same node landing at a random moment of each, checked before the next pass
 * could mend what a wrong decision did (see {@link injectFault}).
 */
export const FAULTS = ['coild-kill', 'leader-kill', 'apiserver-restart', 'etcd-restart', 'node-remove', 'late-answer', 'gc-race'] as const;
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
  /**
   * Where a failing run (an error, a violation or a leaked block) saves its logs, in a directory
   * named after the seed; the path is logged and put in the report. Default
   * `$COIL_SOAK_LOG_DIR`, else `<tmpdir>/coil-soak-logs`.
   */
  readonly logDir?: string;
}

export interface SoakReport {
  seed: number;
  operations: number;
  adds: number;
  dels: number;
  /** ADDs answered with a CNI error (expected while a fault is active); each was DEL'd. */
  addFailures: number;
  /**
   * Why each failed ADD failed: `<fault in progress, or "no fault">: <first line of the error>` →
   * count. An ADD that fails with no fault in progress is a defect the soak test reports.
   */
  addFailureReasons: Record<string, number>;
  /**
   * Each fault as injected: `ms` from its start until its phase check was done, `recoveredMs`
   * until the controller answered a BlockRequest again (the end of the fault's window).
   */
  faults: { name: FaultName; ms: number; recoveredMs: number }[];
  phases: number;
  violations: (Violation & { phase: number })[];
  blocksLeaked: number;
  addP50Ms: number;
  addP95Ms: number;
  durationMs: number;
  /** Where the logs of a failing run were saved. */
  logsSavedIn?: string;
  /**
   * Each ADD that failed with no fault in progress, with what a reader needs to place it: its node,
   * when (ms since the soak began), the last fault before it and how long after that fault's window
   * ended it failed. Any entry fails the soak test, and the run's logs are saved.
   */
  unexplainedAdds: { node: string; atMs: number; lastFault?: FaultName; sinceWindowEndMs?: number; error: string }[];
}


const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const NS = 'soak';
/**
 * Operations the workers may run past a fault's start before it has finished: enough to land
 * ADDs and DELs in the middle of it, few enough that a slow fault (a 15 s leader failover) does
 * not let the workers use up the whole run while later faults would meet an idle system.
 */
const FAULT_WINDOW_OPS = 24;
/** `gc-race`: pods each node holds when the race begins; they are the ones deleted, a few per round. */
const GC_RACE_PODS = 12;
/** `gc-race`: pods deleted at once on each node in a round. */
const GC_RACE_DELS_PER_ROUND = 2;
/**
 * `gc-race`: veth pairs added to every node once its pods are wired: a crowded node (Kubernetes
 * allows 110 pods, each with its veth, and other agents add links of their own). A GC pass then
 * reads the pods' links first and tens of ms of other links after them before it acts, as on a
 * busy production node, which is the window a DEL must fall into (2000 links: ~27 ms against ~5).
 */
const GC_RACE_CROWD_PAIRS = 1000;
/** `gc-race`: link group of the crowd ("SOAK"), deleted in one go at the end. */
const GC_RACE_CROWD_GROUP = 0x534f414b;
/**
 * `gc-race`: a GC pass of the pod's node is triggered (SIGHUP) at a random moment between these
 * many ms after the DEL's first plugin starts. Measured here under the soak's load: coild serves
 * the DEL 25–40 ms after the chain starts (portmap runs first), in 1–8 ms; a pass reads the pods'
 * links 5–15 ms after it starts.
 */
const GC_RACE_TRIGGER_MS = [0, 35] as const;
/** `gc-race`: time for the triggered passes to end before the check (a pass takes 30–80 ms on a crowded node). */
const GC_RACE_SETTLE_MS = 200;

/** Creates the soak pool (4-address blocks) and namespace. Idempotent. */
export async function prepareSoak(lab: Lab): Promise<void> {
  await kubectl(lab.cp.kubeconfigPath, ['apply', '-f', '-'], JSON.stringify({
    apiVersion: 'coil.cybozu.com/v2', kind: 'AddressPool', metadata: { name: NS }, spec: { blockSizeBits: 2, subnets: [{ ipv4: '10.121.0.0/16' }] },
  }));
  await kubectl(lab.cp.kubeconfigPath, ['apply', '-f', '-'], JSON.stringify({
    apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS, annotations: { 'coil.cybozu.com/pool': NS } },
  }));
}

/**
 * Runs the soak; the lab must have been started with 2 controllers for `leader-kill`. A failing
 * run saves the lab's logs first ({@link SoakOptions.logDir}).
 * @throws what stopped the run (a fault that did not heal, an operation that kept failing), with
 *   the seed and the saved logs' path in its message
 */
export async function soak(lab: Lab, options: SoakOptions): Promise<SoakReport> {
  const seed = options.seed ?? Date.now() % 2 ** 31;
  const log = options.log ?? (() => undefined);
  const logDir = options.logDir ?? process.env.COIL_SOAK_LOG_DIR ?? join(tmpdir(), 'coil-soak-logs');
  let report: SoakReport;
  try {
    report = await runSoak(lab, { ...options, seed, log });
  } catch (err) {
    const dir = await saveLogs(lab, logDir, seed, { error: String(err instanceof Error ? err.stack : err) });
    log(`soak: seed ${seed} failed; logs saved in ${dir}`);
    throw new Error(`soak with seed ${seed} failed (logs in ${dir}): ${err instanceof Error ? err.message : String(err)}`, { cause: err });
  }
  if (report.violations.length > 0 || report.blocksLeaked > 0 || report.unexplainedAdds.length > 0) {
    report.logsSavedIn = await saveLogs(lab, logDir, seed, report);
    log(`soak: seed ${seed}: ${report.violations.length} violations, ${report.blocksLeaked} leaked blocks, ${report.unexplainedAdds.length} ADDs failed outside a fault's window; logs saved in ${report.logsSavedIn}`);
  }
  return report;
}

/**
 * Copies every log of the lab (coild, BIRD and relays per node, the controllers, the control
 * plane) and the kubelet's CNI cache into `<dir>/seed-<seed>-<time>/`, with `what` as
 * `report.json`. @returns that directory
 */
async function saveLogs(lab: Lab, dir: string, seed: number, what: object): Promise<string> {
  const out = join(dir, `seed-${seed}-${new Date().toISOString().replace(/[:.]/g, '-')}`);
  await copyLogs(LAB_DIR, join(out, 'lab'));
  await copyLogs(lab.cp.dir, join(out, 'control-plane'));
  await writeFile(join(out, 'report.json'), JSON.stringify(what, null, 2));
  return out;
}

/**
 * Copies the regular files under `from` that a reader of a failed run wants (logs, BIRD configs,
 * the CNI cache), leaving out sockets, keys, certificates and etcd's data.
 */
async function copyLogs(from: string, to: string): Promise<void> {
  await mkdir(to, { recursive: true });
  for (const e of await readdir(from, { withFileTypes: true }).catch(() => [])) {
    const src = join(from, e.name);
    if (e.isDirectory() && !/^(etcd|certs|.*-certs)$/.test(e.name)) await copyLogs(src, join(to, e.name));
    else if (e.isFile() && !/\.(key|crt|pem|kubeconfig)$/.test(e.name)) await copyFile(src, join(to, e.name)).catch(() => undefined);
  }
}

async function runSoak(lab: Lab, options: SoakOptions & { seed: number; log: (message: string) => void }): Promise<SoakReport> {
  const seed = options.seed;
  const rand = prng(seed);
  const log = options.log;
  const faults = options.faults ?? FAULTS;
  const rounds = options.faultRounds ?? 1;
  const schedule = Array.from({ length: faults.length * rounds }, (_, i) => ({
    at: Math.floor(((i + 1) * options.operations) / (faults.length * rounds + 1)),
    name: faults[i % faults.length]!,
  }));
  const report: SoakReport = { seed, operations: 0, adds: 0, dels: 0, addFailures: 0, addFailureReasons: {}, unexplainedAdds: [], faults: [], phases: 0, violations: [], blocksLeaked: 0, addP50Ms: 0, addP95Ms: 0, durationMs: 0 };
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
  /** The fault being injected, from its start until its phase check is done. */
  let activeFault: FaultName | undefined;
  /** When the last fault's window ended (ms since the soak began). */
  let lastWindowEnd: { fault: FaultName; atMs: number } | undefined;
  const addFailed = (err: unknown, node: LabNode) => {
    report.addFailures++;
    const line = (err instanceof Error ? err.message : String(err)).split('\n')[0]!.slice(0, 200);
    const key = `${activeFault ?? 'no fault'}: ${line}`;
    report.addFailureReasons[key] = (report.addFailureReasons[key] ?? 0) + 1;
    if (activeFault === undefined) {
      const atMs = Math.round(performance.now() - started);
      const entry = { node: node.name, atMs, lastFault: lastWindowEnd?.fault, sinceWindowEndMs: lastWindowEnd && atMs - lastWindowEnd.atMs, error: line };
      report.unexplainedAdds.push(entry);
      log(`soak: ADD failed outside a fault's window: ${JSON.stringify(entry)}`);
    }
  };
  const opLimit = () => (faultIndex < schedule.length ? schedule[faultIndex]!.at + FAULT_WINDOW_OPS : options.operations);

  await prepareSoak(lab);
  log(`soak: seed ${seed}, ${options.operations} operations, faults ${schedule.map((f) => `${f.name}@${f.at}`).join(' ')}`);

  const deleteWithRetry = async (name: string, observe?: PluginObserver) => {
    for (let attempt = 0; ; attempt++) {
      try {
        await lab.deletePod(name, observe ? { observe } : {});
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
          } catch (err) {
            addFailed(err, node);
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
      activeFault = fault.name;
      await injectFault(lab, fault.name, rand, log, {
        forget: (names) => names.forEach((n) => live.delete(n)),
        podsOn: (node) => [...live].filter((n) => lab.pods.get(n)?.node === node.name && !busy.has(n)),
        quiesce,
        deletePod: async (name, observe) => {
          await deleteWithRetry(name, observe);
          live.delete(name);
          report.dels++;
        },
        addPod: async (node, observe) => {
          const name = `soak-${next++}`;
          try {
            await lab.addPod(node, name, NS, { observe });
            live.add(name);
            report.adds++;
          } catch (err) {
            addFailed(err, node);
          }
        },
        checkPhase,
      });
      const ms = Math.round(performance.now() - t0);
      await quiesce(checkPhase);
      // The fault's window ends when the system serves again what its ADDs need from the control
      // plane, not when the fault's own steps returned: an ADD failing after this is a defect.
      await blockRequestAnswered(lab, lab.nodes[0]!);
      report.faults.push({ name: fault.name, ms, recoveredMs: Math.round(performance.now() - t0) });
      lastWindowEnd = { fault: fault.name, atMs: Math.round(performance.now() - started) };
      activeFault = undefined;
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
    ((await custom.listClusterCustomObject({ group: Kinds.AddressBlock.group, version: Kinds.AddressBlock.version, plural: Kinds.AddressBlock.plural, labelSelector: `coil.cybozu.com/pool=${NS}` })) as { items: unknown[] }).items.length;
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

/**
 * The soak's recovery probe: creates a BlockRequest of pool `soak` for `node` and waits until the
 * leading controller has answered it (allocated or failed), retrying through API errors; then
 * deletes it. The block it may carve is an unused one that the node's coild releases after its
 * grace period, as for an answer that arrives late.
 * @throws Error when no answer came within 90 s
 */
async function blockRequestAnswered(lab: Lab, node: LabNode): Promise<void> {
  const custom = lab.cp.kubeConfig.makeApiClient(k8s.CustomObjectsApi);
  const ref = { group: Kinds.BlockRequest.group, version: Kinds.BlockRequest.version, plural: Kinds.BlockRequest.plural };
  let name: string | undefined;
  try {
    await eventually(async () => {
      name ??= ((await custom.createClusterCustomObject({ ...ref, body: {
        apiVersion: 'coil.cybozu.com/v2', kind: 'BlockRequest', metadata: { generateName: 'soak-probe-' }, spec: { nodeName: node.name, poolName: NS },
      } })) as BlockRequest).metadata!.name!;
      return isAnswered(((await custom.getClusterCustomObject({ ...ref, name })) as BlockRequest).status);
    }, { timeoutMs: 90_000, intervalMs: 100 });
  } finally {
    if (name !== undefined) {
      const created = name;
      await eventually(async () => {
        await custom.deleteClusterCustomObject({ ...ref, name: created }).catch((e: unknown) => {
          if ((e as { code?: number }).code !== 404) throw e;
        });
        return true;
      }, { timeoutMs: 30_000, intervalMs: 250 });
    }
  }
}

interface FaultContext {
  /** The soak forgets pods the fault removed behind its back. */
  forget(names: string[]): void;
  podsOn(node: LabNode): string[];
  quiesce(fn: () => Promise<void>): Promise<void>;
  /** DEL of a live pod, counted as an operation's would be; `observe` sees each plugin run. */
  deletePod(name: string, observe?: PluginObserver): Promise<void>;
  /** ADD of a new soak pod on `node` (a failure is counted, not thrown). */
  addPod(node: LabNode, observe?: PluginObserver): Promise<void>;
  /** Checks the invariants now, as a phase of its own. */
  checkPhase(): Promise<void>;
}

/** Injects one fault while the workers keep running (unless the fault quiesces them). */
async function injectFault(lab: Lab, name: FaultName, rand: () => number, log: (m: string) => void, ctx: FaultContext): Promise<void> {
  const node = lab.nodes[Math.floor(rand() * lab.nodes.length)]!;
  log(`soak: fault ${name}${name === 'coild-kill' || name === 'node-remove' || name === 'late-answer' ? ` on ${node.name}` : name === 'gc-race' ? ` (${GC_RACE_PODS} pods per node, deleted ${GC_RACE_DELS_PER_ROUND} at a time among ${2 * GC_RACE_CROWD_PAIRS} other links)` : ''}`);
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
        await eventually(async () => ((await custom.listClusterCustomObject({ group: Kinds.AddressBlock.group, version: Kinds.AddressBlock.version, plural: Kinds.AddressBlock.plural, labelSelector: `coil.cybozu.com/node=${node.name}` })) as { items: unknown[] }).items.length === 0, { timeoutMs: 60_000, intervalMs: 250 });
        await lab.addNode(node);
      });
      return;
    case 'gc-race':
      // The race of issue 15: a GC pass reads the host, and a DEL of a pod changes it before the
      // pass acts on what it read. Every node gets GC_RACE_PODS pods and then a crowd of links,
      // so that each pass reads the pods early and reads on for a while; each round deletes a few
      // pods per node with a pass of that node's GC started at a random moment of each DEL, and
      // the invariants are checked once the passes are over, before the next pass (the periodic
      // one runs every 5 s) could mend a wrong decision and hide it.
      await ctx.quiesce(async () => {
        await Promise.all(lab.nodes.map(async (n) => {
          for (let i = ctx.podsOn(n).length; i < GC_RACE_PODS; i++) await ctx.addPod(n);
        }));
        const victims = new Map(lab.nodes.map((n) => [n, ctx.podsOn(n).sort(() => rand() - 0.5)]));
        await Promise.all(lab.nodes.map((n) => crowd(n, 'add')));
        try {
          while ([...victims.values()].some((v) => v.length > 0)) {
            await Promise.all(lab.nodes.map(async (n) => {
              const now = victims.get(n)!.splice(0, GC_RACE_DELS_PER_ROUND);
              await Promise.all(now.map((v) => ctx.deletePod(v, gcDuringCall(lab, n, rand))));
            }));
            await sleep(GC_RACE_SETTLE_MS);
            await ctx.checkPhase();
          }
        } finally {
          await Promise.all(lab.nodes.map((n) => crowd(n, 'remove')));
        }
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

/** Adds or removes the `gc-race` crowd of links in `node`'s namespace. */
async function crowd(node: LabNode, what: 'add' | 'remove'): Promise<void> {
  const group = String(GC_RACE_CROWD_GROUP);
  const lines: BatchLine[] = what === 'remove'
    ? [['link', 'del', 'group', group]]
    : Array.from({ length: GC_RACE_CROWD_PAIRS }, (_, i) => ['link', 'add', 'name', `crowd${i}`, 'group', group, 'type', 'veth', 'peer', 'name', `crowdp${i}`, 'group', group]);
  await new IpRunner().batch(lines, { netns: node.netnsPath });
}

/**
 * A plugin observer that triggers one GC pass of `node` at a random moment of the CNI call, drawn
 * from {@link GC_RACE_TRIGGER_MS} after its first plugin starts.
 */
function gcDuringCall(lab: Lab, node: LabNode, rand: () => number): PluginObserver {
  let armed = true;
  return (_command, _plugin, running) => {
    if (!running || !armed) return;
    armed = false;
    const [from, to] = GC_RACE_TRIGGER_MS;
    setTimeout(() => lab.triggerGc(node), from + rand() * (to - from));
  };
}
