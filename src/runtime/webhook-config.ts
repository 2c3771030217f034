import type { Registry, WebhookRegistration } from './registry.js';

/** How the API server reaches the webhook server. */
export interface WebhookClientConfig {
  /** PEM CA bundle that signed the serving certificate (base64-encoded into `caBundle`). */
  readonly caPem?: string;
  /** Base URL (`https://127.0.0.1:9443`) for out-of-cluster servers; the path is appended. */
  readonly url?: string;
  /** In-cluster Service; used when `url` is absent. */
  readonly service?: { readonly name: string; readonly namespace: string; readonly port?: number };
}

/**
 * Builds the ValidatingWebhookConfiguration and MutatingWebhookConfiguration for the webhooks in
 * `registry`, as controller-gen builds them from markers: one webhook per registration, named
 * `v<kind>.<group>` / `m<kind>.<group>` (Coil's names), rules from the kind descriptor,
 * `admissionReviewVersions: [v1]`. Used by hack/ to write the chart and by envtest to register
 * a test server.
 */
export function webhookConfigurations(registry: Registry, name: string, client: WebhookClientConfig): { validating?: object; mutating?: object } {
  const build = (type: WebhookRegistration['type']): object | undefined => {
    const regs = registry.webhooks.filter((w) => w.type === type);
    if (regs.length === 0) return undefined;
    return {
      apiVersion: 'admissionregistration.k8s.io/v1',
      kind: type === 'validating' ? 'ValidatingWebhookConfiguration' : 'MutatingWebhookConfiguration',
      metadata: { name },
      webhooks: regs.map((w) => ({
        name: `${type === 'validating' ? 'v' : 'm'}${w.for.kind.toLowerCase()}.${w.for.group || 'core.k8s.io'}`,
        admissionReviewVersions: ['v1'],
        sideEffects: w.sideEffects ?? 'None',
        failurePolicy: w.failurePolicy ?? 'Fail',
        timeoutSeconds: 10,
        clientConfig: {
          ...(client.url ? { url: `${client.url.replace(/\/$/, '')}${w.path}` } : { service: { ...client.service, path: w.path } }),
          ...(client.caPem ? { caBundle: Buffer.from(client.caPem).toString('base64') } : {}),
        },
        rules: [
          {
            apiGroups: [w.for.group],
            apiVersions: [w.for.version],
            operations: [...(w.operations ?? ['CREATE', 'UPDATE'])],
            resources: [w.for.plural],
            scope: w.for.namespaced ? 'Namespaced' : 'Cluster',
          },
        ],
      })),
    };
  };
  const validating = build('validating');
  const mutating = build('mutating');
  return { ...(validating ? { validating } : {}), ...(mutating ? { mutating } : {}) };
}
