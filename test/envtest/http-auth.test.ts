/**
 * The authenticated endpoints (src/runtime/secure-serving.ts, http-auth.ts) against a real
 * kube-apiserver: a coil program's `/metrics` over HTTPS with a self-signed certificate, its
 * callers' ServiceAccount tokens reviewed by TokenReview and SubjectAccessReview at this
 * apiserver. What each request costs the apiserver is read from its own counter,
 * `apiserver_request_total{resource="tokenreviews"|"subjectaccessreviews"}`, before and after.
 */
import assert from 'node:assert/strict';
import { request } from 'node:https';
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { parseAllDocuments } from 'yaml';
import { after, before, describe, test } from 'node:test';
import { X509Certificate } from 'node:crypto';
import type { Server } from 'node:http';
import { coilCrds } from '../../src/api/v2/crd.js';
import { Kinds } from '../../src/api/v2/kinds.js';
import { RequestAuthorizer, DEFAULT_REVIEW_RATE } from '../../src/runtime/http-auth.js';
import { boundPort, closeServer, listenEndpoints } from '../../src/runtime/secure-serving.js';
import { selfSignedCert } from '../../src/runtime/self-signed-cert.js';
import type { Client } from '../../src/runtime/client.js';
import { ControlPlane, REPO_ROOT } from './control-plane.js';
import { toolPath } from './tools.js';
import { adminClient } from './controller-support.js';

const NS = 'default';
const run = promisify(execFile);

/** GET over HTTPS without verifying the self-signed certificate (as Prometheus' insecureSkipVerify). */
function get(port: number, path: string, token?: string): Promise<{ status: number; body: string; cert: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, rejectUnauthorized: false, headers: token ? { authorization: `Bearer ${token}` } : {} }, (res) => {
      let body = '';
      const cert = (res.socket as unknown as { getPeerCertificate(): { raw: Buffer } }).getPeerCertificate().raw.toString('base64');
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body, cert }));
    });
    req.on('error', reject);
    req.end();
  });
}

