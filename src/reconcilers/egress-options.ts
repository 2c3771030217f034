/**
 * Tunables of the Egress reconcilers. The options are bound in the container under
 * {@link EGRESS_OPTIONS} by the program (from flags) or by a test.
 *
 * @see docs/compatibility.md#coil-egress-controller-flags, docs/compatibility.md#egress-reconciler
 */
import { EGRESS_SERVICE_ACCOUNT } from '../api/v2/egress-validation.js';
import { DEFAULT_NETFILTER_BACKEND, FOU_PORT, type NetfilterBackend } from '../api/v2/keys.js';
import { Kinds } from '../api/v2/kinds.js';

/** Injection token of {@link EgressOptions}. */
export const EGRESS_OPTIONS = Symbol.for('coil.reconcilers.EgressOptions');

/** Options of the Egress reconcilers. */
export interface EgressOptions {
  /**
   * Image of the `egress` container when the Egress template names none (`--egress-image`;
   * by default the controller's own image, read from its Pod, as Coil does).
   */
  readonly image: string;
  /** FoU UDP port: the Service port and coil-egress `--fou-port` (`--egress-port`, default 5555). */
  readonly fouPort: number;
  /** Passed to coil-egress as `--backend` (`--backend`, default `iptables` as Coil's). */
  readonly backend: NetfilterBackend;
  /** ClusterRole bound to every namespace's `coil-egress` ServiceAccount; the chart ships `coil-egress`. */
  readonly clusterRole: string;
  /**
   * The controller's `--secure-endpoints`: false adds `--secure-endpoints=false` to coil-egress
   * (Coil's plain HTTP metrics); true (default) leaves coil-egress's own default, HTTPS.
   */
  readonly secureEndpoints?: boolean;
}

/**
 * Image used when neither `--egress-image` nor the controller's own Pod names one (a controller run
 * outside a Pod, as in tests and the lab): the chart's image at the chart's appVersion.
 */
export const FALLBACK_EGRESS_IMAGE = 'ghcr.io/coil-ts/coil:0.2.0';

/** The defaults documented on {@link EgressOptions}. */
export const DEFAULT_EGRESS_OPTIONS: EgressOptions = Object.freeze({
  image: FALLBACK_EGRESS_IMAGE,
  fouPort: FOU_PORT,
  backend: DEFAULT_NETFILTER_BACKEND,
  clusterRole: 'coil-egress',
});

/** Labels every object the Egress controller creates carries (the cache selects on them). */
export const EGRESS_MANAGED_LABELS: Readonly<Record<string, string>> = Object.freeze({
  'app.kubernetes.io/name': 'coil',
  'app.kubernetes.io/component': 'egress',
});

/** Name of the per-namespace ServiceAccount and of the ClusterRoleBinding for egress pods. */
export const EGRESS_ACCESS_NAME = EGRESS_SERVICE_ACCOUNT;


/**
 * Cache settings the Manager must receive (`cache.kinds`) so the Egress reconcilers hold only their
 * own objects, not every Deployment, Service and ServiceAccount of the cluster: owned kinds by
 * {@link EGRESS_MANAGED_LABELS}, the ServiceAccounts and the binding by name.
 */
export function egressCacheKinds() {
  const labelSelector = Object.entries(EGRESS_MANAGED_LABELS).map(([k, v]) => `${k}=${v}`).join(',');
  const byName = { fieldSelector: `metadata.name=${EGRESS_ACCESS_NAME}` };
  return [
    { kind: Kinds.Deployment, options: { labelSelector } },
    { kind: Kinds.Service, options: { labelSelector } },
    { kind: Kinds.PodDisruptionBudget, options: { labelSelector } },
    { kind: Kinds.ServiceAccount, options: byName },
    { kind: Kinds.ClusterRoleBinding, options: byName },
  ];
}
