/**
 * Decorator-registered admission webhooks called by the real kube-apiserver over HTTPS: a
 * validating webhook's denial (a 422 Invalid naming every field) reaches the client-node error
 * and kubectl's stderr; a mutating webhook's JSON patch is applied; certificates rotate without a
 * restart; requests are denied, never allowed, while the cache is not synced.
 */
import 'reflect-metadata';
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { mkdtemp, rename, writeFile } from 'node:fs/promises';
import { request } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect } from 'node:tls';
import { after, before, describe, test } from 'node:test';
import { fieldError, type FieldError } from '../../src/api/v2/field-error.js';
import { ApiTransport } from '../../src/runtime/api-transport.js';
import { Client } from '../../src/runtime/client.js';
import { MutatingWebhook, ValidatingWebhook } from '../../src/runtime/decorators.js';
import { ApiError } from '../../src/runtime/errors.js';
import { defineKind } from '../../src/runtime/kind.js';
import { silentLogger } from '../../src/runtime/logging.js';
import type { Manager } from '../../src/runtime/manager.js';
import { Metrics } from '../../src/runtime/metrics.js';
import { Registry, type Defaulter, type Validator } from '../../src/runtime/registry.js';
import { webhookConfigurations } from '../../src/runtime/webhook-config.js';
import { WebhookServer } from '../../src/runtime/webhook-server.js';
import { ControlPlane, eventually } from './control-plane.js';
import { GROUP, metricValue, sampleCrd, scrape, testManager, type Sample } from './runtime-support.js';
import { kubectl } from './tools.js';

/** A cluster-scoped sample kind, so the generated rules use scope `Cluster`. */
const Pond = defineKind<Sample>({ group: GROUP, version: 'v1', kind: 'Pond', plural: 'ponds', namespaced: false });

const registry = new Registry();

@ValidatingWebhook({ for: Pond, registry })
class PondValidator implements Validator<Sample> {
  validateCreate(obj: Readonly<Sample>): FieldError[] {
    const errs: FieldError[] = [];
    const depth = obj.spec?.['depth'];
    if (typeof depth !== 'number' || depth < 1 || depth > 100) errs.push(fieldError('spec.depth', 'must be between 1 and 100', 'Invalid', depth));
    if (!obj.spec?.['owner']) errs.push(fieldError('spec.owner', 'an owner is required', 'Required'));
    return errs;
  }

  validateUpdate(old: Readonly<Sample>, obj: Readonly<Sample>): FieldError[] {
    return old.spec?.['depth'] === obj.spec?.['depth'] ? [] : [fieldError('spec.depth', 'field is immutable', 'Forbidden')];
  }
}

@MutatingWebhook({ for: Pond, registry })
class PondDefaulter implements Defaulter<Sample> {
  default(obj: Sample): void {
    obj.spec ??= {};
    obj.spec['depth'] ??= 10;
    obj.metadata!.labels = { ...obj.metadata!.labels, [`${GROUP}/defaulted`]: 'true' };
  }
}

/** The error a rejected write ends with. */
async function rejection(p: Promise<unknown>): Promise<ApiError> {
  try {
    await p;
  } catch (e) {
    assert.ok(e instanceof ApiError, String(e));
    return e;
  }
  assert.fail('the write was admitted');
}

