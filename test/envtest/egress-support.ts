/**
 * Shared pieces of the Egress suites: a Manager holding only the chosen Egress parts (fresh
 * Registry, the options bound, the controller's cache selectors), and Egress builders.
 */
import type { KubeConfig } from '@kubernetes/client-node';
import { Container } from 'inversify';
import type { Egress, EgressSpec } from '../../src/api/v2/egress.js';
import { addEgress, bindEgress, egressCache, type EgressParts } from '../../src/controller/egress-registry.js';
import { DEFAULT_EGRESS_OPTIONS, type EgressOptions } from '../../src/reconcilers/egress-options.js';
import type { Client } from '../../src/runtime/client.js';
import type { Manager } from '../../src/runtime/manager.js';
import { Registry } from '../../src/runtime/registry.js';
import type { ControlPlane } from './control-plane.js';
import { testManager } from './runtime-support.js';
import { Kinds } from '../../src/api/v2/kinds.js';

/** Options the Egress suites run with: a recognisable image. */
export const TEST_EGRESS_OPTIONS: EgressOptions = { ...DEFAULT_EGRESS_OPTIONS, image: 'example.com/coil:test' };

/**
 * A Manager (not started) with the chosen Egress parts; webhooks get a serving certificate from
 * `cp` and listen on `extra.webhookPort` (default: any free port). `extra.kubeConfig` replaces the
 * admin credentials (e.g. the chart's ServiceAccount).
 */
export async function egressManager(
  cp: ControlPlane,
  parts: EgressParts,
  options: Partial<EgressOptions> = {},
  extra: { kubeConfig?: KubeConfig; webhookPort?: number } = {},
): Promise<{ mgr: Manager; registry: Registry }> {
  const registry = addEgress(new Registry(), { webhooks: false, egress: false, access: false, ...parts });
  const container = bindEgress(new Container(), { ...TEST_EGRESS_OPTIONS, ...options });
  let webhook;
  if (registry.webhooks.length > 0) {
    const { certFile, keyFile } = await cp.writeServingCert();
    webhook = { host: '127.0.0.1', port: extra.webhookPort ?? 0, certFile, keyFile };
  }
  const mgr = testManager(cp, registry, {
    container,
    identity: 'egress-test',
    name: 'coil-controller',
    cache: { defaults: { initialBackoffMs: 100, maxBackoffMs: 2_000 }, kinds: egressCache() },
    ...(webhook && { webhook }),
    ...(extra.kubeConfig && { kubeConfig: extra.kubeConfig }),
  });
  return { mgr, registry };
}

/** A valid spec: everything routed through the egress, one replica. */
export function egressSpec(spec: Partial<EgressSpec> = {}): EgressSpec {
  return { destinations: ['0.0.0.0/0'], replicas: 1, sessionAffinity: 'ClientIP', ...spec };
}

/** Creates an Egress. */
export function createEgress(client: Client, namespace: string, name: string, spec: Partial<EgressSpec> = {}): Promise<Egress> {
  return client.create(Kinds.Egress, { metadata: { namespace, name }, spec: egressSpec(spec) });
}
