/**
 * The objects an Egress asks for, as server-side-apply bodies: its Deployment of coil-egress
 * pods, its UDP Service and its PodDisruptionBudget, plus the status it should show. Pure.
 *
 * Each body states every field the controller is the authority on, and only those. Applied with
 * one field manager, a field the spec no longer asks for is therefore removed by the apiserver
 * (Coil's "set but never unset" gaps, docs/compatibility.md#set-but-never-unset), while fields
 * other managers own (kubectl's `restartedAt` annotation, the allocated clusterIP) are left alone.
 * Where the apiserver would default a field we may later need to drop (Deployment `rollingUpdate`,
 * Service `sessionAffinityConfig`), the default is stated explicitly so that we own it.
 *
 * @see docs/compatibility.md#egress-reconciler
 */
import type { V1Container, V1Deployment, V1DeploymentStrategy, V1OwnerReference, V1PodDisruptionBudget, V1PodSpec, V1Service } from '@kubernetes/client-node';
import { EGRESS_CONTAINER_NAME, type Egress, type EgressStatus } from '../api/v2/egress.js';
import { EGRESS_SERVICE_ACCOUNT } from '../api/v2/egress-validation.js';
import { API_VERSION, egressDrainSeconds, PORTS } from '../api/v2/keys.js';
import { canonicalSnatAddresses } from '../api/v2/snat-addresses.js';
import { EGRESS_MANAGED_LABELS, type EgressOptions } from './egress-options.js';

/** Kubernetes' default `timeoutSeconds` of ClientIP affinity (3 hours). */
export const DEFAULT_AFFINITY_TIMEOUT_SECONDS = 10_800;
/** Requests of the egress container when the template gives none (Coil's values). */
const DEFAULT_REQUESTS = { cpu: '100m', memory: '200Mi' } as const;

/** Selector labels of an Egress's pods: `app.kubernetes.io/{name: coil, instance: <egress>, component: egress}`. */
export function selectorLabels(egressName: string): Record<string, string> {
  return { ...EGRESS_MANAGED_LABELS, 'app.kubernetes.io/instance': egressName };
}

/** A matchLabels selector as `labels.Set.String()` writes it: `k=v` pairs sorted by key, comma-joined. */
export function serializeSelector(labels: Readonly<Record<string, string>>): string {
  return Object.keys(labels).sort().map((k) => `${k}=${labels[k]}`).join(',');
}

/** The controller ownerReference to `egress` (GC deletes the owned object with it). */
export function controllerRef(egress: Readonly<Egress>): V1OwnerReference {
  return { apiVersion: API_VERSION, kind: 'Egress', name: egress.metadata!.name!, uid: egress.metadata!.uid!, controller: true, blockOwnerDeletion: true };
}

/** True when `obj`'s controller ownerReference is `egress` (by uid, so a re-created Egress does not adopt a dying one's objects). */
export function isControlledBy(obj: { metadata?: { ownerReferences?: V1OwnerReference[] } }, egress: Readonly<Egress>): boolean {
  return (obj.metadata?.ownerReferences ?? []).some((r) => r.controller === true && r.uid === egress.metadata?.uid);
}

function objectMeta(egress: Readonly<Egress>) {
  return { name: egress.metadata!.name!, namespace: egress.metadata!.namespace!, labels: selectorLabels(egress.metadata!.name!), ownerReferences: [controllerRef(egress)] };
}

/** The Deployment of NAT pods, named like the Egress. */
export function desiredDeployment(egress: Readonly<Egress>, opts: EgressOptions): V1Deployment {
  const selector = selectorLabels(egress.metadata!.name!);
  const annotations = egress.spec.template?.metadata?.annotations;
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: objectMeta(egress),
    spec: {
      replicas: egress.spec.replicas ?? 1,
      selector: { matchLabels: selector },
      strategy: deploymentStrategy(egress.spec.strategy),
      template: {
        // The selector wins over template labels of the same key, or the pods would not match.
        metadata: { labels: { ...(egress.spec.template?.metadata?.labels ?? {}), ...selector }, ...(annotations && Object.keys(annotations).length > 0 && { annotations: { ...annotations } }) },
        spec: egressPodSpec(egress, opts),
      },
    },
  };
}

