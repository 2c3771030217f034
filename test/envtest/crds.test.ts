/**
 * The Coil CRDs on a real kube-apiserver: installation, the seed documents' samples with their
 * defaults, schema rejections naming the field, the scale subresource through kubectl, and
 * printer columns.
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import * as k8s from '@kubernetes/client-node';
import { parseAllDocuments } from 'yaml';
import { coilCrds, type AddressPool, type Egress } from '../../src/api/v2/index.js';
import { ControlPlane, REPO_ROOT } from './control-plane.js';
import { kubectl } from './tools.js';

async function samples(file: string): Promise<k8s.KubernetesObject[]> {
  const text = await readFile(join(REPO_ROOT, 'config/samples', file), 'utf8');
  return parseAllDocuments(text).map((d) => d.toJS() as k8s.KubernetesObject);
}

/** The apiserver's message of a rejected request (client-node puts the Status in `body`). */
async function rejection(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
  } catch (err) {
    assert.ok(err instanceof k8s.ApiException, `unexpected error ${String(err)}`);
    assert.equal(err.code, 422);
    return (JSON.parse(err.body as string) as { message: string }).message;
  }
  assert.fail('the apiserver accepted an invalid object');
}

describe('Coil CRDs on a real kube-apiserver', () => {
  let cp: ControlPlane;
  let objects: k8s.KubernetesObjectApi;

  before(async () => {
    cp = await ControlPlane.start({ crds: coilCrds() });
    objects = k8s.KubernetesObjectApi.makeApiClient(cp.kubeConfig);
    const core = cp.kubeConfig.makeApiClient(k8s.CoreV1Api);
    for (const name of ['internet-egress', 'domestic-egress', 'egress-test']) {
      await core.createNamespace({ body: { metadata: { name } } });
    }
  });
  after(() => cp?.stop());

  test('every CRD is Established with the coil category and short names', async () => {
    const api = cp.kubeConfig.makeApiClient(k8s.ApiextensionsV1Api);
    const list = await api.listCustomResourceDefinition();
    const names = list.items.map((c) => c.metadata!.name).sort();
    assert.deepEqual(names, [
      'addressblocks.coil.cybozu.com', 'addresspools.coil.cybozu.com',
      'blockrequests.coil.cybozu.com', 'egresses.coil.cybozu.com',
    ]);
    for (const crd of list.items) assert.deepEqual(crd.spec.names.categories, ['coil']);
    const out = await kubectl(cp.kubeconfigPath, ['get', 'coil', '-A', '-o', 'name']);
    assert.equal(out, '', 'category lookup works on an empty cluster');
  });

  test('the seed samples are accepted and read back with defaults applied', async () => {
    for (const file of ['addresspool.yaml', 'addressblock.yaml', 'blockrequest.yaml', 'egress.yaml']) {
      for (const obj of await samples(file)) await objects.create(obj);
    }
    const pool1 = (await objects.read({ apiVersion: 'coil.cybozu.com/v2', kind: 'AddressPool', metadata: { name: 'pool1' } })) as unknown as AddressPool;
    assert.equal(pool1.spec.blockSizeBits, 5);
    assert.deepEqual(pool1.spec.subnets, [{ ipv4: '10.2.0.0/16', ipv6: 'fd01:0203:0405:0607::/112' }]);
    const dflt = (await objects.read({ apiVersion: 'coil.cybozu.com/v2', kind: 'AddressPool', metadata: { name: 'default' } })) as unknown as AddressPool;
    assert.equal(dflt.spec.blockSizeBits, 5, 'blockSizeBits defaults to 5');

    const nat = (await objects.read({ apiVersion: 'coil.cybozu.com/v2', kind: 'Egress', metadata: { name: 'nat', namespace: 'domestic-egress' } })) as unknown as Egress;
    assert.equal(nat.spec.replicas, 1, 'replicas defaults to 1');
    assert.equal(nat.spec.sessionAffinity, 'ClientIP', 'sessionAffinity defaults to ClientIP');
    assert.equal(nat.spec.fouSourcePortAuto, false);
    assert.equal(nat.spec.snatAddresses, undefined, 'snatAddresses (ours) has no default: a Coil Egress is left as it was');
    const internet = (await objects.read({ apiVersion: 'coil.cybozu.com/v2', kind: 'Egress', metadata: { name: 'internet', namespace: 'internet-egress' } })) as unknown as Egress;
    assert.equal(internet.spec.replicas, 2);
    assert.equal(internet.spec.sessionAffinityConfig?.clientIP?.timeoutSeconds, 43200);
    assert.equal(internet.spec.template?.spec?.affinity?.podAntiAffinity?.requiredDuringSchedulingIgnoredDuringExecution?.[0]?.topologyKey,
      'topology.kubernetes.io/zone', 'the pod template keeps fields the CRD schema does not list');

    const block = await objects.read({ apiVersion: 'coil.cybozu.com/v2', kind: 'AddressBlock', metadata: { name: 'pool1-16' } });
    assert.equal((block as unknown as { index: number }).index, 16);
  });

  test('an AddressPool with no subnets is rejected naming spec.subnets', async () => {
    const message = await rejection(objects.create({
      apiVersion: 'coil.cybozu.com/v2', kind: 'AddressPool', metadata: { name: 'empty' }, spec: { subnets: [] },
    } as k8s.KubernetesObject));
    assert.match(message, /spec\.subnets: Invalid value: .*should have at least 1 items/);
  });

  test('an AddressPool with negative blockSizeBits is rejected naming spec.blockSizeBits', async () => {
    const message = await rejection(objects.create({
      apiVersion: 'coil.cybozu.com/v2', kind: 'AddressPool', metadata: { name: 'negative' },
      spec: { blockSizeBits: -1, subnets: [{ ipv4: '10.3.0.0/16' }] },
    } as k8s.KubernetesObject));
    assert.match(message, /spec\.blockSizeBits: Invalid value: -1: spec\.blockSizeBits in body should be greater than or equal to 0/);
  });

  const egress = (spec: Record<string, unknown>) => ({
    apiVersion: 'coil.cybozu.com/v2', kind: 'Egress', metadata: { name: `bad-${Object.keys(spec).join('-') || 'none'}`, namespace: 'egress-test' }, spec,
  }) as k8s.KubernetesObject;

  test('an Egress without destinations is rejected naming spec.destinations', async () => {
    const missing = await rejection(objects.create(egress({ replicas: 1 })));
    assert.match(missing, /spec\.destinations: Required value/);
    const empty = await rejection(objects.create(egress({ destinations: [] })));
    assert.match(empty, /spec\.destinations: Invalid value: .*should have at least 1 items/);
  });

  test('an Egress with replicas 0 is rejected naming spec.replicas', async () => {
    const message = await rejection(objects.create(egress({ destinations: ['0.0.0.0/0'], replicas: 0 })));
    assert.match(message, /spec\.replicas: Invalid value: 0: spec\.replicas in body should be greater than or equal to 1/);
  });

  test('an Egress with sessionAffinity "Sticky" is rejected naming spec.sessionAffinity', async () => {
    const message = await rejection(objects.create(egress({ destinations: ['0.0.0.0/0'], sessionAffinity: 'Sticky' })));
    assert.match(message, /spec\.sessionAffinity: Unsupported value: "Sticky": supported values: "ClientIP", "None"/);
  });

  test('kubectl scale egress changes .spec.replicas through the scale subresource', async () => {
    await objects.create({
      apiVersion: 'coil.cybozu.com/v2', kind: 'Egress', metadata: { name: 'scaled', namespace: 'egress-test' },
      spec: { destinations: ['0.0.0.0/0'] },
    } as k8s.KubernetesObject);
    const out = await kubectl(cp.kubeconfigPath, ['scale', '-n', 'egress-test', 'egress/scaled', '--replicas=3']);
    assert.match(out, /egress\.coil\.cybozu\.com\/scaled scaled/);
    const scaled = (await objects.read({ apiVersion: 'coil.cybozu.com/v2', kind: 'Egress', metadata: { name: 'scaled', namespace: 'egress-test' } })) as unknown as Egress;
    assert.equal(scaled.spec.replicas, 3);
    const scale = JSON.parse(await kubectl(cp.kubeconfigPath, ['get', '--raw', '/apis/coil.cybozu.com/v2/namespaces/egress-test/egresses/scaled/scale'])) as { spec: { replicas: number } };
    assert.equal(scale.spec.replicas, 3);
  });

  test('kubectl get addressblocks shows the Node, Pool, IPv4 and IPv6 columns', async () => {
    const out = await kubectl(cp.kubeconfigPath, ['get', 'addressblocks']);
    const [header, row] = out.trim().split('\n');
    assert.deepEqual(header!.split(/\s+/), ['NAME', 'NODE', 'POOL', 'IPV4', 'IPV6']);
    assert.deepEqual(row!.split(/\s+/), ['pool1-16', 'node1', 'pool1', '10.2.2.0/27', 'fd01:0203:0405:0607::0200/123']);
    const short = await kubectl(cp.kubeconfigPath, ['get', 'ab', '-o', 'name']);
    assert.equal(short.trim(), 'addressblock.coil.cybozu.com/pool1-16', 'short name ab works');
  });
});
