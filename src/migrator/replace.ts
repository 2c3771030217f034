/**
 * `coil-migrator replace`: moves the pods still on v1 addresses to v2 addresses, node by node,
 * then releases the reserved AddressBlocks and restarts coild.
 *
 * Differences from the original (docs/migration-from-coil-v1.md#its-replace), each for safety:
 * - Only pods whose IP lies in a reserved block are touched; pods created under v2 are left alone.
 * - A pod with a controller owner is deleted and its replacement awaited (the owner has as many
 *   Ready pods as before, the old one excluded). A bare pod is only listed, unless
 *   `--delete-bare-pods`: nothing would re-create it.
 * - A reserved block that a pod still uses after the pass (a bare pod kept, a failed replacement)
 *   is NOT released: v2 would hand its addresses out again while the v1 pod holds them.
 * - Releasing = remove the finalizer, delete (as coild releases a block); then each affected pool's
 *   `coil.cybozu.com/v1-reserved-blocks` annotation is rewritten, so the controller re-syncs its
 *   taken indices at once (reserved blocks have no ownerReference, so their deletion alone does
 *   not trigger the AddressPool reconciler).
 *
 * @see docs/migration-from-coil-v1.md#per-pod-addresses-are-not-carried-over,
 *   docs/migration-from-coil-v1.md#its-replace,
 *   docs/migration-from-coil-v1.md#the-procedure (steps 7–9)
 */
import type { V1Pod } from '@kubernetes/client-node';
import type { AddressBlock } from '../api/v2/addressblock.js';
import { FIN_COIL, LABEL_POOL, LABEL_RESERVED } from '../api/v2/keys.js';
import { cidrContainsAddress, tryParseAddress, tryParseCidr } from '../ipam/cidr.js';
import type { Client } from '../runtime/client.js';
import { Kinds } from '../api/v2/kinds.js';
import { checkCluster } from './cluster.js';
import { ANN_V1_RESERVED } from './convert.js';
import type { ReplaceConfig } from './config.js';



/** What `replace` needs besides the config. `sleep` is injectable so tests need not wait. */
export interface ReplaceIo {
  readonly client: Client;
  readonly log: (line: string) => void;
  /** Asks `DO YOU WANT TO PROCEED? [y/N]`; not called with `--yes`. */
  readonly confirm: (question: string) => Promise<boolean>;
  readonly sleep?: (ms: number) => Promise<void>;
}

/** Outcome of a run; `ok` is false when pods failed or blocks had to be kept. */
export interface ReplaceSummary {
  readonly ok: boolean;
  readonly replaced: readonly string[];
  readonly failed: readonly string[];
  readonly barePodsLeft: readonly string[];
  readonly releasedBlocks: readonly string[];
  readonly keptBlocks: readonly string[];
  readonly restartedCoild: number;
}

const POLL_MS = 500;

/**
 * Runs the replacement. Failures of single pods are collected, not thrown.
 * @returns undefined when the operator declined
 * @throws ApiError on a failed list or block write
 */