/** The strategy spelled out, apps/v1 defaults included, so switching to Recreate drops `rollingUpdate`. */
function deploymentStrategy(s: Egress['spec']['strategy']): V1DeploymentStrategy {
  if (s?.type === 'Recreate') return { type: 'Recreate' };
  return { type: 'RollingUpdate', rollingUpdate: { maxSurge: s?.rollingUpdate?.maxSurge ?? '25%', maxUnavailable: s?.rollingUpdate?.maxUnavailable ?? '25%' } };
}

/**
 * The pod spec: the template's, with `serviceAccountName: coil-egress`, the `run` (emptyDir) and
 * `modules` (hostPath /lib/modules) volumes unless volumes of those names exist, and the `egress`
 * container (prepended when absent) completed by {@link egressContainer}.
 */
export function egressPodSpec(egress: Readonly<Egress>, opts: EgressOptions): V1PodSpec {
  const spec = structuredClone(egress.spec.template?.spec ?? { containers: [] }) as V1PodSpec;
  spec.serviceAccountName = EGRESS_SERVICE_ACCOUNT;
  const volumes = (spec.volumes ??= []);
  if (!volumes.some((v) => v.name === 'run')) volumes.push({ name: 'run', emptyDir: {} });
  if (!volumes.some((v) => v.name === 'modules')) volumes.push({ name: 'modules', hostPath: { path: '/lib/modules' } });
  const containers = (spec.containers ??= []);
  const i = containers.findIndex((c) => c.name === EGRESS_CONTAINER_NAME);
  if (i < 0) containers.unshift(egressContainer({ name: EGRESS_CONTAINER_NAME }, egress, opts));
  else containers[i] = egressContainer(containers[i]!, egress, opts);
  return spec;
}

/**
 * Completes the `egress` container; the user's values win everywhere except the three env
 * variables coil-egress needs. Defaults (docs/compatibility.md#egress-reconciler, with fixes):
 * - image `opts.image`, command `["coil-egress"]`;
 * - args, when none are given: `--fou-port=<opts.fouPort>` (Coil passes none, so a non-default
 *   port broke), `--backend=<opts.backend>`, `--enable-sport-auto` when `fouSourcePortAuto`,
 *   `--snat-addresses=<a>[,<b>]` (canonical text, comma-joined) when `snatAddresses` is set and not
 *   empty (docs/egress-failover.md#sessions-kept-the-shared-snat-address), and when the template
 *   sets `terminationGracePeriodSeconds`, `--drain-timeout=<grace − 5>s` (at least 0), so that the
 *   NAT pod's drain and its 5 s shutdown fit the grace period (coil-egress's default, 25 s, fits
 *   Kubernetes' default 30 s; docs/egress-failover.md#draining), and `--secure-endpoints=false` when the
 *   controller runs so (Coil's plain HTTP metrics; docs/observability.md#access);
 * - env `COIL_POD_NAMESPACE`, `COIL_EGRESS_NAME`, `COIL_POD_ADDRESSES` (fieldRef `status.podIPs`), replacing same-named entries;
 * - mounts `/run` and `/lib/modules` (read-only) unless something is mounted there;
 * - securityContext: `privileged` (needed for the sysctls and the fou module) and
 *   `readOnlyRootFilesystem` default to true, `NET_ADMIN` is always added; unlike Coil, a value
 *   the user set is kept;
 * - requests cpu 100m / memory 200Mi, each only if absent;
 * - ports `metrics` 8080/TCP and `health` 8081/TCP, each unless that name or port is taken (Coil overwrote the user's ports);
 * - liveness `GET /healthz` and readiness `GET /readyz` on port `health`, unless given.
 */
