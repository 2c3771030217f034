/**
 * `kubectl coil ipam release --from-report FILE…`: acts on the findings every report names
 * (report.ts), and only on what is still true when it acts. What it does per finding kind
 * (README, "Operate"):
 *
 * - `orphan-block`: re-reads the Node (it must still be absent) and every Pod (none may hold an
 *   address of the block), then deletes the AddressBlock with preconditions on the UID and
 *   resourceVersion the reports saw, and removes its `coil.cybozu.com` finalizer, guarded by the
 *   resourceVersion the delete left (what coil-controller's GC does for a gone node).
 * - `leaked-address`: re-reads the Node (same UID) and its Pods (none may hold the address, the
 *   Pod the allocation names must not exist), then asks that node's coild to release exactly that
 *   allocation through the API server: it annotates the AddressBlock holding the address with the
 *   request (container ID, interface, addresses; src/api/v2/leak-release-request.ts) — a `patch`
 *   RBAC governs and the audit log records — and waits up to 30 s for coild's answer in the same
 *   annotation, then removes it. coild owns the node's allocations — the address is held by a
 *   veth on the host — so coild tears the veth down and frees the address the way a CNI DEL does,
 *   after checking the same things again against its own view under the allocation's lock
 *   (docs/ipam-recovery.md#releasing-a-leak).
 * - every other kind is reported only: nothing in it is safe to change without a person's
 *   decision (a duplicate Pod IP means a running pod must go, and release never takes a running
 *   pod's network away); the line says what to do.
 *
 * Every action is conditional: a changed object is skipped with the reason, never overwritten.
 */
import type { V1Pod } from '@kubernetes/client-node';
import { FIN_COIL } from '../api/v2/keys.js';
import { Kinds } from '../api/v2/kinds.js';
import { BlockIndex } from '../ipam/block-index.js';
import type { Finding, FindingKind, PodFacts } from '../ipam/ipam-check.js';
import { blockFacts, podFacts } from '../api/v2/ipam-facts.js';
import { setTimeout as sleep } from 'node:timers/promises';
import { LABEL_NODE } from '../api/v2/keys.js';
import { leakReleaseKey, parseLeakReleaseRequest } from '../api/v2/leak-release-request.js';
import type { Client } from '../runtime/client.js';
import { ApiError } from '../runtime/errors.js';

/** What happened to one finding. */
export interface ReleaseStep {
  readonly key: string;
  readonly kind: FindingKind;
  /** `done`: changed; `would`: `--dry-run`; `skipped`: no longer true or changed; `report-only`; `failed`. */
  readonly outcome: 'done' | 'would' | 'skipped' | 'report-only' | 'failed';
  readonly detail: string;
}

/** The findings release acts on; the others are reported only. */
export const RELEASABLE: ReadonlySet<FindingKind> = new Set(['orphan-block', 'leaked-address']);

const ADVICE: Partial<Record<FindingKind, string>> = {
  'block-stuck-deleting': 'coil-controller removes the finalizer once no pod holds the block: delete or move the pods named, or check that coil-controller runs',
  'pod-ip-without-block': 'delete the Pod (its owner recreates it with an address from its node\'s blocks); release never touches a running pod',
  'duplicate-pod-ip': 'delete all but one of the Pods named; release never takes a running pod\'s network away',
  'orphan-address': 'coild keeps the address wired and claims its block back; if the claim is refused, the Pod named must be deleted so it starts again with an address of its node',
  'unclaimable-address': 'coild keeps the address wired and exported while the Pod runs; delete the Pod (its owner recreates it with an address of the pool as it is now), or re-create the pool with the subnet and family it had',
  'unrouted-pod-ip': 'the address cannot be reached from other nodes: upgrade coild on that node (it exports such an address), or delete the Pod so it starts again with an address of the pool',
  'stale-blockrequest': 'check that coil-controller runs (its log and Events); coild creates the request again',
  'pool-usage-high': 'append a subnet to the AddressPool\'s spec.subnets',
  'unreadable-block': 'read coild\'s log and the Events on that node; the block is skipped there, the others are served',
};

