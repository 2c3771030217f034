/**
 * A soak of the real-node lab (cluster.ts): several workers create and delete pods through the API
 * at random — each started by its node's kubelet through containerd and libcni, which runs the
 * `coil` the chart installed — while faults of real parts are injected at moments and in an order
 * drawn from the seed; the invariant checker runs at a quiet point after each fault. At the end
 * every soak pod is deleted and every block of the soak's pool must be released (coild's block
 * release grace, then the controller). Used by test/e2e/real-nodes.test.ts.
 *
 * The stand-in lab's soak (soak.ts) drives CNI calls itself and so can land a fault inside one
 * call; here kubelet makes the calls, so a fault lands wherever the pods' startups and teardowns
 * happen to be.
 *
 * A node removal is not among the faults: this lab cannot add a node back, and the suite's fault
 * tests remove one (the last of them) after the soak.
 */
import * as k8s from '@kubernetes/client-node';
import { Kinds } from '../../src/api/v2/kinds.js';
import { eventually } from '../../test/envtest/control-plane.js';
import type { Violation } from '../../test/invariants/check.js';
import { prng } from '../../test/support/prng.js';
import { percentile } from '../bench/pod-startup.js';
import { RELEASE_NAMESPACE, workloadPodSpec, type Cluster } from './cluster.js';

/** Faults of real parts the soak injects. */
export const REAL_FAULTS = ['coild-kill', 'kubelet-restart', 'leader-delete', 'apiserver-restart', 'etcd-restart'] as const;
export type RealFault = (typeof REAL_FAULTS)[number];

/** The soak's namespace; its pool of the same name has 4-address blocks, so block requests are frequent. */
export const SOAK_NAMESPACE = 'e2e-soak';
/** The soak pool's subnet (apart from the lab's POD_RANGE and the fault tests' pool). */
export const SOAK_RANGE = '10.123.0.0/16';

export interface RealSoakOptions {
  /** Pod creations and deletions to run. */
  readonly operations: number;
  /** Parallel workers (default 4). */
  readonly concurrency?: number;
  /** Upper bound on live soak pods (default 24). */
  readonly maxPods?: number;
  /** Rounds of {@link REAL_FAULTS}, each round in its own order drawn from the seed (default 1). */
  readonly faultRounds?: number;
  /** PRNG seed (default: time). */
  readonly seed?: number;
  /** How long a pod may take to be Ready, or to be gone, before the operation counts as failed (ms, default 120 s). */
  readonly podTimeoutMs?: number;
  readonly log?: (message: string) => void;
}

export interface RealSoakReport {
  seed: number;
  operations: number;
  creates: number;
  deletes: number;
  /** Pods not Ready with an address within the timeout (each then deleted): `<fault or "no fault">: <why>` → count. */
  createFailures: Record<string, number>;
  faults: { name: RealFault; node?: string; atOperation: number; ms: number }[];
  phases: number;
  violations: (Violation & { phase: number })[];
  /** Blocks of the soak's pool left once every soak pod is gone and the release grace has passed. */
  blocksLeaked: number;
  /** Created → Ready with an address, per successful creation (ms). */
  startupP50Ms: number;
  startupP95Ms: number;
  startupMaxMs: number;
  durationMs: number;
}

/**
 * Operations the workers may run past a fault's start before it has finished: enough to land pod
 * startups and teardowns in the middle of it, few enough that later faults do not meet an idle run.
 */
const FAULT_WINDOW_OPS = 12;
/** How long the invariant checker reads the view again while it does not hold (a pod in teardown is not a violation). */
const SETTLE_MS = 30_000;
/** How long the leaked-block check waits for the soak pool's blocks to go (coild's release grace is 1 min by default). */
const RELEASE_WAIT_MS = 180_000;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const isNotFound = (err: unknown) => err instanceof k8s.ApiException && err.code === 404;

/** The fault schedule: `rounds` rounds of {@link REAL_FAULTS}, each shuffled by `rand`, spread evenly over `operations` (pure given `rand`). */
export function realFaultSchedule(operations: number, rounds: number, rand: () => number): { at: number; name: RealFault }[] {
  const names: RealFault[] = [];
  for (let r = 0; r < rounds; r++) {
    const round = [...REAL_FAULTS];
    for (let i = round.length - 1; i > 0; i--) {
      const j = Math.floor(rand() * (i + 1));
      [round[i], round[j]] = [round[j]!, round[i]!];
    }
    names.push(...round);
  }
  return names.map((name, i) => ({ name, at: Math.floor(((i + 1) * operations) / (names.length + 1)) }));
}

