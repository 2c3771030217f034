/**
 * `coil-controller release-finalizers`: the chart's post-delete hook. After `helm uninstall`
 * nobody honours the `coil.cybozu.com` finalizer any more — the controller that removes it from a
 * pool once its blocks are gone, and the coild that removes it from a block once its addresses are
 * free, have been deleted — so an AddressPool or AddressBlock deleted afterwards (by hand, or with
 * the CRDs) would hang forever. This removes the finalizer from every AddressPool and AddressBlock,
 * once the release's coil-controller and coild Pods are gone (a controller still shutting down
 * would add the pool finalizer back). The objects themselves stay: they record which addresses the
 * remaining pods use, and a later install adopts them (the AddressPool reconciler adds the pool
 * finalizer back).
 */
import type { KubernetesObject } from '@kubernetes/client-node';
import type Logger from 'bunyan';
import { FIN_COIL } from '../api/v2/keys.js';
import { Kinds } from '../api/v2/kinds.js';
import { sleep } from '../runtime/clock.js';
import type { Client } from '../runtime/client.js';
import { ApiError } from '../runtime/errors.js';
import type { KindDescriptor } from '../runtime/kind.js';

/** Options of {@link releaseFinalizers}. */
export interface ReleaseFinalizersOptions {
  readonly client: Client;
  /** The release namespace. */
  readonly namespace: string;
  /** The release name (`app.kubernetes.io/instance`). */
  readonly release: string;
  /** Longest wait for the release's Pods to go (ms); after it the finalizers are removed anyway. */
  readonly waitMs: number;
  readonly logger: Logger;
  /** Poll period while waiting (ms). Default 1,000. */
  readonly pollMs?: number;
}

/** What was done. */
export interface ReleaseFinalizersReport {
  readonly pools: number;
  readonly blocks: number;
  /** Whether the release's Pods were gone before the finalizers were removed. */
  readonly podsGone: boolean;
}

/**
 * Waits for the release's coil-controller and coild Pods to go, then removes `coil.cybozu.com`
 * from every AddressBlock and AddressPool (blocks first: a pool's finalizer guards its blocks).
 * @throws ApiError when the API server refuses a list or an update (the Job is retried)
 */
export async function releaseFinalizers(o: ReleaseFinalizersOptions): Promise<ReleaseFinalizersReport> {
  const selector = `app.kubernetes.io/name=coil,app.kubernetes.io/instance=${o.release},app.kubernetes.io/component in (coil-controller,coild)`;
  const deadline = Date.now() + o.waitMs;
  let podsGone = false;
  o.logger.info({ selector, waitMs: o.waitMs }, 'waiting for the release\'s coil-controller and coild Pods to go');
  for (;;) {
    const pods = await o.client.list(Kinds.Pod, { namespace: o.namespace, labelSelector: selector });
    if (pods.length === 0) {
      podsGone = true;
      break;
    }
    if (Date.now() >= deadline) {
      o.logger.warn({ pods: pods.map((p) => p.metadata?.name) }, 'the release\'s Pods are still there; removing the finalizers anyway');
      break;
    }
    await sleep(o.pollMs ?? 1_000);
  }
  const release = async (kind: KindDescriptor<KubernetesObject>): Promise<number> => {
    let n = 0;
    for (const obj of await o.client.list(kind)) {
      if (!obj.metadata?.finalizers?.includes(FIN_COIL)) continue;
      try {
        await o.client.removeFinalizer(kind, structuredClone(obj), FIN_COIL);
        n++;
      } catch (err) {
        if (!(err instanceof ApiError && err.code === 404)) throw err;
      }
    }
    return n;
  };
  const blocks = await release(Kinds.AddressBlock as unknown as KindDescriptor<KubernetesObject>);
  const pools = await release(Kinds.AddressPool as unknown as KindDescriptor<KubernetesObject>);
  o.logger.info({ pools, blocks, podsGone }, 'coil.cybozu.com finalizers removed');
  return { pools, blocks, podsGone };
}
