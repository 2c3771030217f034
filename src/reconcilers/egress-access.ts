/**
 * API access of the coil-egress pods: the ServiceAccount `coil-egress` in every namespace that
 * holds an Egress, and the ClusterRoleBinding `coil-egress` binding them all to the ClusterRole
 * `coil-egress` (pods get/list/watch: an egress pod watches client pods in any namespace, so a
 * namespaced RoleBinding would not do). Both follow the set of live Egresses, and, unlike Coil,
 * shrink: a namespace without Egresses loses its ServiceAccount and its subject, and the binding
 * is deleted when no Egress is left.
 *
 * Each object has its own reconciler keyed by the object, triggered by every Egress event, so the
 * state converges from the cache alone (also after a restart, since the cached objects are
 * re-enqueued) without a finalizer on the Egress.
 *
 * @see docs/compatibility.md#egress-reconciler (steps 1–2),
 *   docs/compatibility.md#manifests-and-rbac (RBAC of coil-egress),
 *   docs/compatibility.md#set-but-never-unset
 */
import type { V1ClusterRoleBinding, V1ServiceAccount } from '@kubernetes/client-node';
import { kindRule } from '../runtime/rbac.js';
import { inject } from 'inversify';
import { Cache } from '../runtime/cache.js';
import { Client } from '../runtime/client.js';
import { Reconciler } from '../runtime/decorators.js';
import type { Result } from '../runtime/errors.js';
import { watchKind, type Reconcile, type Request } from '../runtime/registry.js';
import { EGRESS_ACCESS_NAME, EGRESS_MANAGED_LABELS, EGRESS_OPTIONS, type EgressOptions } from './egress-options.js';
import { Kinds } from '../api/v2/kinds.js';

/** Namespaces holding at least one Egress not being deleted, sorted. */
export function egressNamespaces(cache: Cache): string[] {
  const live = cache.list(Kinds.Egress).filter((e) => !e.metadata?.deletionTimestamp);
  return [...new Set(live.map((e) => e.metadata!.namespace!))].sort();
}

/** True when `obj` carries every {@link EGRESS_MANAGED_LABELS} label, i.e. the controller made or adopted it. */
function isManaged(obj: { metadata?: { labels?: Record<string, string> } }): boolean {
  return Object.entries(EGRESS_MANAGED_LABELS).every(([k, v]) => obj.metadata?.labels?.[k] === v);
}

/**
 * Keeps `<namespace>/coil-egress` present (created or adopted by labelling) while the namespace
 * has an Egress, and deletes it (uid-guarded) when none is left — only if the controller made or
 * adopted it, so an unrelated account of that name in an Egress-free namespace is left alone.
 */
@Reconciler({
  name: 'egress-serviceaccount',
  for: Kinds.ServiceAccount,
  watches: [watchKind(Kinds.Egress, (e) => [{ namespace: e.metadata!.namespace!, name: EGRESS_ACCESS_NAME }])],
  leaderOnly: true,
  rbac: [
    // Writes limited to the one name: the controller cannot touch other accounts (create cannot be limited by name).
    kindRule(Kinds.ServiceAccount, ['list', 'watch', 'create']),
    kindRule(Kinds.ServiceAccount, ['get', 'update', 'patch', 'delete'], { resourceNames: [EGRESS_ACCESS_NAME] }),
  ],
})
export class EgressServiceAccountReconciler implements Reconcile {
  constructor(
    @inject(Cache) private readonly cache: Cache,
    @inject(Client) private readonly client: Client,
  ) {}

  /** @throws ApiError on a failed write (retried) */
  async reconcile(req: Request): Promise<Result> {
    if (req.name !== EGRESS_ACCESS_NAME || !req.namespace) return {};
    const wanted = egressNamespaces(this.cache).includes(req.namespace);
    const sa = this.cache.get(Kinds.ServiceAccount, req);
    if (wanted && (!sa || !isManaged(sa))) {
      const body: V1ServiceAccount = { metadata: { name: EGRESS_ACCESS_NAME, namespace: req.namespace, labels: { ...EGRESS_MANAGED_LABELS } } };
      await this.client.apply(Kinds.ServiceAccount, body, { force: true });
    } else if (!wanted && sa && isManaged(sa)) {
      await this.client.delete(Kinds.ServiceAccount, req, { uid: sa.metadata!.uid! });
    }
    return {};
  }
}

/**
 * Keeps the ClusterRoleBinding `coil-egress` with one subject per Egress namespace (sorted), and
 * deletes it when there is none (Coil never shrinks the list to empty).
 */
@Reconciler({
  name: 'egress-clusterrolebinding',
  for: Kinds.ClusterRoleBinding,
  watches: [watchKind(Kinds.Egress, () => [{ name: EGRESS_ACCESS_NAME }])],
  leaderOnly: true,
  rbac: [
    kindRule(Kinds.ClusterRoleBinding, ['list', 'watch', 'create']),
    kindRule(Kinds.ClusterRoleBinding, ['get', 'update', 'patch', 'delete'], { resourceNames: [EGRESS_ACCESS_NAME] }),
    // Binding a ClusterRole needs either its permissions or `bind` on it (RBAC escalation check).
    kindRule(Kinds.ClusterRole, ['bind'], { resourceNames: ['coil-egress'] }),
  ],
})
export class EgressClusterRoleBindingReconciler implements Reconcile {
  constructor(
    @inject(Cache) private readonly cache: Cache,
    @inject(Client) private readonly client: Client,
    @inject(EGRESS_OPTIONS) private readonly opts: EgressOptions,
  ) {}

  /** @throws ApiError on a failed write (retried) */
  async reconcile(req: Request): Promise<Result> {
    if (req.name !== EGRESS_ACCESS_NAME) return {};
    const namespaces = egressNamespaces(this.cache);
    const crb = this.cache.get(Kinds.ClusterRoleBinding, req);
    if (namespaces.length === 0) {
      if (crb && isManaged(crb)) await this.client.delete(Kinds.ClusterRoleBinding, req, { uid: crb.metadata!.uid! });
      return {};
    }
    const desired = this.desired(namespaces);
    if (crb && isManaged(crb) && sameBinding(crb, desired)) return {};
    if (crb && crb.roleRef.name !== desired.roleRef.name) {
      // roleRef is immutable: replace the binding. Its deletion event brings us back to create it.
      await this.client.delete(Kinds.ClusterRoleBinding, req, { uid: crb.metadata!.uid! });
      return {};
    }
    await this.client.apply(Kinds.ClusterRoleBinding, desired, { force: true });
    return {};
  }

  private desired(namespaces: readonly string[]): V1ClusterRoleBinding {
    return {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRoleBinding',
      metadata: { name: EGRESS_ACCESS_NAME, labels: { ...EGRESS_MANAGED_LABELS } },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: this.opts.clusterRole },
      subjects: namespaces.map((namespace) => ({ kind: 'ServiceAccount', name: EGRESS_ACCESS_NAME, namespace })),
    };
  }
}

function sameBinding(a: Readonly<V1ClusterRoleBinding>, b: V1ClusterRoleBinding): boolean {
  const subjects = (x: Readonly<V1ClusterRoleBinding>) => JSON.stringify((x.subjects ?? []).map((s) => [s.kind, s.name, s.namespace ?? '']));
  return a.roleRef.name === b.roleRef.name && subjects(a) === subjects(b);
}
