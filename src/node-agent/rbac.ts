/**
 * coild's API access, declared once per feature: the kinds it caches (coild.ts builds its informer
 * cache from this table) and the calls its parts make beyond the cache (each part declares its
 * own, next to the code making them). hack/chart-rbac.ts derives the chart's `coild` ClusterRole
 * from it, as it derives coil-controller's from the reconcilers' registrations, and
 * test/coild-rbac.test.ts checks that a constructed coild caches exactly these kinds.
 *
 * Deliberately absent (Coil grants some of them): creating AddressBlocks (only the controller
 * allocates), writing BlockRequest status (only the controller answers), any Pod or Node write,
 * Secrets.
 */
import { INDEX_BLOCK_BY_REQUEST, LABEL_NODE } from '../api/v2/keys.js';
import type { Cache, CacheKindOptions } from '../runtime/cache.js';
import type { KindDescriptor } from '../runtime/kind.js';
import { EVENT_RECORDER_RBAC, readRule } from '../runtime/rbac.js';
import { HTTP_AUTH_RBAC } from '../runtime/http-auth.js';
import type { RbacRule } from '../runtime/registry.js';
import { BlockReleaser } from './ipam/block-release.js';
import { BlockRequester, blockRequestUidOf } from './ipam/block-request.js';
import { LeakReleaseRequests } from './ipam/leak-release-requests.js';
import { CniService } from './rpc/cni-service.js';
import type { CoildConfig } from './config.js';
import { EgressOnlyCniService } from './rpc/egress-only-cni-service.js';
import { Kinds } from '../api/v2/kinds.js';
import { EgressWatcher } from './egress/egress-watcher.js';
import { EGRESS_SLICE_SELECTOR } from './egress/nat-endpoints.js';
import { coildObject, coildPod } from './cached-objects.js';
import type { KubernetesObject } from '@kubernetes/client-node';

/** The chart's switches (`ipam.enabled` → `--enable-ipam`, `egress.enabled` → `--enable-egress`); `common` is always on. */
export type CoildFeature = 'common' | 'ipam' | 'egress';

/** A kind in coild's informer cache; `options` narrows it by coild's flags (to the node it serves). */
export interface CachedKind {
  readonly kind: KindDescriptor;
  readonly options?: (config: CoildConfig) => CacheKindOptions;
  /** What is kept of each object (cached-objects.ts); default: all but `managedFields`. */
  readonly transform?: (obj: KubernetesObject) => KubernetesObject;
}

/** What coild does in the API for one feature. */
export interface CoildAccess {
  /** Cached kinds: get, list and watch (a cached kind may also be read live by key). */
  readonly caches: readonly CachedKind[];
  /**
   * Calls beyond the cache: writes, live reads of kinds it does not cache, and live reads a part
   * makes of a cached kind (declared by the part, though the cache's rule grants them too).
   */
  readonly calls: readonly RbacRule[];
}

const onThisNode = (config: CoildConfig): CacheKindOptions => ({ labelSelector: `${LABEL_NODE}=${config.nodeName}` });

/** coild's access per feature. */
export const COILD_ACCESS: Readonly<Record<CoildFeature, CoildAccess>> = Object.freeze({
  common: {
    caches: [
      // The Node's InternalIPs are the pods' gateways; the Node owns the BlockRequests. Also read
      // live at start (before the cache holds it) and at shutdown (`--clear-routes-on-shutdown`).
      { kind: Kinds.Node, options: (config) => ({ fieldSelector: `metadata.name=${config.nodeName}` }) },
      // This node's Pods: their pool (IPAM) and the Egresses they name (egress); also coild's own
      // Pod, whose owner tells an uninstall from a restart (uninstall.ts).
      // Only the fields coild reads (cached-objects.ts).
      { kind: Kinds.Pod, options: (config) => ({ fieldSelector: `spec.nodeName=${config.nodeName}` }), transform: coildPod },
      // The DaemonSets of coild's namespace: its own gone or deleting means an uninstall, and coild
      // then takes coil off the node as it stops (uninstall.ts).
      { kind: Kinds.DaemonSet, options: (config) => (config.pod ? { namespace: config.pod.namespace } : {}) },
    ],
    // Events on Pods whose ADD failed (a pool out of blocks, an Egress that cannot be set up);
    // the reviews of the callers of its authenticated endpoints (src/runtime/http-auth.ts).
    calls: [...EVENT_RECORDER_RBAC, ...HTTP_AUTH_RBAC],
  },
  ipam: {
    caches: [
      // Its AddressBlocks; a block labelled with a request's UID is the controller's answer to it.
      // BlockRequests are not cached: a watch by label of a custom resource is sent every event of
      // the kind to filter (the apiserver's watch cache indexes no labels), N² deliveries when N
      // nodes ask at once (docs/performance.md#scale); the BlockRequester reads its own by name.
      { kind: Kinds.AddressBlock, options: onThisNode },
      // A namespace's `coil.cybozu.com/pool` annotation chooses its pods' pool.
      { kind: Kinds.Namespace },
      { kind: Kinds.AddressPool },
    ],
    calls: [...BlockRequester.rbac, ...BlockReleaser.rbac, ...CniService.rbac, ...LeakReleaseRequests.rbac],
  },
  egress: {
    caches: [
      { kind: Kinds.Egress },
      // The NAT pods of every Egress, to probe them and point client tunnels at healthy ones
      // (egress/nat-steering.ts); the slices of Egress Services only, by the labels the
      // EndpointSlice controller copies from the Service.
      { kind: Kinds.EndpointSlice, options: () => ({ labelSelector: EGRESS_SLICE_SELECTOR }) },
    ],
    calls: [...EgressWatcher.rbac, ...EgressOnlyCniService.rbac],
  },
});

/**
 * Declares coild's informer cache for these flags: the kinds of its features with their
 * selectors, and (IPAM) the AddressBlock index the BlockRequester reads answers through. coild
 * and the scale benchmark's stand-ins (hack/bench/scale-node.ts) both build theirs with it.
 */
export function declareCoildCache(cache: Cache, config: CoildConfig): void {
  for (const feature of coildFeatures(config)) {
    for (const c of COILD_ACCESS[feature].caches) cache.ensure(c.kind, { transform: c.transform ?? coildObject, ...c.options?.(config) });
  }
  if (config.enableIpam) cache.addIndex(Kinds.AddressBlock, INDEX_BLOCK_BY_REQUEST, blockRequestUidOf);
}

/** The features a coild with these flags runs: `common`, then `ipam` and `egress` when enabled. */
export function coildFeatures(flags: { readonly enableIpam: boolean; readonly enableEgress: boolean }): CoildFeature[] {
  return ['common', ...(flags.enableIpam ? (['ipam'] as const) : []), ...(flags.enableEgress ? (['egress'] as const) : [])];
}

/** The RBAC rules of one feature: reads of its cached kinds, then its calls (unmerged). */
export function coildRbac(feature: CoildFeature): RbacRule[] {
  const access = COILD_ACCESS[feature];
  return [...access.caches.map((c) => readRule(c.kind)), ...access.calls];
}
