/**
 * Uninstall: what coild leaves on its node when the release is removed.
 *
 * coild is stopped (SIGTERM) on a restart, a rolling upgrade and an uninstall alike; only an
 * uninstall must take coil off the node. The sign is coild's owning DaemonSet: `helm uninstall`
 * (or `kubectl delete daemonset`) deletes it and the garbage collector then deletes its Pods, while
 * an upgrade or a restart keeps it (same UID). So at shutdown coild asks whether the DaemonSet that
 * owns its Pod (UID from the Pod's ownerReference, read at start) is gone or being deleted: first
 * from its informer (the DELETE event reaches coild before the garbage collector has deleted the
 * Pod and kubelet has signalled it), then, if the cache still holds it, from the API server.
 * When in doubt (the API server cannot be asked) coild keeps the node as it is: a wrongly kept
 * conflist is one file an admin can remove, a wrongly removed one breaks a live node's pods.
 *
 * On an uninstall coild then removes, on the node: coil's conflist (only if it names the `coil`
 * plugin), and — when no coil pod is wired on the node any more — the export table 119 (so BIRD
 * withdraws the node's blocks) and the pod table 116 with its policy rule. While pods still run,
 * those stay, so the pods keep their network, and a reinstall's coild adopts them
 * (docs/ipam-recovery.md#after-an-uninstall); the CNI DEL for them runs whatever conflist the
 * node has next.
 *
 * Without Coil's counterpart: Coil leaves all of it behind (docs/compatibility.md#nothing-removed-on-uninstall).
 */
import { readFile, rm } from 'node:fs/promises';
import type { V1DaemonSet, V1Pod } from '@kubernetes/client-node';
import type Logger from 'bunyan';
import type { Cache } from '../runtime/cache.js';
import type { Client } from '../runtime/client.js';
import { Kinds } from '../api/v2/kinds.js';

/** The owning DaemonSet of a Pod. */
export interface DaemonSetOwner {
  readonly namespace: string;
  readonly name: string;
  readonly uid: string;
}

/** The DaemonSet in a Pod's ownerReferences (controller first), or undefined. Pure. */
export function daemonSetOwnerOf(pod: Readonly<V1Pod>): DaemonSetOwner | undefined {
  const refs = (pod.metadata?.ownerReferences ?? []).filter((r) => r.kind === 'DaemonSet' && r.apiVersion.startsWith('apps/'));
  const ref = refs.find((r) => r.controller) ?? refs[0];
  if (!ref || !pod.metadata?.namespace) return undefined;
  return { namespace: pod.metadata.namespace, name: ref.name, uid: ref.uid };
}

/** Whether `ds` (a cached or live object, or undefined when absent) still stands for `owner`. Pure. */
export function ownerRemains(owner: DaemonSetOwner, ds: Readonly<V1DaemonSet> | undefined): boolean {
  return !!ds && ds.metadata?.uid === owner.uid && !ds.metadata?.deletionTimestamp;
}

/** Options of {@link UninstallDetector}. */
export interface UninstallDetectorOptions {
  readonly cache: Cache;
  readonly client: Client;
  /** coild's own Pod. */
  readonly pod: { readonly namespace: string; readonly name: string };
  readonly logger: Logger;
  /** Longest wait for the API server's answer at shutdown (ms). Default 3,000. */
  readonly askTimeoutMs?: number;
}

/** Tells an uninstall from a restart; see the module comment. */
export class UninstallDetector {
  private owner: DaemonSetOwner | undefined;

  /** Declares the DaemonSet informer (call before the cache starts). */
  constructor(private readonly o: UninstallDetectorOptions) {
    o.cache.ensure(Kinds.DaemonSet, { namespace: o.pod.namespace });
  }

  /** Reads the owning DaemonSet from coild's Pod (after the cache synced). Never throws. */
  async start(): Promise<void> {
    const key = { namespace: this.o.pod.namespace, name: this.o.pod.name };
    const pod = this.o.cache.get(Kinds.Pod, key) ?? (await this.o.client.get(Kinds.Pod, key).catch((err: unknown) => {
      this.o.logger.warn({ err, pod: key }, 'cannot read coild\'s Pod');
      return undefined;
    }));
    this.owner = pod ? daemonSetOwnerOf(pod) : undefined;
    if (!this.owner) this.o.logger.warn({ pod: key }, 'coild\'s Pod has no owning DaemonSet: an uninstall will leave the node as it is');
    else this.o.logger.info({ daemonSet: this.owner }, 'watching the owning DaemonSet for an uninstall');
  }

  /** True when the owning DaemonSet is gone or being deleted. Never throws. */
  async uninstalling(): Promise<boolean> {
    const owner = this.owner;
    if (!owner) return false;
    const key = { namespace: owner.namespace, name: owner.name };
    if (!ownerRemains(owner, this.o.cache.get(Kinds.DaemonSet, key))) return true;
    let timer: NodeJS.Timeout | undefined;
    try {
      const live = await Promise.race([
        this.o.client.get(Kinds.DaemonSet, key),
        new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error('no answer in time')), this.o.askTimeoutMs ?? 3_000))),
      ]);
      return !ownerRemains(owner, live);
    } catch (err) {
      this.o.logger.warn({ err, daemonSet: owner }, 'cannot tell whether the DaemonSet is being deleted; keeping the node as it is');
      return false;
    } finally {
      clearTimeout(timer);
    }
  }
}

/**
 * Removes coil's conflist at `path` if it is coil's (a conflist naming the `coil` plugin).
 * @returns whether a file was removed
 * @throws filesystem errors other than a missing file
 */
export async function removeCoilConflist(path: string): Promise<boolean> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false;
    throw err;
  }
  let plugins: unknown;
  try {
    plugins = (JSON.parse(text) as { plugins?: unknown }).plugins;
  } catch {
    return false;
  }
  if (!Array.isArray(plugins) || !plugins.some((p: { type?: unknown } | null) => p?.type === 'coil')) return false;
  await rm(path, { force: true });
  return true;
}

/** What {@link removeNodeRouting} removes and reads. */
export interface NodeRouting {
  /** The pod interfaces coil wired on the node (PodNetwork.list). */
  list(): Promise<readonly unknown[]>;
  /** Flushes the export table 119 (BlockExport.clear). */
  clearExport(): Promise<void>;
  /** Removes the pod table 116 and its rule (RtnetlinkPodNetwork.deinit). */
  removePodTable(): Promise<void>;
}

/**
 * On an uninstall, removes coil's routing from the node — the export table, the pod table and its
 * rule — only when no coil pod is wired on it any more: pods still running keep their network, and
 * a reinstall's coild adopts them (docs/ipam-recovery.md#after-an-uninstall).
 * @returns `kept` with the number of wired pods, or `removed`
 * @throws what the PodNetwork or the exporter throws
 */
export async function removeNodeRouting(r: NodeRouting): Promise<{ kept: number } | 'removed'> {
  const wired = await r.list();
  if (wired.length > 0) return { kept: wired.length };
  await r.clearExport();
  await r.removePodTable();
  return 'removed';
}
