/**
 * Derives the chart's generated access-control data (charts/coil/files/rbac.yaml and
 * files/webhooks.yaml) from what the code declares, as controller-gen derives roles from
 * kubebuilder markers: each reconciler's `rbac` rules, get/list/watch on every kind its
 * informers cache (for, owns, watches, reads), and the kinds the webhooks read; coild's likewise
 * from the kinds it caches and the calls its parts declare (src/node-agent/rbac.ts). Rules of
 * coil-egress, of leader election and of the admin's `kubectl coil` (src/kubectl-coil/rbac.ts)
 * come from their programs' rbac modules.
 */
import { addEgress } from '../src/controller/egress-registry.js';
import { addIpam } from '../src/controller/ipam-registry.js';
import { coildRbac } from '../src/node-agent/rbac.js';
import { RELEASE_FINALIZERS_RBAC } from '../src/controller/rbac.js';
import { KUBECTL_COIL_RELEASE_RBAC, KUBECTL_COIL_VIEW_RBAC } from '../src/kubectl-coil/rbac.js';
import { DEFAULT_POOL_RBAC } from '../src/reconcilers/default-pool.js';
import { EGRESS_AGENT_RBAC } from '../src/egress-agent/rbac.js';
import { LEADER_ELECTION_RBAC, MANAGER_RBAC, readRule } from '../src/runtime/rbac.js';
import { HTTP_AUTH_RBAC } from '../src/runtime/http-auth.js';
import { Registry, type RbacRule } from '../src/runtime/registry.js';

/** A Kubernetes PolicyRule as the chart writes it. */
export interface PolicyRule {
  apiGroups: string[];
  resources: string[];
  verbs: string[];
  resourceNames?: string[];
}

/** Merges rules with the same group, resource and resourceNames; sorted, verbs sorted. */
export function mergeRules(rules: readonly RbacRule[]): PolicyRule[] {
  const byKey = new Map<string, { group: string; resource: string; names?: readonly string[]; verbs: Set<string> }>();
  for (const r of rules) {
    for (const resource of r.resources) {
      const names = r.resourceNames?.length ? [...r.resourceNames].sort() : undefined;
      const key = `${r.group}|${resource}|${names?.join(',') ?? ''}`;
      const entry = byKey.get(key) ?? { group: r.group, resource, ...(names ? { names } : {}), verbs: new Set<string>() };
      r.verbs.forEach((v) => entry.verbs.add(v));
      byKey.set(key, entry);
    }
  }
  return [...byKey.values()]
    .sort((a, b) => `${a.group}|${a.resource}`.localeCompare(`${b.group}|${b.resource}`))
    .map((e) => ({
      apiGroups: [e.group],
      resources: [e.resource],
      verbs: [...e.verbs].sort(),
      ...(e.names ? { resourceNames: [...e.names] } : {}),
    }));
}

/** Every rule a registry's reconcilers, runnables and webhooks need. */
export function registryRules(registry: Registry): RbacRule[] {
  const rules: RbacRule[] = [];
  for (const r of registry.reconcilers) {
    rules.push(...(r.rbac ?? []), readRule(r.for));
    for (const k of [...(r.owns ?? []), ...(r.reads ?? []), ...(r.watches ?? []).map((w) => w.kind)]) rules.push(readRule(k));
  }
  for (const w of registry.webhooks) rules.push(readRule(w.for));
  return rules;
}

/** The webhook entries of a registry, tagged with the chart feature that enables them. */
function webhookEntries(registry: Registry, feature: 'ipam' | 'egress', type: 'validating' | 'mutating') {
  return registry.webhooks
    .filter((w) => w.type === type)
    .map((w) => ({
      name: `${type === 'validating' ? 'v' : 'm'}${w.for.kind.toLowerCase()}.${w.for.group}`,
      feature,
      path: w.path,
      rules: [{ apiGroups: [w.for.group], apiVersions: [w.for.version], operations: [...(w.operations ?? ['CREATE', 'UPDATE'])], resources: [w.for.plural], scope: w.for.namespaced ? 'Namespaced' : 'Cluster' }],
    }));
}

/** The content of files/rbac.yaml and files/webhooks.yaml (as plain data). */
export function chartAccessData(): { rbac: object; webhooks: object } {
  const ipam = addIpam(new Registry());
  const egress = addEgress(new Registry());
  return {
    rbac: {
      controller: { common: mergeRules([...MANAGER_RBAC, ...HTTP_AUTH_RBAC]), ipam: mergeRules([...registryRules(ipam), ...DEFAULT_POOL_RBAC]), egress: mergeRules(registryRules(egress)) },
      coild: { common: mergeRules(coildRbac('common')), ipam: mergeRules(coildRbac('ipam')), egress: mergeRules(coildRbac('egress')) },
      leaderElection: mergeRules(LEADER_ELECTION_RBAC),
      egressAgent: mergeRules(EGRESS_AGENT_RBAC),
      uninstall: mergeRules(RELEASE_FINALIZERS_RBAC),
      kubectlCoil: { view: mergeRules(KUBECTL_COIL_VIEW_RBAC), admin: mergeRules([...KUBECTL_COIL_VIEW_RBAC, ...KUBECTL_COIL_RELEASE_RBAC]) },
    },
    webhooks: {
      mutating: [...webhookEntries(ipam, 'ipam', 'mutating'), ...webhookEntries(egress, 'egress', 'mutating')],
      validating: [...webhookEntries(ipam, 'ipam', 'validating'), ...webhookEntries(egress, 'egress', 'validating')],
    },
  };
}
