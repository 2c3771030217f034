/**
 * Egress reconciler: turns an Egress into its Deployment of coil-egress pods, its UDP Service
 * and (when asked) its PodDisruptionBudget, and publishes `status.replicas`/`status.selector` for
 * the scale subresource (`kubectl scale`, HPA).
 *
 * Unlike Coil, the whole desired state is applied each time with server-side apply under one
 * field manager, so whatever the spec stops asking for disappears (strategy, template
 * annotations, affinity config, PDB fields); the PDB itself is deleted when the field is removed;
 * owned objects deleted by hand come back (their deletion enqueues the Egress).
 *
 * No finalizer: the owned objects carry a controller ownerReference and go with the Egress by
 * garbage collection, and the per-namespace ServiceAccount and the ClusterRoleBinding are
 * level-reconciled from the set of Egresses (egress-access.ts), so nothing must run *before* the
 * Egress disappears. A finalizer would only add a way to get stuck (controller down → Egress
 * undeletable).
 *
 * @see docs/compatibility.md#egress-reconciler, docs/compatibility.md#set-but-never-unset
 */
import type { KubernetesObject } from '@kubernetes/client-node';
import { kindRule } from '../runtime/rbac.js';
import { inject } from 'inversify';
import { Gauge } from 'prom-client';
import type { Egress } from '../api/v2/egress.js';
import { Cache } from '../runtime/cache.js';
import { Client } from '../runtime/client.js';
import { Reconciler } from '../runtime/decorators.js';
import { ApiError, PermanentError, TransientError, type Result } from '../runtime/errors.js';
import type { KindDescriptor, ObjectKey } from '../runtime/kind.js';
import { Metrics } from '../runtime/metrics.js';
import type { Reconcile, ReconcileContext, Request } from '../runtime/registry.js';
import { desiredDeployment, desiredPdb, desiredService, egressStatus, isControlledBy } from './egress-objects.js';
import { EGRESS_OPTIONS, type EgressOptions } from './egress-options.js';
import { Kinds } from '../api/v2/kinds.js';

/** While a previous Egress of the same name still has objects awaiting garbage collection, look again this soon. */
const GC_WAIT_MS = 2_000;

/**
 * Reconciles one Egress. Triggered by the Egress and by its Deployment, Service and PDB
 * (controller ownerReference), so a Deployment status change updates `status.replicas` at once.
 * Leader-only: one writer per object.
 */
@Reconciler({
  name: 'egress',
  for: Kinds.Egress,
  owns: [Kinds.Deployment, Kinds.Service, Kinds.PodDisruptionBudget],
  leaderOnly: true,
  rbac: [
    kindRule(Kinds.Egress, ['get', 'list', 'watch']),
    kindRule(Kinds.Egress, ['get', 'update', 'patch'], { subresource: 'status' }),
    // blockOwnerDeletion on owned objects needs this where OwnerReferencesPermissionEnforcement is on.
    kindRule(Kinds.Egress, ['update'], { subresource: 'finalizers' }),
    kindRule(Kinds.Deployment, ['get', 'list', 'watch', 'create', 'update', 'patch']),
    kindRule(Kinds.Service, ['get', 'list', 'watch', 'create', 'update', 'patch']),
    kindRule(Kinds.PodDisruptionBudget, ['get', 'list', 'watch', 'create', 'update', 'patch', 'delete']),
    // The entrypoint reads its own Pod for the default egress image (EgressOptions.image).
    kindRule(Kinds.Pod, ['get']),
  ],
})
export class EgressReconciler implements Reconcile {
  /** `spec.replicas` per Egress (the dashboard and the "egress pods unavailable" alert compare the two). */
  private readonly desiredReplicas: Gauge<'namespace' | 'egress'>;
  /** The Deployment's available replicas per Egress (`status.replicas`). */
  private readonly availableReplicas: Gauge<'namespace' | 'egress'>;

  constructor(
    @inject(Cache) private readonly cache: Cache,
    @inject(Client) private readonly client: Client,
    @inject(EGRESS_OPTIONS) private readonly opts: EgressOptions,
    @inject(Metrics) metrics: Metrics,
  ) {
    const registers = [metrics.registry];
    this.desiredReplicas = new Gauge({ name: 'coil_controller_egress_desired_replicas', help: 'spec.replicas of each Egress', labelNames: ['namespace', 'egress'], registers });
    this.availableReplicas = new Gauge({ name: 'coil_controller_egress_available_replicas', help: 'available NAT pods of each Egress (its Deployment\'s availableReplicas)', labelNames: ['namespace', 'egress'], registers });
  }