export async function runReplace(cfg: ReplaceConfig, io: ReplaceIo): Promise<ReplaceSummary | undefined> {
  const sleep = io.sleep ?? ((ms: number) => new Promise<void>((r) => setTimeout(r, ms)));
  await checkCluster(io.client);
  const reserved = await io.client.list(Kinds.AddressBlock, { labelSelector: `${LABEL_RESERVED}=true` });
  const pods = podsOnReserved(await io.client.list(Kinds.Pod), reserved);
  const byNode = new Map<string, V1Pod[]>();
  for (const p of pods) byNode.set(p.spec!.nodeName!, [...(byNode.get(p.spec!.nodeName!) ?? []), p]);
  const nodes = [...byNode.keys()].sort();
  io.log(`${reserved.length} reserved AddressBlocks; ${pods.length} pods on v1 addresses on ${nodes.length} nodes`);
  if (!cfg.yes && !(await io.confirm('DO YOU WANT TO PROCEED? [y/N] '))) return undefined;

  const replaced: string[] = [];
  const failed: string[] = [];
  const barePodsLeft: string[] = [];
  for (const [i, node] of nodes.entries()) {
    io.log(`node ${node}: replacing ${byNode.get(node)!.length} pods`);
    for (const pod of byNode.get(node)!) {
      const id = `${pod.metadata!.namespace}/${pod.metadata!.name}`;
      const owner = pod.metadata?.ownerReferences?.find((r) => r.controller);
      if (owner === undefined && !cfg.deleteBarePods) {
        io.log(`bare pod ${id} (no controller owns it) left alone: delete it yourself or pass --delete-bare-pods`);
        barePodsLeft.push(id);
        continue;
      }
      const error = await replacePod(io.client, pod, owner?.uid, cfg.podTimeoutMs, sleep);
      if (error === undefined) {
        replaced.push(id);
        io.log(owner ? `replaced ${id}` : `deleted bare pod ${id} (not re-created)`);
      } else {
        failed.push(id);
        io.log(`FAILED ${id}: ${error}`);
      }
    }
    if (i < nodes.length - 1 && cfg.intervalMs > 0) await sleep(cfg.intervalMs);
  }

  const { released, kept } = await releaseBlocks(io, reserved, sleep);
  const restartedCoild = await restartCoild(io, cfg);
  const ok = failed.length === 0 && kept.length === 0;
  io.log(`${replaced.length} pods replaced, ${failed.length} failed, ${barePodsLeft.length} bare pods left; ${released.length} blocks released, ${kept.length} kept; ${restartedCoild} coild pods restarted`);
  return { ok, replaced, failed, barePodsLeft, releasedBlocks: released, keptBlocks: kept, restartedCoild };
}

/**
 * Pods (not finished, not hostNetwork, bound to a node) with an IP inside a reserved block, sorted
 * by namespace/name. Terminating pods are left out of what to replace (they are going already) but
 * count as users when deciding whether a block may be released (`includeTerminating`): on a node
 * that has not confirmed the deletion, the pod may still run on its v1 address.
 */
export function podsOnReserved(pods: readonly V1Pod[], reserved: readonly AddressBlock[], options: { includeTerminating?: boolean } = {}): V1Pod[] {
  const cidrs = reserved.flatMap((b) => [b.ipv4, b.ipv6]).flatMap((c) => (c ? [tryParseCidr(c)] : [])).filter((c) => c !== undefined);
  return pods
    .filter((p) => !p.spec?.hostNetwork && p.spec?.nodeName && p.status?.phase !== 'Succeeded' && p.status?.phase !== 'Failed')
    .filter((p) => options.includeTerminating || !p.metadata?.deletionTimestamp)
    .filter((p) => podIps(p).some((ip) => { const a = tryParseAddress(ip); return a !== undefined && cidrs.some((c) => cidrContainsAddress(c, a)); }))
    .sort((a, b) => (key(a) < key(b) ? -1 : 1));
}

/** Deletes `pod` and waits until it is gone and (with an owner) replaced. @returns an error text, or undefined */
async function replacePod(client: Client, pod: V1Pod, ownerUid: string | undefined, timeoutMs: number, sleep: (ms: number) => Promise<void>): Promise<string | undefined> {
  const ns = pod.metadata!.namespace!;
  const name = pod.metadata!.name!;
  const uid = pod.metadata!.uid!;
  const readyOf = async (): Promise<number> =>
    (await client.list(Kinds.Pod, { namespace: ns })).filter((p) => p.metadata?.uid !== uid && !p.metadata?.deletionTimestamp && p.metadata?.ownerReferences?.some((r) => r.uid === ownerUid) && isReady(p)).length;
  const wanted = ownerUid === undefined ? 0 : (await readyOf()) + (isReady(pod) ? 1 : 0);
  try {
    await client.delete(Kinds.Pod, { namespace: ns, name }, { uid });
  } catch (e) {
    return `delete: ${(e as Error).message}`;
  }
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const current = await client.get(Kinds.Pod, { namespace: ns, name });
    // Gone, or re-created under the same name (StatefulSet; Coil #124).
    const gone = current === undefined || current.metadata?.uid !== uid;
    if (gone && (ownerUid === undefined || (await readyOf()) >= wanted)) return undefined;
    if (Date.now() > deadline) return gone ? `no Ready replacement within ${timeoutMs / 1000} s` : `still present ${timeoutMs / 1000} s after delete`;
    await sleep(POLL_MS);
  }
}

