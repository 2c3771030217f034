/**
 * Puts the chart's access control into the lab and hands each program the credentials of the
 * ServiceAccount the chart gives it, so a missing RBAC rule fails in the lab as it would in a
 * cluster: the chart's ServiceAccounts, (Cluster)Roles and bindings are applied as rendered by
 * `helm template`, and each program gets a kubeconfig with a TokenRequest token of its account.
 * The webhook configurations are applied too, pointed at the lab controller's local URL.
 */
import { execFile } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { promisify } from 'node:util';
import * as k8s from '@kubernetes/client-node';
import { parseAllDocuments, stringify } from 'yaml';
import type { ControlPlane } from '../../test/envtest/control-plane.js';
import { kubectl, toolPath } from '../../test/envtest/tools.js';

const run = promisify(execFile);
export const LAB_NAMESPACE = 'kube-system';

const APPLIED_KINDS = new Set([
  'ServiceAccount', 'ClusterRole', 'ClusterRoleBinding', 'Role', 'RoleBinding', 'ConfigMap',
  'MutatingWebhookConfiguration', 'ValidatingWebhookConfiguration',
]);

interface WebhookConfig {
  kind: string;
  webhooks?: { clientConfig: { service?: { path?: string }; url?: string; caBundle?: string } }[];
}

/**
 * Renders charts/coil with helm, applies its access-control and webhook objects (webhooks
 * rewritten to `webhookUrl` + their path, with `caPem` as caBundle), and returns the rendered
 * values' conflist for the lab kubelet.
 */
export async function applyChart(cp: ControlPlane, chartDir: string, webhookUrl: string, caPem: string): Promise<{ netconf: string }> {
  const helm = await toolPath('helm');
  const env = { ...process.env, HELM_CACHE_HOME: '/tmp/coil-helm/cache', HELM_CONFIG_HOME: '/tmp/coil-helm/config', HELM_DATA_HOME: '/tmp/coil-helm/data' };
  const { stdout } = await run(helm, ['template', 'coil', chartDir, '--namespace', LAB_NAMESPACE], { env, maxBuffer: 64 << 20 });
  const docs = parseAllDocuments(stdout).map((d) => d.toJS() as (k8s.KubernetesObject & WebhookConfig & { data?: Record<string, string> }) | null);
  const selected = docs.filter((d): d is NonNullable<typeof d> => !!d?.kind && APPLIED_KINDS.has(d.kind));
  for (const doc of selected) {
    for (const hook of doc.webhooks ?? []) {
      const path = hook.clientConfig.service?.path ?? '/';
      hook.clientConfig = { url: `${webhookUrl}${path}`, caBundle: Buffer.from(caPem).toString('base64') };
    }
  }
  await kubectl(cp.kubeconfigPath, ['apply', '--server-side', '-f', '-'], selected.map((d) => stringify(d)).join('---\n'));
  const config = selected.find((d) => d.kind === 'ConfigMap' && d.metadata?.name === 'coil-config');
  return { netconf: config?.data?.cni_netconf ?? '' };
}

/**
 * Writes a kubeconfig for ServiceAccount `name` (a fresh 24 h TokenRequest token) whose server
 * is `server` (the relay's address for programs in a node namespace).
 * @returns the kubeconfig path
 */
export async function serviceAccountKubeconfig(cp: ControlPlane, name: string, server: string, path: string, namespace = LAB_NAMESPACE): Promise<string> {
  const core = cp.kubeConfig.makeApiClient(k8s.CoreV1Api);
  const tr = await core.createNamespacedServiceAccountToken({
    name,
    namespace,
    body: { spec: { audiences: [], expirationSeconds: 86_400 } },
  });
  const config = {
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [{ name: 'lab', cluster: { server, 'certificate-authority-data': Buffer.from(cp.ca.caPem).toString('base64') } }],
    users: [{ name, user: { token: tr.status!.token } }],
    contexts: [{ name, context: { cluster: 'lab', user: name, namespace } }],
    'current-context': name,
  };
  await writeFile(path, JSON.stringify(config, null, 2), { mode: 0o600 });
  return path;
}

/**
 * `kubectl auth can-i` as a ServiceAccount (impersonation); true when allowed. `resource` may
 * name a subresource as `plural.group/sub` (e.g. `blockrequests.coil.cybozu.com/status`).
 */
export async function canI(cp: ControlPlane, serviceAccount: string, verb: string, resource: string): Promise<boolean> {
  const [res, sub] = resource.split('/');
  const args = ['auth', 'can-i', verb, res!, ...(sub ? [`--subresource=${sub}`] : []), `--namespace=${LAB_NAMESPACE}`, `--as=system:serviceaccount:${LAB_NAMESPACE}:${serviceAccount}`];
  const out = await kubectl(cp.kubeconfigPath, args).catch(() => 'no');
  return out.trim() === 'yes';
}