/** Options of {@link releaseFindings}. */
export interface ReleaseOptions {
  readonly client: Client;
  readonly dryRun: boolean;
  /** How long to wait for coild's answer to a leak release; default {@link LEAK_ANSWER_TIMEOUT_MS}. */
  readonly answerTimeoutMs?: number;
}

/** Acts on `findings` one by one, in order. Never throws for one finding: its step says `failed`. */
export async function releaseFindings(findings: readonly Finding[], o: ReleaseOptions): Promise<ReleaseStep[]> {
  const steps: ReleaseStep[] = [];
  for (const f of findings) {
    const step = (outcome: ReleaseStep['outcome'], detail: string): ReleaseStep => ({ key: f.key, kind: f.kind, outcome, detail });
    try {
      if (f.kind === 'orphan-block') steps.push(await releaseOrphanBlock(f, o, step));
      else if (f.kind === 'leaked-address') steps.push(await releaseLeak(f, o, step));
      else steps.push(step('report-only', ADVICE[f.kind] ?? 'reported only'));
    } catch (e) {
      steps.push(step('failed', e instanceof ApiError ? `${e.code} ${e.message}` : (e as Error).message));
    }
  }
  return steps;
}

type Step = (outcome: ReleaseStep['outcome'], detail: string) => ReleaseStep;

async function releaseOrphanBlock(f: Finding, o: ReleaseOptions, step: Step): Promise<ReleaseStep> {
  const ref = f.objects.find((x) => x.kind === 'AddressBlock');
  if (!ref || !f.node) return step('failed', 'the finding names no AddressBlock or node');
  const node = await o.client.get(Kinds.Node, { name: f.node });
  if (node) return step('skipped', `Node ${f.node} exists (again, uid ${node.metadata?.uid}); its coild may use the block`);
  const block = await o.client.get(Kinds.AddressBlock, { name: ref.name });
  if (!block) return step('done', `AddressBlock ${ref.name} was already gone`);
  if (block.metadata?.uid !== ref.uid || block.metadata?.resourceVersion !== ref.resourceVersion) {
    return step('skipped', `AddressBlock ${ref.name} changed since the report (uid ${block.metadata?.uid}, resourceVersion ${block.metadata?.resourceVersion}; the report saw ${ref.uid}, ${ref.resourceVersion})`);
  }
  const index = new BlockIndex([blockFacts(block)]);
  const holders = (await o.client.list(Kinds.Pod)).map(podFacts).filter((p): p is PodFacts => p !== undefined && p.ips.some((ip) => index.lookup(ip).length > 0));
  if (holders.length > 0) return step('skipped', `Pod(s) ${holders.map((p) => `${p.ref.namespace}/${p.ref.name}`).join(', ')} hold addresses of ${ref.name}`);
  if (o.dryRun) return step('would', `would delete AddressBlock ${ref.name} (uid ${ref.uid}, resourceVersion ${ref.resourceVersion}) and remove its finalizer`);
  try {
    // false: gone meanwhile (coil-controller's GC frees orphans too).
    if (!(await o.client.delete(Kinds.AddressBlock, { name: ref.name }, { uid: ref.uid, resourceVersion: ref.resourceVersion }))) return step('done', `AddressBlock ${ref.name} was already gone`);
  } catch (e) {
    if (e instanceof ApiError && e.code === 409) return step('skipped', `AddressBlock ${ref.name} changed just before the delete (${e.message})`);
    throw e;
  }
  const left = await o.client.get(Kinds.AddressBlock, { name: ref.name });
  if (left && left.metadata?.uid === ref.uid && left.metadata.finalizers?.includes(FIN_COIL)) await o.client.removeFinalizer(Kinds.AddressBlock, left, FIN_COIL);
  return step('done', `deleted AddressBlock ${ref.name} of gone Node ${f.node}`);
}

/** How long `release` waits for coild's answer to a leak release request. */
export const LEAK_ANSWER_TIMEOUT_MS = 30_000;
const LEAK_ANSWER_POLL_MS = 500;