/** Releases every reserved block no running pod uses, then touches the pools they belonged to. */
async function releaseBlocks(io: ReplaceIo, reserved: readonly AddressBlock[], sleep: (ms: number) => Promise<void>): Promise<{ released: string[]; kept: string[] }> {
  const pods = await io.client.list(Kinds.Pod);
  const released: string[] = [];
  const kept: string[] = [];
  const pools = new Set<string>();
  for (const block of reserved) {
    const name = block.metadata!.name!;
    const users = podsOnReserved(pods, [block], { includeTerminating: true });
    if (users.length > 0) {
      io.log(`keeping reserved block ${name}: still used by ${users.map(key).join(', ')}`);
      kept.push(name);
      continue;
    }
    const fresh = await io.client.get(Kinds.AddressBlock, { name });
    if (fresh !== undefined) {
      await io.client.removeFinalizer(Kinds.AddressBlock, fresh, FIN_COIL);
      await io.client.delete(Kinds.AddressBlock, { name }, { uid: fresh.metadata!.uid! });
      while ((await io.client.get(Kinds.AddressBlock, { name }))?.metadata?.uid === fresh.metadata!.uid) await sleep(POLL_MS);
    }
    io.log(`released reserved block ${name}`);
    released.push(name);
    const pool = block.metadata?.labels?.[LABEL_POOL];
    if (pool) pools.add(pool);
  }
  // Rewrite each affected pool's list of reserved indices (null removes it): the pool update makes
  // the controller re-read the pool's blocks, which their deletion alone does not (no ownerReference).
  const left = await io.client.list(Kinds.AddressBlock, { labelSelector: `${LABEL_RESERVED}=true` });
  for (const pool of [...pools].sort()) {
    if ((await io.client.get(Kinds.AddressPool, { name: pool })) === undefined) continue;
    const indices = left.filter((b) => b.metadata?.labels?.[LABEL_POOL] === pool).map((b) => b.index).sort((a, b) => a - b);
    await io.client.mergePatch(Kinds.AddressPool, { name: pool }, { metadata: { annotations: { [ANN_V1_RESERVED]: indices.length ? indices.join(',') : null } } });
  }
  return { released, kept };
}

/** Deletes the coild pods so the DaemonSet restarts them and they forget the released blocks. */
async function restartCoild(io: ReplaceIo, cfg: ReplaceConfig): Promise<number> {
  const coilds = await io.client.list(Kinds.Pod, { namespace: cfg.coildNamespace, labelSelector: cfg.coildSelector });
  for (const p of coilds) await io.client.delete(Kinds.Pod, { namespace: p.metadata!.namespace!, name: p.metadata!.name! });
  if (coilds.length === 0) io.log(`no coild pod matches ${cfg.coildSelector} in ${cfg.coildNamespace}; restart coild yourself if it runs elsewhere`);
  return coilds.length;
}

function podIps(p: V1Pod): string[] {
  return [...(p.status?.podIPs ?? []).map((i) => i.ip), p.status?.podIP].filter((ip): ip is string => !!ip);
}

function isReady(p: V1Pod): boolean {
  return p.status?.phase === 'Running' && (p.status.conditions ?? []).some((c) => c.type === 'Ready' && c.status === 'True');
}

function key(p: V1Pod): string {
  return `${p.metadata?.namespace}/${p.metadata?.name}`;
}
