import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import doti from '@dot-i/k8s-operator';
import { KubeConfig, type KubernetesObject } from '@kubernetes/client-node';
import { ApiTransport } from './api-transport.js';
import { Cache } from './cache.js';
import type { Client } from './client.js';
import { defineKind } from './kind.js';
import { silentLogger } from './logging.js';
import { OperatorFacade } from './operator-facade.js';

const Operator = (doti as unknown as { default?: typeof doti.default }).default ?? (doti as unknown as typeof doti.default);
const Thing = defineKind({ group: 'test.coil.example', version: 'v1', kind: 'Thing', plural: 'things', namespaced: true });
const FIN = 'test.coil.example/cleanup';

function kubeConfig(): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromOptions({ clusters: [{ name: 'c', server: 'https://127.0.0.1:1' }], users: [{ name: 'u' }], contexts: [{ name: 'x', cluster: 'c', user: 'u' }], currentContext: 'x' });
  return kc;
}

/** A façade whose finalizer writes are recorded instead of sent. */
function facade() {
  const writes: { name: string; resourceVersion?: string; finalizers: readonly string[] }[] = [];
  const client = {
    async setFinalizers(_kind: unknown, obj: KubernetesObject, finalizers: readonly string[]) {
      writes.push({ name: obj.metadata!.name!, ...(obj.metadata?.resourceVersion && { resourceVersion: obj.metadata.resourceVersion }), finalizers });
      return obj;
    },
  } as unknown as Client;
  const log = silentLogger();
  return { operator: new OperatorFacade(new Cache(new ApiTransport(kubeConfig()), log), client, log), writes };
}

const thing = (metadata: KubernetesObject['metadata']): KubernetesObject => ({ apiVersion: 'test.coil.example/v1', kind: 'Thing', metadata: { namespace: 'ns', resourceVersion: '7', ...metadata } });

describe('OperatorFacade', () => {
  it('loads no KubeConfig of its own (dot-i\'s constructor would load the default one)', () => {
    const original = KubeConfig.prototype.loadFromDefault;
    let loads = 0;
    KubeConfig.prototype.loadFromDefault = function (this: KubeConfig, ...args: Parameters<KubeConfig['loadFromDefault']>) {
      loads++;
      return original.apply(this, args);
    };
    try {
      facade();
    } finally {
      KubeConfig.prototype.loadFromDefault = original;
    }
    assert.equal(loads, 0);
  });

  it('runs dot-i\'s own lifecycle and finalizer flow', () => {
    assert.ok(OperatorFacade.prototype instanceof Operator);
    assert.equal(OperatorFacade.prototype.start, Operator.prototype.start);
    assert.equal((OperatorFacade.prototype as unknown as Record<string, unknown>).handleResourceFinalizer, (Operator.prototype as unknown as Record<string, unknown>).handleResourceFinalizer);
  });

  it('adds the finalizer to a live object, guarded by its resourceVersion', async () => {
    const { operator, writes } = facade();
    let cleaned = false;
    assert.equal(await operator.handleFinalizer(Thing, thing({ name: 'a', finalizers: ['other'] }), FIN, async () => void (cleaned = true)), true);
    assert.deepEqual(writes, [{ name: 'a', resourceVersion: '7', finalizers: ['other', FIN] }]);
    assert.equal(cleaned, false);
    assert.equal(await operator.handleFinalizer(Thing, thing({ name: 'a', finalizers: [FIN] }), FIN, async () => void (cleaned = true)), false, 'a live object holding it is left to the caller');
    assert.equal(writes.length, 1);
  });

  it('runs the cleanup of a deleting object, then removes only its finalizer', async () => {
    const { operator, writes } = facade();
    const order: string[] = [];
    const deleting = thing({ name: 'b', deletionTimestamp: new Date(), finalizers: ['other', FIN] });
    const original = structuredClone(deleting);
    const done = await operator.handleFinalizer(Thing, Object.freeze(deleting), FIN, async (o) => void order.push(`cleanup ${o.metadata!.name}`));
    assert.equal(done, true);
    assert.deepEqual(order, ['cleanup b']);
    assert.deepEqual(writes, [{ name: 'b', resourceVersion: '7', finalizers: ['other'] }]);
    assert.deepEqual(deleting, original, 'the cached object is not touched');
    assert.equal(await operator.handleFinalizer(Thing, thing({ name: 'c', deletionTimestamp: new Date(), finalizers: ['other'] }), FIN, async () => void order.push('cleanup c')), true);
    assert.deepEqual(order, ['cleanup b'], 'no cleanup once the finalizer is gone');
  });
});