  /**
   * @throws PermanentError when an object of the Egress's name exists but belongs to something else,
   *   or the apiserver rejects a built object (a pod template it cannot accept); an Event names it
   * @throws TransientError while objects of a deleted Egress of the same name await garbage collection
   * @throws ApiError on other failed writes (retried with backoff)
   */
  async reconcile(req: Request, ctx: ReconcileContext): Promise<Result> {
    const egress = this.cache.get(Kinds.Egress, req);
    if (!egress || egress.metadata?.deletionTimestamp) {
      const labels = { namespace: req.namespace ?? '', egress: req.name };
      this.desiredReplicas.remove(labels);
      this.availableReplicas.remove(labels);
      return {};
    }
    // Between writes, stop when told to (shutdown past its deadline, Lease lost); the next leader
    // applies the rest.
    await this.apply(Kinds.Deployment, egress, desiredDeployment(egress, this.opts));
    ctx.signal.throwIfAborted();
    await this.apply(Kinds.Service, egress, desiredService(egress, this.opts));
    ctx.signal.throwIfAborted();
    const pdb = desiredPdb(egress);
    if (pdb) await this.apply(Kinds.PodDisruptionBudget, egress, pdb);
    else await this.deleteOwned(Kinds.PodDisruptionBudget, egress);
    ctx.signal.throwIfAborted();
    await this.syncStatus(egress);
    return {};
  }

  /** Server-side apply of `desired`, after checking that an existing object of that name is ours. */
  private async apply<T extends KubernetesObject>(kind: KindDescriptor<T>, egress: Readonly<Egress>, desired: T): Promise<void> {
    const key = keyOf(egress);
    // The cache only holds labelled objects: ask the apiserver before creating, so a foreign
    // object of the same name is reported instead of silently taken over by a forced apply.
    const existing = this.cache.get(kind, key) ?? (await this.client.get(kind, key));
    if (existing && !isControlledBy(existing, egress)) this.notOurs(kind, key, existing);
    try {
      await this.client.apply(kind, desired, { force: true });
    } catch (e) {
      if (isRejected(e)) {
        throw new PermanentError(`${kind.kind} ${key.namespace}/${key.name} rejected by the apiserver: ${e.message}`, { cause: e });
      }
      throw e;
    }
  }

  private notOurs(kind: KindDescriptor, key: ObjectKey, existing: KubernetesObject): never {
    const owner = existing.metadata?.ownerReferences?.find((r) => r.controller);
    if (owner?.kind === 'Egress' && owner.name === key.name) {
      throw new TransientError(`${kind.kind} ${key.namespace}/${key.name} still belongs to a deleted Egress of the same name; waiting for garbage collection`, GC_WAIT_MS);
    }
    throw new PermanentError(`${kind.kind} ${key.namespace}/${key.name} exists and is not controlled by this Egress; delete or rename it`);
  }

  /** Deletes the object of the Egress's name if this Egress controls it (uid-guarded). */
  private async deleteOwned(kind: KindDescriptor, egress: Readonly<Egress>): Promise<void> {
    const existing = this.cache.get(kind, keyOf(egress));
    if (!existing || !isControlledBy(existing, egress)) return;
    await this.client.delete(kind, keyOf(egress), { uid: existing.metadata!.uid! });
  }

  /** Writes `status` through the subresource, only when it changed, guarded by the version read. */
  private async syncStatus(egress: Readonly<Egress>): Promise<void> {
    const deployment = this.cache.get(Kinds.Deployment, keyOf(egress));
    const status = egressStatus(egress, deployment && isControlledBy(deployment, egress) ? deployment : undefined);
    const labels = { namespace: egress.metadata?.namespace ?? '', egress: egress.metadata?.name ?? '' };
    this.desiredReplicas.set(labels, egress.spec.replicas ?? 1);
    this.availableReplicas.set(labels, status.replicas ?? 0);
    if (egress.status?.replicas === status.replicas && egress.status?.selector === status.selector) return;
    await this.client.patchStatus(Kinds.Egress, keyOf(egress), status, { resourceVersion: egress.metadata!.resourceVersion! });
  }
}

/**
 * True when the apiserver refused the body itself, so retrying cannot help until the Egress
 * changes: 400/422 (invalid values), and the 500 that server-side apply answers for a field the
 * typed schema does not declare (a misspelt field in the pod template, which the Egress CRD keeps
 * open: "failed to create typed patch object … field not declared in schema").
 */
function isRejected(e: unknown): e is ApiError {
  if (!(e instanceof ApiError)) return false;
  return e.code === 400 || e.code === 422 || (e.code === 500 && e.message.includes('failed to create typed patch object'));
}

function keyOf(egress: Readonly<Egress>): ObjectKey {
  return { namespace: egress.metadata!.namespace!, name: egress.metadata!.name! };
}
