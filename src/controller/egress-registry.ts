/**
 * Assembles the Egress part of coil-controller into a fresh {@link Registry}: the Egress webhooks
 * and the Egress, ServiceAccount and ClusterRoleBinding reconcilers, plus the container binding
 * they need ({@link EgressOptions}) and the cache selectors that keep the controller from caching
 * every Deployment, Service and ServiceAccount of the cluster. Used by the entrypoint and by the
 * envtest suites, which pick only the parts they test.
 * @see docs/compatibility.md#coil-egress-controller-flags, docs/compatibility.md#egress-reconciler
 */
import type { Container, Newable } from 'inversify';
import { EgressClusterRoleBindingReconciler, EgressServiceAccountReconciler } from '../reconcilers/egress-access.js';
import { EgressReconciler } from '../reconcilers/egress.js';
import { DEFAULT_EGRESS_OPTIONS, EGRESS_OPTIONS, egressCacheKinds, type EgressOptions } from '../reconcilers/egress-options.js';
import { EgressDefaulter, EgressValidator } from '../webhooks/egress.js';
import { defaultRegistry, Registry } from '../runtime/registry.js';

/** Which Egress parts to register; everything by default. */
export interface EgressParts {
  readonly webhooks?: boolean;
  /** The Egress reconciler (Deployment, Service, PDB, status). */
  readonly egress?: boolean;
  /** The ServiceAccount and ClusterRoleBinding reconcilers. */
  readonly access?: boolean;
}

/**
 * Copies the chosen registrations (recorded by the decorators in the default registry) into `into`.
 * @returns `into`, for chaining
 */
export function addEgress(into: Registry, parts: EgressParts = {}): Registry {
  const want = new Set<Newable<unknown>>();
  if (parts.webhooks ?? true) want.add(EgressDefaulter).add(EgressValidator);
  if (parts.egress ?? true) want.add(EgressReconciler);
  if (parts.access ?? true) want.add(EgressServiceAccountReconciler).add(EgressClusterRoleBindingReconciler);
  return into.addFrom(defaultRegistry(), want);
}

/** Binds what the Egress reconcilers inject: the options. */
export function bindEgress(container: Container, options: EgressOptions = DEFAULT_EGRESS_OPTIONS): Container {
  container.bind(EGRESS_OPTIONS).toConstantValue(options);
  return container;
}

/** Cache settings to pass as the Manager's `cache.kinds` (label/name selectors of the Egress caches). */
export const egressCache = egressCacheKinds;