export function egressContainer(c: V1Container, egress: Readonly<Egress>, opts: EgressOptions): V1Container {
  const out: V1Container = structuredClone(c);
  out.image ??= opts.image;
  if (!out.command?.length) out.command = ['coil-egress'];
  if (!out.args?.length) {
    const graceS = egress.spec.template?.spec?.terminationGracePeriodSeconds;
    const snat = canonicalSnatAddresses(egress.spec.snatAddresses ?? []);
    out.args = [`--fou-port=${opts.fouPort}`, `--backend=${opts.backend}`, ...(egress.spec.fouSourcePortAuto ? ['--enable-sport-auto'] : []),
      ...(snat.length > 0 ? [`--snat-addresses=${snat.join(',')}`] : []),
      ...(graceS != null ? [`--drain-timeout=${egressDrainSeconds(graceS)}s`] : []),
      ...(opts.secureEndpoints === false ? ['--secure-endpoints=false'] : [])];
  }
  const ours = [
    { name: 'COIL_POD_NAMESPACE', value: egress.metadata!.namespace! },
    { name: 'COIL_EGRESS_NAME', value: egress.metadata!.name! },
    { name: 'COIL_POD_ADDRESSES', valueFrom: { fieldRef: { apiVersion: 'v1', fieldPath: 'status.podIPs' } } },
  ];
  out.env = [...(out.env ?? []).filter((e) => !ours.some((o) => o.name === e.name)), ...ours];
  const mounts = (out.volumeMounts ??= []);
  if (!mounts.some((m) => m.mountPath === '/run')) mounts.push({ name: 'run', mountPath: '/run' });
  if (!mounts.some((m) => m.mountPath === '/lib/modules')) mounts.push({ name: 'modules', mountPath: '/lib/modules', readOnly: true });
  const sc = (out.securityContext ??= {});
  sc.privileged ??= true;
  sc.readOnlyRootFilesystem ??= true;
  const caps = (sc.capabilities ??= {});
  if (!(caps.add ?? []).includes('NET_ADMIN')) caps.add = [...(caps.add ?? []), 'NET_ADMIN'];
  const requests = ((out.resources ??= {}).requests ??= {});
  for (const [k, v] of Object.entries(DEFAULT_REQUESTS)) requests[k] ??= v;
  const ports = (out.ports ??= []);
  for (const [name, containerPort] of [['metrics', PORTS.egressMetrics], ['health', PORTS.egressHealth]] as const) {
    if (!ports.some((p) => p.name === name || p.containerPort === containerPort)) ports.push({ name, containerPort, protocol: 'TCP' });
  }
  out.livenessProbe ??= { httpGet: { path: '/healthz', port: 'health' } };
  out.readinessProbe ??= { httpGet: { path: '/readyz', port: 'health' } };
  return out;
}

/**
 * The ClusterIP Service client tunnels point at: one unnamed UDP port `opts.fouPort`,
 * `ipFamilyPolicy: PreferDualStack`, the spec's `sessionAffinity`; with ClientIP the affinity
 * config is the spec's or Kubernetes' default (10 800 s), with None it is absent (the apiserver
 * rejects a config with None; Coil copied it anyway).
 */
export function desiredService(egress: Readonly<Egress>, opts: EgressOptions): V1Service {
  const affinity = egress.spec.sessionAffinity ?? 'ClientIP';
  const timeoutSeconds = egress.spec.sessionAffinityConfig?.clientIP?.timeoutSeconds ?? DEFAULT_AFFINITY_TIMEOUT_SECONDS;
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: objectMeta(egress),
    spec: {
      type: 'ClusterIP',
      selector: selectorLabels(egress.metadata!.name!),
      ports: [{ port: opts.fouPort, targetPort: opts.fouPort, protocol: 'UDP' }],
      sessionAffinity: affinity,
      ...(affinity === 'ClientIP' && { sessionAffinityConfig: { clientIP: { timeoutSeconds } } }),
      ipFamilyPolicy: 'PreferDualStack',
    },
  };
}

/** The PodDisruptionBudget over the Egress's pods, or undefined when the spec asks for none (then it must be deleted). */
export function desiredPdb(egress: Readonly<Egress>): V1PodDisruptionBudget | undefined {
  const pdb = egress.spec.podDisruptionBudget;
  if (!pdb) return undefined;
  return {
    apiVersion: 'policy/v1',
    kind: 'PodDisruptionBudget',
    metadata: objectMeta(egress),
    spec: {
      selector: { matchLabels: selectorLabels(egress.metadata!.name!) },
      ...(pdb.minAvailable != null && { minAvailable: pdb.minAvailable }),
      ...(pdb.maxUnavailable != null && { maxUnavailable: pdb.maxUnavailable }),
    },
  };
}

/**
 * The status the Egress should show: `selector` for the scale subresource (HPA finds the pods by
 * it) and `replicas` = the Deployment's `availableReplicas` (0 without a Deployment), as Coil.
 */
export function egressStatus(egress: Readonly<Egress>, deployment: Readonly<V1Deployment> | undefined): Required<EgressStatus> {
  return { replicas: deployment?.status?.availableReplicas ?? 0, selector: serializeSelector(selectorLabels(egress.metadata!.name!)) };
}