describe('authenticated endpoints against a real apiserver', () => {
  let cp: ControlPlane;
  let client: Client;
  let server: Server;
  let authorizer: RequestAuthorizer;
  let port = 0;
  const tokens: Record<string, string> = {};

  /** The apiserver's own count of review requests, by resource. */
  const reviews = async (): Promise<{ tokenreviews: number; subjectaccessreviews: number }> => {
    const text = (await cp.request('GET', '/metrics')).body;
    const sum = (resource: string): number =>
      text.split('\n').filter((l) => l.startsWith('apiserver_request_total{') && l.includes(`resource="${resource}"`)).reduce((n, l) => n + Number(l.split(' ').pop()), 0);
    return { tokenreviews: sum('tokenreviews'), subjectaccessreviews: sum('subjectaccessreviews') };
  };

  before(async () => {
    cp = await ControlPlane.start({ crds: coilCrds() });
    client = adminClient(cp);
    await client.create(Kinds.ClusterRole, { metadata: { name: 'metrics-reader' }, rules: [{ nonResourceURLs: ['/metrics'], verbs: ['get'] }] });
    await client.create(Kinds.ClusterRoleBinding, { metadata: { name: 'prometheus-metrics' }, roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'metrics-reader' }, subjects: [{ kind: 'ServiceAccount', name: 'prometheus', namespace: NS }] });
    for (const sa of ['prometheus', 'nobody']) {
      await cp.request('POST', `/api/v1/namespaces/${NS}/serviceaccounts`, { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: sa } });
      const r = await cp.request('POST', `/api/v1/namespaces/${NS}/serviceaccounts/${sa}/token`, { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenRequest', spec: { expirationSeconds: 600 } });
      assert.equal(r.status, 201, r.body);
      tokens[sa] = (JSON.parse(r.body) as { status: { token: string } }).status.token;
    }
    authorizer = new RequestAuthorizer({ client });
    server = await listenEndpoints({ host: '127.0.0.1', port: 0 }, {
      probes: { '/healthz': (_q, s) => void s.end('ok') },
      routes: { '/metrics': { handle: (_q, s) => void s.end('coil_metric 1\n') } },
    }, { mode: 'secure', authorizer, tls: selfSignedCert(['127.0.0.1']) });
    port = boundPort(server);
  });
  after(async () => {
    if (server) await closeServer(server);
    await cp?.stop();
  });

  test('HTTPS with a self-signed serving certificate; the probe answers without a token', async () => {
    const r = await get(port, '/healthz');
    assert.equal(r.status, 200);
    const cert = new X509Certificate(Buffer.from(r.cert, 'base64'));
    assert.ok(cert.verify(cert.publicKey), 'self-signed');
    assert.match(cert.subjectAltName ?? '', /IP Address:127\.0\.0\.1/);
    assert.equal(cert.checkIP('127.0.0.1'), '127.0.0.1');
  });

  test('no token: 401, and no request to the apiserver', async () => {
    const before = await reviews();
    for (let i = 0; i < 100; i++) assert.equal((await get(port, '/metrics')).status, 401);
    assert.equal((await get(port, '/other')).status, 401, 'an unknown path too, before anything else');
    assert.deepEqual(await reviews(), before);
  });

  test('a token bound to get /metrics: 200; repeated, no further review at the apiserver', async () => {
    const r = await get(port, '/metrics', tokens.prometheus);
    assert.equal(r.status, 200, r.body);
    assert.equal(r.body, 'coil_metric 1\n');
    const before = await reviews();
    for (let i = 0; i < 50; i++) assert.equal((await get(port, '/metrics', tokens.prometheus)).status, 200);
    assert.deepEqual(await reviews(), before, 'cached: 0 TokenReviews and 0 SubjectAccessReviews for 50 scrapes');
    assert.equal((await get(port, '/nowhere', tokens.prometheus)).status, 404);
  });

  test('a token without the right: 403 naming user and path, cached as well', async () => {
    const r = await get(port, '/metrics', tokens.nobody);
    assert.equal(r.status, 403);
    assert.match(r.body, /^Forbidden: user "system:serviceaccount:default:nobody" cannot get path "\/metrics"/);
    const before = await reviews();
    for (let i = 0; i < 20; i++) assert.equal((await get(port, '/metrics', tokens.nobody)).status, 403);
    assert.deepEqual(await reviews(), before);
  });

  test("the chart's monitors scrape as Prometheus would: their scheme, tlsConfig and bearer authorization, the token of the chart's coil-metrics-reader", async () => {
    const rendered = (await run(await toolPath('helm'), ['template', 'coil', join(REPO_ROOT, 'charts/coil'), '-n', NS,
      '--set', 'monitoring.controller.enabled=true', '--set', 'monitoring.coild.enabled=true', '--set', 'monitoring.egress.enabled=true'])).stdout;
    const docs = parseAllDocuments(rendered).map((d) => d.toJS() as { kind?: string; metadata: { name: string; namespace?: string }; spec?: Record<string, unknown> } | null).filter((d) => d !== null);
    // The chart's reader: its ClusterRole, ServiceAccount and binding, as rendered.
    for (const kind of ['ServiceAccount', 'ClusterRole', 'ClusterRoleBinding'] as const) {
      const doc = docs.find((d) => d.kind === kind && d.metadata.name === 'coil-metrics-reader');
      assert.ok(doc, `the chart renders ${kind} coil-metrics-reader`);
      await client.create(Kinds[kind], doc as never);
    }
    const secret = docs.find((d) => d.kind === 'Secret' && d.metadata.name === 'coil-metrics-reader-token') as unknown as { type: string; metadata: { annotations: Record<string, string> } };
    assert.equal(secret.type, 'kubernetes.io/service-account-token');
    assert.equal(secret.metadata.annotations['kubernetes.io/service-account.name'], 'coil-metrics-reader');
    // What Kubernetes' token controller writes into that Secret (not run here): a token of the account.
    const r = await cp.request('POST', `/api/v1/namespaces/${NS}/serviceaccounts/coil-metrics-reader/token`, { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenRequest', spec: {} });
    const token = (JSON.parse(r.body) as { status: { token: string } }).status.token;
    type Endpoint = { path: string; scheme?: string; tlsConfig?: { insecureSkipVerify?: boolean }; authorization?: { type: string; credentials: { name: string; key: string } } };
    const monitors = docs.filter((d) => d.kind === 'PodMonitor' || d.kind === 'ServiceMonitor');
    assert.deepEqual(monitors.map((m) => m.metadata.name).sort(), ['coil-controller', 'coil-egress', 'coild']);
    for (const m of monitors) {
      const e = ((m.spec!.podMetricsEndpoints ?? m.spec!.endpoints) as Endpoint[])[0]!;
      assert.deepEqual([e.scheme, e.tlsConfig?.insecureSkipVerify, e.authorization?.type, e.authorization?.credentials], ['https', true, 'Bearer', { name: 'coil-metrics-reader-token', key: 'token' }], m.metadata.name);
      const scraped = await get(port, e.path, token);
      assert.deepEqual([scraped.status, scraped.body], [200, 'coil_metric 1\n'], `${m.metadata.name}'s settings scrape /metrics`);
    }
    assert.equal((await get(port, '/metrics', tokens.nobody)).status, 403, 'another account still may not');
  });

  test(`1,000 made-up tokens cost the apiserver at most the rate limit (burst ${DEFAULT_REVIEW_RATE.burst}, ${DEFAULT_REVIEW_RATE.perSecond}/s)`, async () => {
    const before = await reviews();
    const t0 = performance.now();
    const statuses = new Map<number, number>();
    for (let i = 0; i < 1000; i++) {
      const s = (await get(port, '/metrics', `made-up-${i}-${Math.random().toString(36).slice(2)}`)).status;
      statuses.set(s, (statuses.get(s) ?? 0) + 1);
    }
    const seconds = (performance.now() - t0) / 1000;
    const after = await reviews();
    const spent = after.tokenreviews - before.tokenreviews;
    const limit = DEFAULT_REVIEW_RATE.burst + Math.ceil(seconds * DEFAULT_REVIEW_RATE.perSecond);
    console.log(`1,000 made-up tokens in ${seconds.toFixed(1)} s: ${spent} TokenReviews at the apiserver (apiserver_request_total), the limit ${limit}; answers ${JSON.stringify(Object.fromEntries(statuses))}`);
    assert.ok(spent <= limit, `${spent} TokenReviews in ${seconds.toFixed(1)} s; the limit allows ${limit}`);
    assert.equal(after.subjectaccessreviews, before.subjectaccessreviews, 'no access review for a refused token');
    assert.equal((statuses.get(401) ?? 0) + (statuses.get(429) ?? 0), 1000, JSON.stringify([...statuses]));
    assert.equal(statuses.get(401), spent, 'each reviewed token refused: 401; the rest 429 without a review');
    // A known good token is still answered from the cache meanwhile.
    assert.equal((await get(port, '/metrics', tokens.prometheus)).status, 200);
  });
});
