/**
 * Shared pieces of the IPAM controller suites: a Manager holding only the chosen IPAM parts
 * (fresh Registry, own container with the PoolManager and options), webhook registration with the
 * apiserver, and builders for pools, nodes and requests.
 */
import type { V1Node } from '@kubernetes/client-node';
import { Container } from 'inversify';
import type { AddressPoolSpec } from '../../src/api/v2/addresspool.js';
import type { BlockRequest } from '../../src/api/v2/blockrequest.js';
import { addIpam, bindIpam, ipamCache, type IpamParts } from '../../src/controller/ipam-registry.js';
import { Kinds } from '../../src/api/v2/kinds.js';
import { DEFAULT_IPAM_OPTIONS, type IpamOptions } from '../../src/reconcilers/options.js';
import { ApiTransport } from '../../src/runtime/api-transport.js';
import { Client } from '../../src/runtime/client.js';
import { stripManagedFields } from '../../src/runtime/informer.js';
import type { Manager, ManagerOptions } from '../../src/runtime/manager.js';
import { Registry } from '../../src/runtime/registry.js';
import { webhookConfigurations } from '../../src/runtime/webhook-config.js';
import type { ControlPlane } from './control-plane.js';
import { testManager } from './runtime-support.js';

/**
 * A Manager (not started) with the chosen IPAM parts, caching as coil-controller does (managedFields
 * stripped, AddressBlocks slimmed: {@link ipamCache}); webhooks get a serving certificate from `cp`.
 */
export async function ipamManager(cp: ControlPlane, parts: IpamParts, options: Partial<IpamOptions> = {}, identity = 'ipam-test', extra: Partial<ManagerOptions> = {}): Promise<Manager> {
  const opts = { ...DEFAULT_IPAM_OPTIONS, ...options };
  const registry = addIpam(new Registry(), { webhooks: false, addressPool: false, blockRequest: false, gc: false, findingsMetrics: false, ...parts });
  const container = bindIpam(new Container(), opts);
  let webhook;
  if (registry.webhooks.length > 0) {
    const { certFile, keyFile } = await cp.writeServingCert();
    webhook = { host: '127.0.0.1', port: 0, certFile, keyFile };
  }
  const cache = { defaults: { initialBackoffMs: 100, maxBackoffMs: 2_000, transform: stripManagedFields }, kinds: ipamCache() };
  return testManager(cp, registry, { container, identity, name: 'coil-controller', cache, ...(webhook && { webhook }), ...extra });
}

/** Registers the webhook configurations of `registry` pointing at a started Manager. */
export async function registerWebhooks(cp: ControlPlane, registry: Registry, port: number, name: string): Promise<void> {
  const configs = webhookConfigurations(registry, name, { url: `https://127.0.0.1:${port}`, caPem: cp.ca.caPem });
  for (const [plural, body] of [['validatingwebhookconfigurations', configs.validating], ['mutatingwebhookconfigurations', configs.mutating]] as const) {
    if (!body) continue;
    const res = await cp.request('POST', `/apis/admissionregistration.k8s.io/v1/${plural}`, body);
    if (res.status !== 201) throw new Error(`register ${plural}: ${res.status} ${res.body}`);
  }
}

/** An admin client of its own (not the Manager's). */
export function adminClient(cp: ControlPlane): Client {
  return new Client(new ApiTransport(cp.kubeConfig), 'envtest');
}

/** Creates an AddressPool. */
export function createPool(client: Client, name: string, spec: Partial<AddressPoolSpec> & Pick<AddressPoolSpec, 'subnets'>) {
  return client.create(Kinds.AddressPool, { metadata: { name }, spec: { blockSizeBits: 5, ...spec } });
}

/** Creates a Node; `ready` sets its Ready condition (True/False) through the status subresource. */
export async function createNode(client: Client, name: string, ready?: { status: 'True' | 'False' | 'Unknown'; sinceMs: number }): Promise<V1Node> {
  const node = await client.create(Kinds.Node, { metadata: { name } });
  if (!ready) return node;
  return setNodeReady(client, name, ready);
}

/** Sets a Node's Ready condition, `lastTransitionTime` = `sinceMs`. */
export function setNodeReady(client: Client, name: string, ready: { status: 'True' | 'False' | 'Unknown'; sinceMs: number }): Promise<V1Node> {
  const t = new Date(ready.sinceMs).toISOString().replace(/\.\d+Z$/, 'Z');
  const condition = { type: 'Ready', status: ready.status, reason: 'Test', message: 'set by test', lastHeartbeatTime: t, lastTransitionTime: t };
  return client.patchStatus(Kinds.Node, { name }, { conditions: [condition] });
}

/** Creates a BlockRequest as coild would (name `req-<pool>-<node>` unless given). */
export function createRequest(client: Client, pool: string, node: string, name = `req-${pool}-${node}`): Promise<BlockRequest> {
  return client.create(Kinds.BlockRequest, { metadata: { name }, spec: { nodeName: node, poolName: pool } });
}