/**
 * Runs the soak on `cluster` (at least 2 nodes and 2 coil-controller replicas for leader-delete).
 * Leaves the cluster as it found it: the soak's pods, namespace and pool are removed.
 * @throws when a fault does not heal (e.g. coild not Ready again within 2 min), with the seed in its message
 */
export async function realSoak(cluster: Cluster, options: RealSoakOptions): Promise<RealSoakReport> {
  const seed = options.seed ?? Date.now() % 2 ** 31;
  try {
    return await runSoak(cluster, { ...options, seed });
  } catch (err) {
    throw new Error(`real-node soak with seed ${seed} failed: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
  }
}

async function runSoak(cluster: Cluster, options: RealSoakOptions & { seed: number }): Promise<RealSoakReport> {
  const { seed } = options;
  const rand = prng(seed);
  const log = options.log ?? (() => undefined);
  const podTimeoutMs = options.podTimeoutMs ?? 120_000;
  const core = cluster.api(k8s.CoreV1Api);
  const custom = cluster.api(k8s.CustomObjectsApi);
  const schedule = realFaultSchedule(options.operations, options.faultRounds ?? 1, rand);
  const report: RealSoakReport = {
    seed, operations: 0, creates: 0, deletes: 0, createFailures: {}, faults: [], phases: 0, violations: [],
    blocksLeaked: 0, startupP50Ms: 0, startupP95Ms: 0, startupMaxMs: 0, durationMs: 0,
  };
  const started = performance.now();
  const startups: number[] = [];
  const live = new Set<string>();
  const busy = new Set<string>();
  let next = 0;
  let issued = 0;
  let inflight = 0;
  let faultIndex = 0;
  let paused: Promise<void> | undefined;
  let aborted = false;
  let activeFault: RealFault | undefined;

  await cluster.kubectl(['apply', '-f', '-'], [
    JSON.stringify({ apiVersion: 'coil.cybozu.com/v2', kind: 'AddressPool', metadata: { name: 'soak' }, spec: { blockSizeBits: 2, subnets: [{ ipv4: SOAK_RANGE }] } }),
    JSON.stringify({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: SOAK_NAMESPACE, annotations: { 'coil.cybozu.com/pool': 'soak' } } }),
  ].join('\n'));
  log(`real soak: seed ${seed}, ${options.operations} operations, faults ${schedule.map((f) => `${f.name}@${f.at}`).join(' ')}`);

  /** Retries `fn` through apiserver and etcd restarts until `deadline`. */
  const retrying = async <T>(what: string, deadline: number, fn: () => Promise<T | false>): Promise<T> => {
    for (;;) {
      const value = await fn().catch(() => false as const);
      if (value !== false) return value;
      if (Date.now() > deadline) throw new Error(`${what}: not done in time`);
      await sleep(250);
    }
  };

  /** Why pod `name` is not Ready: its newest Warning event, else its phase. */
  const whyNotReady = async (name: string): Promise<string> => {
    const events = (await core.listNamespacedEvent({ namespace: SOAK_NAMESPACE, fieldSelector: `involvedObject.name=${name}` }).catch(() => undefined))?.items ?? [];
    const warning = events.filter((e) => e.type === 'Warning').sort((a, b) => String(a.lastTimestamp ?? '').localeCompare(String(b.lastTimestamp ?? ''))).at(-1);
    if (warning) return `${warning.reason}: ${(warning.message ?? '').split('\n')[0]!.slice(0, 160)}`;
    const pod = await core.readNamespacedPod({ name, namespace: SOAK_NAMESPACE }).catch(() => undefined);
    return `not Ready (phase ${pod?.status?.phase ?? 'unknown'})`;
  };

  const deletePod = async (name: string): Promise<void> => {
    const deadline = Date.now() + podTimeoutMs;
    await retrying(`delete ${name}`, deadline, async () => {
      await core.deleteNamespacedPod({ name, namespace: SOAK_NAMESPACE }).catch((err: unknown) => { if (!isNotFound(err)) throw err; });
      return true;
    });
    await retrying(`${name} gone`, deadline, async () =>
      core.readNamespacedPod({ name, namespace: SOAK_NAMESPACE }).then(() => false as const, (err: unknown) => { if (isNotFound(err)) return true; throw err; }));
  };

  const createPod = async (): Promise<void> => {
    const name = `soak-${next++}`;
    const node = cluster.nodes[Math.floor(rand() * cluster.nodes.length)]!;
    busy.add(name);
    const fault = activeFault;
    const t0 = performance.now();
    const deadline = Date.now() + podTimeoutMs;
    try {
      await retrying(`create ${name}`, deadline, async () => {
        await core.createNamespacedPod({ namespace: SOAK_NAMESPACE, body: { metadata: { name, labels: { app: 'soak' } }, spec: workloadPodSpec(node.name) } })
          .catch((err: unknown) => { if (!(err instanceof k8s.ApiException && err.code === 409)) throw err; });
        return true;
      });
      live.add(name);
      await retrying(`${name} Ready`, deadline, async () => {
        const pod = await core.readNamespacedPod({ name, namespace: SOAK_NAMESPACE });
        return !!pod.status?.podIP && !!pod.status.conditions?.some((c) => c.type === 'Ready' && c.status === 'True');
      });
      startups.push(performance.now() - t0);
      report.creates++;
    } catch {
      const key = `${fault ?? activeFault ?? 'no fault'}: ${await whyNotReady(name)}`;
      report.createFailures[key] = (report.createFailures[key] ?? 0) + 1;
      log(`real soak: ${name} on ${node.name} failed — ${key}`);
      if (live.has(name)) {
        await deletePod(name);
        live.delete(name);
      }
    } finally {
      busy.delete(name);
    }
  };

  const opLimit = () => (faultIndex < schedule.length ? schedule[faultIndex]!.at + FAULT_WINDOW_OPS : options.operations);
  const worker = async () => {
    while (issued < options.operations && !aborted) {
      if (paused) await paused;
      if (issued >= Math.min(opLimit(), options.operations)) {
        await sleep(50);
        continue;
      }
      issued++;
      inflight++;
      try {
        const candidates = [...live].filter((n) => !busy.has(n));
        if (candidates.length === 0 || (live.size < (options.maxPods ?? 24) && rand() < 0.55)) {
          await createPod();
        } else {
          const name = candidates[Math.floor(rand() * candidates.length)]!;
          busy.add(name);
          try {
            await deletePod(name);
            live.delete(name);
            report.deletes++;
          } finally {
            busy.delete(name);
          }
        }
      } finally {
        inflight--;
        report.operations++;
      }
    }
  };

  /** Stops the workers once their operations in flight are done, runs `fn`, resumes them. */
  const quiesce = async (fn: () => Promise<void>) => {
    let resume!: () => void;
    paused = new Promise((r) => (resume = r));
    await eventually(() => inflight === 0, { timeoutMs: 600_000, intervalMs: 50 });
    try {
      await fn();
    } finally {
      paused = undefined;
      resume();
    }
  };

  /** The invariants, read again for up to {@link SETTLE_MS} while they do not hold; the last reading's violations count. */
  const checkPhase = async (options: { afterGc?: boolean } = {}) => {
    report.phases++;
    const deadline = Date.now() + SETTLE_MS;
    let violations: Violation[];
    for (;;) {
      violations = await cluster.check(options).catch((err: unknown) => [{ invariant: 'view', detail: String(err) }]);
      if (violations.length === 0 || Date.now() > deadline) break;
      await sleep(1000);
    }
    for (const v of violations) report.violations.push({ ...v, phase: report.phases });
    log(`real soak: phase ${report.phases} after ${report.operations} operations: ${live.size} soak pods, ${violations.length} violations`);
  };

  const injector = async () => {
    for (const fault of schedule) {
      await eventually(() => aborted || report.operations >= fault.at, { timeoutMs: 3_600_000, intervalMs: 100 });
      if (aborted) return;
      const t0 = performance.now();
      activeFault = fault.name;
      const node = await injectFault(cluster, fault.name, rand, log);
      report.faults.push({ name: fault.name, ...(node ? { node } : {}), atOperation: report.operations, ms: Math.round(performance.now() - t0) });
      await quiesce(() => checkPhase());
      activeFault = undefined;
      faultIndex++;
    }
  };

  const guard = <T>(p: Promise<T>) => p.catch((err: unknown) => {
    aborted = true;
    throw err;
  });
  const settled = await Promise.allSettled([guard(injector()), ...Array.from({ length: options.concurrency ?? 4 }, () => guard(worker()))]);
  const failed = settled.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failed) throw failed.reason;
  await cluster.waitRollout('deployment/coil-controller');
  await checkPhase();

  log(`real soak: deleting ${live.size} pods`);
  await Promise.all([...live].map(async (name) => {
    await deletePod(name);
    report.deletes++;
  }));
  live.clear();
  const blocksLeft = async () =>
    ((await custom.listClusterCustomObject({ group: Kinds.AddressBlock.group, version: Kinds.AddressBlock.version, plural: Kinds.AddressBlock.plural, labelSelector: 'coil.cybozu.com/pool=soak' })) as { items: unknown[] }).items.length;
  await eventually(async () => (await blocksLeft()) === 0, { timeoutMs: RELEASE_WAIT_MS, intervalMs: 1000 }).catch(() => undefined);
  report.blocksLeaked = await blocksLeft();
  await checkPhase({ afterGc: true });

  await cluster.kubectl(['delete', 'namespace', SOAK_NAMESPACE, '--timeout=120s']);
  if (report.blocksLeaked === 0) await cluster.kubectl(['delete', 'addresspool.coil.cybozu.com', 'soak', '--timeout=60s']);

  startups.sort((a, b) => a - b);
  report.startupP50Ms = startups.length === 0 ? 0 : Math.round(percentile(startups, 50));
  report.startupP95Ms = startups.length === 0 ? 0 : Math.round(percentile(startups, 95));
  report.startupMaxMs = Math.round(startups.at(-1) ?? 0);
  report.durationMs = Math.round(performance.now() - started);
  return report;
}

/**
 * Injects `name` while the workers keep running, and returns once the part is back (coild Ready
 * again, the node Ready, a new lease holder, the apiserver serving). @returns the node it hit, if one
 */
async function injectFault(cluster: Cluster, name: RealFault, rand: () => number, log: (m: string) => void): Promise<string | undefined> {
  const core = cluster.api(k8s.CoreV1Api);
  const node = cluster.nodes[Math.floor(rand() * cluster.nodes.length)]!;
  const healed = { timeoutMs: 120_000, intervalMs: 500 };
  switch (name) {
    case 'coild-kill': {
      log(`real soak: fault coild-kill on ${node.name}`);
      const coild = async () => {
        const pods = (await core.listNamespacedPod({ namespace: RELEASE_NAMESPACE, labelSelector: 'app.kubernetes.io/component=coild' })).items;
        const pod = pods.find((p) => p.spec?.nodeName === node.name && !p.metadata?.deletionTimestamp);
        return { pod, status: pod?.status?.containerStatuses?.find((c) => c.name === 'coild') };
      };
      const before = await coild();
      if (!before.pod) throw new Error(`no coild pod on ${node.name}`);
      await node.killContainer(RELEASE_NAMESPACE, before.pod.metadata!.name!, 'coild');
      await eventually(async () => {
        const { status } = await coild();
        return (status?.restartCount ?? 0) > (before.status?.restartCount ?? 0) && status?.ready === true;
      }, healed);
      return node.name;
    }
    case 'kubelet-restart':
      log(`real soak: fault kubelet-restart on ${node.name}`);
      await node.restart('kubelet');
      await cluster.waitNodesReady();
      return node.name;
    case 'leader-delete': {
      const leases = cluster.api(k8s.CoordinationV1Api);
      const holder = (await leases.readNamespacedLease({ name: 'coil-leader', namespace: RELEASE_NAMESPACE })).spec?.holderIdentity ?? '';
      const leader = holder.slice(0, holder.lastIndexOf('_'));
      log(`real soak: fault leader-delete (${leader})`);
      await core.deleteNamespacedPod({ name: leader, namespace: RELEASE_NAMESPACE });
      await eventually(async () => {
        const h = (await leases.readNamespacedLease({ name: 'coil-leader', namespace: RELEASE_NAMESPACE })).spec?.holderIdentity ?? '';
        return h !== '' && !h.startsWith(`${leader}_`);
      }, healed);
      return undefined;
    }
    case 'apiserver-restart':
      log('real soak: fault apiserver-restart');
      await cluster.cp.stopApiServer();
      await sleep(1000);
      await cluster.cp.startApiServer();
      return undefined;
    case 'etcd-restart':
      log('real soak: fault etcd-restart');
      await cluster.cp.stopEtcd();
      await sleep(1000);
      await cluster.cp.startEtcd();
      return undefined;
  }
}
