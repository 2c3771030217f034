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
 *   Pod the allocation names must not exist), then asks that node's coild, through the API
 *   server's pod proxy, to release exactly that allocation (`POST /ipam/release` with container
 *   ID, interface and addresses). coild owns the node's allocations — the address is held by a
 *   veth on the host — so coild tears the veth down and frees the address the way a CNI DEL
 *   does, after checking the same things again against its own view under the allocation's lock.
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
import type { ApiTransport } from '../runtime/api-transport.js';
import type { Client } from '../runtime/client.js';
import { ApiError } from '../runtime/errors.js';
import { coildPods, coildProxyPath } from './cluster.js';

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
  'stale-blockrequest': 'check that coil-controller runs (its log and Events); coild creates the request again',
  'pool-usage-high': 'append a subnet to the AddressPool\'s spec.subnets',
  'unreadable-block': 'read coild\'s log and the Events on that node; the block is skipped there, the others are served',
};

/** Options of {@link releaseFindings}. */
export interface ReleaseOptions {
  readonly client: Client;
  readonly transport: ApiTransport;
  /** coil's namespace (coild's Pods). */
  readonly namespace: string;
  readonly coildPort: number;
  readonly dryRun: boolean;
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

/** coild's answer to `POST /ipam/release`. */
export interface CoildReleaseAnswer {
  readonly released: boolean;
  readonly reason: string;
}

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
  const coild = (await coildPods(o.client, o.namespace)).get(f.node);
  if (!coild) return step('failed', `no running coild Pod on ${f.node} in namespace ${o.namespace}`);
  const what = `${addresses.join(', ')} (container ${a.containerId.slice(0, 12)}, ${a.ifname}) on ${f.node}`;
  if (o.dryRun) return step('would', `would ask coild ${coild.metadata!.name} to release ${what}`);
  const answer = await o.transport.request<CoildReleaseAnswer>({
    method: 'POST',
    path: coildProxyPath(o.namespace, coild.metadata!.name!, o.coildPort, '/ipam/release'),
    body: { containerId: a.containerId, ifname: a.ifname, ...(a.ipv4 && { ipv4: a.ipv4 }), ...(a.ipv6 && { ipv6: a.ipv6 }) },
  });
  return answer?.released ? step('done', `coild ${coild.metadata!.name} released ${what}`) : step('skipped', `coild ${coild.metadata!.name} kept ${what}: ${answer?.reason ?? 'no reason given'}`);
}

/** One line per step. */
export function formatSteps(steps: readonly ReleaseStep[]): string {
  if (steps.length === 0) return 'nothing to do: no finding is named by every report\n';
  return steps.map((s) => `${s.outcome.padEnd(11)} ${s.kind.padEnd(20)} ${s.detail}\n`).join('');
}
