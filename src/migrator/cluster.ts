/**
 * What `coil-migrator dump` does to the cluster: read Nodes, remove the v1 objects, annotate the
 * namespaces named after v1 pools. Every step is idempotent, so a failed run can be repeated.
 *
 * @see docs/migration-from-coil-v1.md#v1s-kubernetes-objects,
 *   docs/migration-from-coil-v1.md#pools-named-after-namespaces-become-annotations,
 *   docs/migration-from-coil-v1.md#its-dump (the steps)
 */
import { ANN_POOL } from '../api/v2/keys.js';
import type { Client } from '../runtime/client.js';
import type { KindDescriptor } from '../runtime/kind.js';
import { Kinds } from '../api/v2/kinds.js';


/** One v1 object to remove. */
export interface V1Object {
  readonly kind: KindDescriptor;
  readonly namespace?: string;
  readonly name: string;
}

/**
 * The v1 Kubernetes objects, in the original's deletion order: workloads first (so nothing writes
 * etcd any more), then their RBAC and accounts. The etcd-certs Secret is not removed (the
 * original did not either: its name was site-specific).
 * @see docs/migration-from-coil-v1.md#v1s-kubernetes-objects,
 *   docs/migration-from-coil-v1.md#its-dump (step 2)
 */
export const V1_OBJECTS: readonly V1Object[] = [
  { kind: Kinds.DaemonSet, namespace: 'kube-system', name: 'coil-node' },
  { kind: Kinds.Deployment, namespace: 'kube-system', name: 'coil-controllers' },
  { kind: Kinds.ConfigMap, namespace: 'kube-system', name: 'coil-config' },
  { kind: Kinds.ClusterRoleBinding, name: 'coil-node' },
  { kind: Kinds.ClusterRoleBinding, name: 'coil-controllers' },
  { kind: Kinds.ClusterRole, name: 'coil-node' },
  { kind: Kinds.ClusterRole, name: 'coil-controllers' },
  { kind: Kinds.ServiceAccount, namespace: 'kube-system', name: 'coil-node' },
  { kind: Kinds.ServiceAccount, namespace: 'kube-system', name: 'coil-controller' },
];

/** A cluster step that did not finish (e.g. a v1 object still present after the wait). */
export class ClusterStepError extends Error {
  override readonly name = 'ClusterStepError';
}

/** Options shared by the cluster steps. */
export interface ClusterOptions {
  readonly client: Client;
  /** Progress lines, for stderr. */
  readonly log: (line: string) => void;
  /** Poll interval and limit of "wait until deleted"; defaults 1 s and 100 s (the original's). */
  readonly pollMs?: number;
  readonly waitMs?: number;
}

/**
 * Reads Namespace `default`, as the original did before anything else, so a wrong kubeconfig
 * fails before etcd is touched.
 * @throws ApiError or a network error from the client
 */
export async function checkCluster(client: Client): Promise<void> {
  const ns = await client.get(Kinds.Namespace, { name: 'default' });
  if (ns === undefined) throw new ClusterStepError('namespace "default" not found: is --kubeconfig pointing at the right cluster?');
}

/** Names of the Nodes that exist now. */
export async function listNodeNames(client: Client): Promise<Set<string>> {
  return new Set((await client.list(Kinds.Node)).map((n) => n.metadata!.name!));
}

/**
 * Deletes each of {@link V1_OBJECTS} with foreground propagation (NotFound counts as done) and
 * waits until it is gone, so v1 coild has stopped writing etcd before etcd is read for output.
 * @throws ClusterStepError when an object is still there after `waitMs`; ApiError on other failures
 */
export async function uninstallV1(o: ClusterOptions): Promise<void> {
  const pollMs = o.pollMs ?? 1_000;
  const waitMs = o.waitMs ?? 100_000;
  for (const obj of V1_OBJECTS) {
    const key = { name: obj.name, ...(obj.namespace && { namespace: obj.namespace }) };
    const label = `${obj.kind.kind} ${obj.namespace ? `${obj.namespace}/` : ''}${obj.name}`;
    const existed = await o.client.delete(obj.kind, key, { propagationPolicy: 'Foreground' });
    const deadline = Date.now() + waitMs;
    while ((await o.client.get(obj.kind, key)) !== undefined) {
      if (Date.now() > deadline) throw new ClusterStepError(`${label} is still present ${waitMs / 1000} s after deleting it`);
      await new Promise((r) => setTimeout(r, pollMs));
    }
    o.log(existed ? `deleted ${label}` : `${label} not found (already removed)`);
  }
}

/**
 * For each pool name, annotates the namespace of that name with `coil.cybozu.com/pool: <name>`
 * if it exists (v1's implicit "pool = namespace" rule, made explicit for v2). Pools with no
 * such namespace are reported, as is the rule that namespaces created later need the annotation.
 * @returns the namespaces annotated (or already annotated)
 * @see docs/migration-from-coil-v1.md#pools-named-after-namespaces-become-annotations,
 *   docs/migration-from-coil-v1.md#pool-names
 */
export async function annotateNamespaces(o: ClusterOptions, poolNames: readonly string[]): Promise<string[]> {
  const done: string[] = [];
  for (const name of poolNames) {
    const ns = await o.client.get(Kinds.Namespace, { name });
    if (ns === undefined) {
      o.log(`pool ${name}: no namespace ${name}; nothing to annotate (a namespace created later needs ${ANN_POOL}=${name} by hand)`);
      continue;
    }
    if (ns.metadata?.annotations?.[ANN_POOL] !== name) {
      await o.client.mergePatch(Kinds.Namespace, { name }, { metadata: { annotations: { [ANN_POOL]: name } } });
      o.log(`annotated namespace ${name} with ${ANN_POOL}=${name}`);
    } else {
      o.log(`namespace ${name} already has ${ANN_POOL}=${name}`);
    }
    done.push(name);
  }
  return done;
}