async function releaseLeak(f: Finding, o: ReleaseOptions, step: Step): Promise<ReleaseStep> {
  const a = f.allocation;
  if (!a || !f.node) return step('failed', 'the finding names no allocation or node');
  const nodeRef = f.objects.find((x) => x.kind === 'Node');
  const node = await o.client.get(Kinds.Node, { name: f.node });
  if (!node) return step('skipped', `Node ${f.node} is gone; its allocations went with it`);
  if (nodeRef && node.metadata?.uid !== nodeRef.uid) return step('skipped', `Node ${f.node} was replaced since the report (uid ${node.metadata?.uid}, the report saw ${nodeRef.uid})`);
  const pods: V1Pod[] = await o.client.list(Kinds.Pod, { fieldSelector: `spec.nodeName=${f.node}` });
  const addresses = f.addresses ?? [];
  const holder = pods.map(podFacts).find((p) => p?.ips.some((ip) => addresses.includes(ip)));
  if (holder) return step('skipped', `Pod ${holder.ref.namespace}/${holder.ref.name} on ${f.node} has ${addresses.join(', ')} now`);
  if (a.podName && pods.some((p) => p.metadata?.namespace === a.podNamespace && p.metadata?.name === a.podName)) {
    return step('skipped', `Pod ${a.podNamespace}/${a.podName}, which the allocation names, exists on ${f.node} now`);
  }
  const blocks = await o.client.list(Kinds.AddressBlock, { labelSelector: `${LABEL_NODE}=${f.node}` });
  const index = new BlockIndex(blocks.map(blockFacts));
  const block = addresses.flatMap((ip) => index.lookup(ip))[0]?.ref;
  if (!block) return step('skipped', `no AddressBlock of ${f.node} holds ${addresses.join(', ')} now`);
  const what = `${addresses.join(', ')} (container ${a.containerId.slice(0, 12)}, ${a.ifname}) on ${f.node}`;
  if (o.dryRun) return step('would', `would ask coild on ${f.node} to release ${what} (annotating AddressBlock ${block.name})`);
  const key = leakReleaseKey(a.containerId, a.ifname);
  const request = { containerId: a.containerId, ifname: a.ifname, ...(a.ipv4 && { ipv4: a.ipv4 }), ...(a.ipv6 && { ipv6: a.ipv6 }) };
  await o.client.mergePatch(Kinds.AddressBlock, { name: block.name }, { metadata: { annotations: { [key]: JSON.stringify(request) } } });
  const deadline = Date.now() + (o.answerTimeoutMs ?? LEAK_ANSWER_TIMEOUT_MS);
  for (;;) {
    const now = await o.client.get(Kinds.AddressBlock, { name: block.name });
    if (!now) return step('failed', `AddressBlock ${block.name} was deleted before coild on ${f.node} answered`);
    const outcome = parseLeakReleaseRequest(now.metadata?.annotations?.[key])?.outcome;
    if (outcome) {
      await o.client.mergePatch(Kinds.AddressBlock, { name: block.name }, { metadata: { annotations: { [key]: null } } });
      return outcome.released ? step('done', `coild on ${f.node} released ${what}`) : step('skipped', `coild on ${f.node} kept ${what}: ${outcome.reason}`);
    }
    if (Date.now() >= deadline) {
      return step('failed', `coild on ${f.node} did not answer within ${Math.round((o.answerTimeoutMs ?? LEAK_ANSWER_TIMEOUT_MS) / 1000)} s; the request stays on AddressBlock ${block.name} (annotation ${key}) and is acted on when coild runs`);
    }
    await sleep(LEAK_ANSWER_POLL_MS);
  }
}

/** One line per step. */
export function formatSteps(steps: readonly ReleaseStep[]): string {
  if (steps.length === 0) return 'nothing to do: no finding is named by every report\n';
  return steps.map((s) => `${s.outcome.padEnd(11)} ${s.kind.padEnd(20)} ${s.detail}\n`).join('');
}
