/**
 * ApiTransport keeps its connections: calls to the same server as the same TLS identity share one
 * connection instead of each opening its own (client-node 2.0.1 builds a new undici Agent per
 * call — 8 ms and a TLS context each), and a rotated client certificate is picked up by the next
 * call through a new connection. This is the HTTP/1.1 path (`http2: false`, and what a server
 * without `h2` gets). Against a local HTTPS server that demands client certificates
 * and counts TLS handshakes; certificates from the envtest CA (openssl).
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TLSSocket } from 'node:tls';
import { after, before, test } from 'node:test';
import { KubeConfig } from '@kubernetes/client-node';
import { ApiTransport } from '../src/runtime/api-transport.js';
import { TestCA } from './envtest/pki.js';

let dir = '';
let ca: TestCA;
let server: Server;
/** Client certificate CN of each TLS handshake the server completed. */
const handshakes: string[] = [];
let kc: KubeConfig;

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'coil-transport-'));
  ca = await TestCA.create(join(dir, 'pki'));
  const serving = await ca.issue('server', '/CN=localhost', 'server', ['IP:127.0.0.1']);
  server = createServer({ cert: serving.certPem, key: serving.keyPem, ca: ca.caPem, requestCert: true, rejectUnauthorized: true }, (req, res) => {
    if (req.url === '/hang') return; // never answers
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ user: (req.socket as TLSSocket).getPeerCertificate().subject?.CN }));
  });
  server.on('secureConnection', (s: TLSSocket) => handshakes.push(String(s.getPeerCertificate().subject?.CN)));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const alice = await ca.issue('alice', '/CN=alice', 'client');
  await writeFile(join(dir, 'user.crt'), alice.certPem);
  await writeFile(join(dir, 'user.key'), alice.keyPem);
  kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'c', server: `https://127.0.0.1:${(server.address() as AddressInfo).port}`, caFile: ca.caFile }],
    users: [{ name: 'u', certFile: join(dir, 'user.crt'), keyFile: join(dir, 'user.key') }],
    contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
    currentContext: 'x',
  });
});

after(async () => {
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
  await rm(dir, { recursive: true, force: true });
});

test('calls as the same identity share one TLS connection; a rotated client certificate gets a new one', async () => {
  // The HTTP/1.1 pool (HTTP/2 has its own test: api-transport-http2.test.ts).
  const transport = new ApiTransport(kc, { http2: false });
  // undici may open a second connection while the first is being returned to its pool; what
  // matters is that calls stop costing a handshake each (without reuse: 10 of them).
  for (let i = 0; i < 10; i++) assert.deepEqual(await transport.request({ method: 'GET', path: '/x' }), { user: 'alice' });
  assert.ok(handshakes.length <= 2, `10 calls one after another made ${handshakes.length} TLS handshakes`);
  const opened = handshakes.length;
  for (let i = 0; i < 10; i++) await transport.request({ method: 'GET', path: '/x' });
  assert.equal(handshakes.length, opened, 'later calls only use the open connections');

  // Rotate the certificate files, as a kubelet-style rotation would.
  const bob = await ca.issue('bob', '/CN=bob', 'client');
  await writeFile(join(dir, 'user.crt'), bob.certPem);
  await writeFile(join(dir, 'user.key'), bob.keyPem);
  assert.deepEqual(await transport.request({ method: 'GET', path: '/x' }), { user: 'bob' });
  assert.deepEqual(handshakes.slice(opened), ['bob']);
});

test('after a call times out, the next call opens a new connection instead of trusting the pool', async () => {
  const transport = new ApiTransport(kc, { http2: false, requestTimeoutMs: 300 });
  for (let i = 0; i < 3; i++) await transport.request({ method: 'GET', path: '/x' });
  const opened = handshakes.length;
  await assert.rejects(transport.request({ method: 'GET', path: '/hang' }), (e: Error & { code?: number }) => e.code === 0);
  await transport.request({ method: 'GET', path: '/x' });
  assert.equal(handshakes.length, opened + 1);
});