describe('runtime: admission webhooks called by the real apiserver', () => {
  let cp: ControlPlane;
  let mgr: Manager;
  let client: Client;
  let dir: string;
  let caPem: string;

  before(async () => {
    cp = await ControlPlane.start({ crds: [sampleCrd(Pond)] });
    dir = await mkdtemp(join(tmpdir(), 'rt-webhook-'));
    const cert = await cp.newServingCert();
    caPem = cert.caPem;
    await writeFile(join(dir, 'tls.crt'), cert.certPem);
    await writeFile(join(dir, 'tls.key'), cert.keyPem);
    mgr = testManager(cp, registry, { webhook: { host: '127.0.0.1', port: 0, certFile: join(dir, 'tls.crt'), keyFile: join(dir, 'tls.key'), certPollMs: 100 } });
    await mgr.start();
    const configs = webhookConfigurations(registry, 'rt-webhook', { url: `https://127.0.0.1:${mgr.ports.webhook}`, caPem });
    for (const [plural, body] of [['validatingwebhookconfigurations', configs.validating], ['mutatingwebhookconfigurations', configs.mutating]] as const) {
      const res = await cp.request('POST', `/apis/admissionregistration.k8s.io/v1/${plural}`, body);
      assert.equal(res.status, 201, res.body);
    }
    client = new Client(new ApiTransport(cp.kubeConfig), 'test');
    // The apiserver picks webhook configurations up asynchronously; wait until the mutator acts.
    await eventually(async () => {
      const p = await client.create(Pond, { metadata: { name: `probe-${Date.now()}` }, spec: { owner: 'test' } });
      return p.spec?.['depth'] === 10;
    });
  });
  after(async () => {
    await mgr?.stop();
    await cp?.stop();
  });

  test("a validating webhook's denial names every field in the client error", async () => {
    const err = await rejection(client.create(Pond, { metadata: { name: 'bad' }, spec: { depth: 1000 } }));
    assert.equal(err.code, 422);
    assert.match(err.message, /admission webhook "vpond\.runtime\.test\.coil\.example" denied the request/);
    assert.match(err.message, /Pond\.runtime\.test\.coil\.example "bad" is invalid: \[spec\.depth: Invalid value: 1000: must be between 1 and 100, spec\.owner: Required: an owner is required\]/);
  });

  test('the denial reaches kubectl', async () => {
    const yaml = `apiVersion: ${GROUP}/v1\nkind: Pond\nmetadata:\n  name: bad-kubectl\nspec:\n  depth: 0\n  owner: me\n`;
    await assert.rejects(kubectl(cp.kubeconfigPath, ['create', '-f', '-'], yaml), (e: Error) => {
      // kubectl prints a 422 Invalid from its causes, one field per line, as for built-in validation.
      assert.match(e.message, /The Pond "bad-kubectl" is invalid: spec\.depth: Invalid value: 0: must be between 1 and 100/);
      return true;
    });
  });

  test("a mutating webhook's JSON patch is applied before validation", async () => {
    const p = await client.create(Pond, { metadata: { name: 'defaulted' }, spec: { owner: 'me' } });
    assert.equal(p.spec?.['depth'], 10);
    assert.equal(p.metadata?.labels?.[`${GROUP}/defaulted`], 'true');
  });

  test('an update is validated against the old object', async () => {
    const err = await rejection(client.mergePatch(Pond, { name: 'defaulted' }, { spec: { depth: 20 } }));
    assert.match(err.message, /spec\.depth: Forbidden: field is immutable/);
    await client.mergePatch(Pond, { name: 'defaulted' }, { spec: { owner: 'someone-else' } });
  });

  test('a rotated certificate is served without a restart', async () => {
    const fingerprint = () =>
      new Promise<string>((resolve, reject) => {
        const s = connect({ host: '127.0.0.1', port: mgr.ports.webhook!, ca: caPem, servername: 'localhost' }, () => {
          resolve(s.getPeerX509Certificate()!.fingerprint256);
          s.end();
        });
        s.on('error', reject);
      });
    const before_ = await fingerprint();
    const next = await cp.newServingCert();
    // Write then rename, as kubelet's atomic Secret update does, so no half-written file is read.
    await writeFile(join(dir, 'tls.key.new'), next.keyPem);
    await writeFile(join(dir, 'tls.crt.new'), next.certPem);
    await rename(join(dir, 'tls.key.new'), join(dir, 'tls.key'));
    await rename(join(dir, 'tls.crt.new'), join(dir, 'tls.crt'));
    const expected = new X509Certificate(next.certPem).fingerprint256;
    await eventually(async () => (await fingerprint()) === expected, { timeoutMs: 10_000 });
    assert.notEqual(before_, expected);
    const p = await client.create(Pond, { metadata: { name: 'after-rotation' }, spec: { owner: 'me' } });
    assert.equal(p.spec?.['depth'], 10, 'the apiserver still reaches the webhook');
  });

  test('webhook and certificate metrics count the real requests', async () => {
    const m = await scrape(mgr.ports.metrics!);
    assert.ok(metricValue(m, 'controller_runtime_webhook_requests_total', { webhook: '/validate-runtime-test-coil-example-v1-pond', code: '200' })! >= 3);
    assert.ok(metricValue(m, 'controller_runtime_webhook_requests_total', { webhook: '/mutate-runtime-test-coil-example-v1-pond', code: '200' })! >= 3);
    assert.ok(metricValue(m, 'controller_runtime_webhook_latency_seconds_count', { webhook: '/validate-runtime-test-coil-example-v1-pond' })! >= 3);
    assert.equal(metricValue(m, 'controller_runtime_webhook_requests_in_flight', { webhook: '/validate-runtime-test-coil-example-v1-pond' }), 0);
    assert.ok(metricValue(m, 'certwatcher_read_certificate_total')! >= 2);
  });

  test('requests are denied with 503, not allowed, while the cache is not synced', async () => {
    const cert = await cp.newServingCert();
    await writeFile(join(dir, 'unsynced.crt'), cert.certPem);
    await writeFile(join(dir, 'unsynced.key'), cert.keyPem);
    const server = new WebhookServer(
      { host: '127.0.0.1', port: 0, certFile: join(dir, 'unsynced.crt'), keyFile: join(dir, 'unsynced.key'), notReadyReason: () => 'webhook cache is not synced yet' },
      new Metrics({ defaultMetrics: false }),
      silentLogger(),
    );
    server.register('/validate', async (req) => ({ uid: req.uid, allowed: true }));
    await server.start();
    try {
      const review = { apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', request: { uid: 'u-1', kind: { group: GROUP, version: 'v1', kind: 'Pond' }, operation: 'CREATE', object: {} } };
      const body = await new Promise<string>((resolve, reject) => {
        const req = request({ host: '127.0.0.1', port: server.port(), path: '/validate', method: 'POST', ca: cert.caPem, servername: 'localhost', headers: { 'content-type': 'application/json' } }, (res) => {
          let text = '';
          res.on('data', (c: Buffer) => (text += c));
          res.on('end', () => resolve(text));
        });
        req.on('error', reject);
        req.end(JSON.stringify(review));
      });
      const { response } = JSON.parse(body) as { response: { uid: string; allowed: boolean; status: { code: number; message: string } } };
      assert.equal(response.uid, 'u-1');
      assert.equal(response.allowed, false);
      assert.equal(response.status.code, 503);
      assert.match(response.status.message, /not synced yet; retry later/);
    } finally {
      await server.stop();
    }
  });
});

