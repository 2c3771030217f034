/**
 * ApiTransport speaks HTTP/2 as client-go does: every request and watch of a process is a stream
 * on one connection; a GOAWAY or a dropped connection gives the next request a new session while
 * the watches on the old one end (an informer then lists and watches again); a connection that
 * stops answering is found by PING; a timeout or an abort closes its stream, not the session; a
 * server without `h2` (and `http2: false`) gets HTTP/1.1.
 *
 * Against a real local node:http2 TLS server that also serves HTTP/1.1 (`allowHTTP1`, as the
 * kube-apiserver does), demanding client certificates (envtest CA, openssl), counting the TCP
 * connections it accepts; a TCP pass-through in front of it plays the half-open connection.
 */
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer as createHttpsServer, type Server as HttpsServer } from 'node:https';
import { constants as h2, createSecureServer, type Http2SecureServer, type Http2Session, type ServerHttp2Stream } from 'node:http2';
import { connect, createServer as createTcpServer, type AddressInfo, type Server as TcpServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, beforeEach, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { TLSSocket } from 'node:tls';
import { KubeConfig } from '@kubernetes/client-node';
import { ApiTransport, type ApiTransportOptions } from '../src/runtime/api-transport.js';
import { Http2Connection } from '../src/runtime/api-http2.js';
import { ApiError } from '../src/runtime/errors.js';
import { TestCA, type CertPair } from './envtest/pki.js';

let dir = '';
let ca: TestCA;
let serving: CertPair;

/**
 * The test server: `/watch` streams one event every 20 ms until the client goes; `/burst` sends 5
 * events with its headers and ends; `/empty` is a 200 without a body; `/echo` answers
 * the method, body and protocol; `/hang` never answers; `/missing` is a 404 Status.
 */
class Server {
  readonly server: Http2SecureServer;
  /** TCP connections accepted. */
  connections = 0;
  readonly sessions: Http2Session[] = [];
  readonly sockets: Socket[] = [];
  /** Protocol versions of the requests served (`2.0`, `1.1`). */
  readonly versions: string[] = [];
  /** RST codes of the streams the client closed. */
  readonly resets: number[] = [];

  constructor() {
    this.server = createSecureServer({ cert: serving.certPem, key: serving.keyPem, ca: ca.caPem, requestCert: true, rejectUnauthorized: true, allowHTTP1: true });
    this.server.on('connection', (s: Socket) => {
      this.connections++;
      this.sockets.push(s);
    });
    this.server.on('session', (s: Http2Session) => this.sessions.push(s));
    this.server.on('stream', (stream: ServerHttp2Stream) => stream.on('close', () => stream.rstCode && this.resets.push(stream.rstCode)));
    this.server.on('request', (req, res) => {
      this.versions.push(req.httpVersion);
      const user = (req.socket as TLSSocket).getPeerCertificate?.().subject?.CN;
      if (req.url?.startsWith('/watch')) {
        res.writeHead(200, { 'content-type': 'application/json' });
        let n = 0;
        const tick = setInterval(() => res.write(JSON.stringify({ type: 'ADDED', object: { n: n++, user } }) + '\n'), 20);
        res.on('close', () => clearInterval(tick));
        return;
      }
      if (req.url === '/burst') {
        // A watch resumed with a backlog: its first events leave with the response headers.
        res.writeHead(200, { 'content-type': 'application/json' });
        for (let n = 0; n < 5; n++) res.write(JSON.stringify({ type: 'ADDED', object: { n } }) + '\n');
        return void res.end();
      }
      if (req.url === '/empty') {
        res.writeHead(200, { 'content-type': 'application/json' });
        return void res.end();
      }
      if (req.url === '/hang') return;
      if (req.url === '/missing') {
        res.writeHead(404, { 'content-type': 'application/json' });
        return void res.end(JSON.stringify({ kind: 'Status', reason: 'NotFound', message: 'nope', code: 404 }));
      }
      let body = '';
      req.setEncoding('utf8');
      req.on('data', (c: string) => (body += c));
      req.on('end', () => {
        res.setHeader('content-type', 'application/json');
        res.end(JSON.stringify({ method: req.method, body, version: req.httpVersion, user, type: req.headers['content-type'] }));
      });
    });
  }

  async listen(): Promise<number> {
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    return (this.server.address() as AddressInfo).port;
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise((r) => this.server.close(r));
  }
}

/** A TCP pass-through whose `freeze()` drops every byte both ways: a half-open connection. */
class Pass {
  private readonly server: TcpServer;
  private frozen = false;
  private readonly sockets = new Set<Socket>();

  constructor(target: number) {
    this.server = createTcpServer((client) => {
      const up = connect(target, '127.0.0.1');
      for (const [from, to] of [[client, up], [up, client]] as const) {
        this.sockets.add(from);
        from.on('data', (d) => this.frozen || to.write(d));
        from.on('close', () => to.destroy());
        from.on('error', () => to.destroy());
      }
    });
  }

  async listen(): Promise<number> {
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    return (this.server.address() as AddressInfo).port;
  }

  freeze(): void {
    this.frozen = true;
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise((r) => this.server.close(r));
  }
}

function kubeConfigFor(port: number): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'c', server: `https://127.0.0.1:${port}`, caFile: ca.caFile }],
    users: [{ name: 'u', certFile: join(dir, 'user.crt'), keyFile: join(dir, 'user.key') }],
    contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
    currentContext: 'x',
  });
  return kc;
}

/** Opens a watch on `/watch`; resolves `opened` at the first event; `done` settles with its end. */
function watch(t: ApiTransport, signal: AbortSignal): { events: unknown[]; opened: Promise<void>; done: Promise<unknown> } {
  const events: unknown[] = [];
  let first!: () => void;
  const opened = new Promise<void>((r) => (first = r));
  const done = t.watch({ path: '/watch' }, signal, (_type, o) => {
    events.push(o);
    first();
  }).then(() => 'ended', (err: unknown) => err);
  return { events, opened, done };
}

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'coil-transport-h2-'));
  ca = await TestCA.create(join(dir, 'pki'));
  serving = await ca.issue('server', '/CN=localhost', 'server', ['IP:127.0.0.1']);
  const alice = await ca.issue('alice', '/CN=alice', 'client');
  await writeFile(join(dir, 'user.crt'), alice.certPem);
  await writeFile(join(dir, 'user.key'), alice.keyPem);
});

after(() => rm(dir, { recursive: true, force: true }));

describe('HTTP/2', () => {
  let server: Server;
  let kc: KubeConfig;
  const transport = (o: ApiTransportOptions = {}): ApiTransport => new ApiTransport(kc, o);

  beforeEach(async () => {
    await server?.close();
    server = new Server();
    kc = kubeConfigFor(await server.listen());
  });
  after(() => server.close());

  test('many requests and 7 concurrent watches share one TCP connection', async () => {
    const t = transport();
    const stop = new AbortController();
    const watches = Array.from({ length: 7 }, () => watch(t, stop.signal));
    await Promise.all(watches.map((w) => w.opened));
    const answers = await Promise.all(Array.from({ length: 50 }, (_, i) => t.request<{ method: string; body: string; version: string; user: string; type: string }>(
      i % 2 ? { method: 'GET', path: '/echo' } : { method: 'PATCH', path: '/echo', body: { i }, contentType: 'application/merge-patch+json' },
    )));
    assert.deepEqual(answers[0], { method: 'PATCH', body: '{"i":0}', version: '2.0', user: 'alice', type: 'application/merge-patch+json' });
    assert.deepEqual(answers[1], { method: 'GET', body: '', version: '2.0', user: 'alice' });
    await assert.rejects(t.request({ method: 'GET', path: '/missing' }), (e: ApiError) => e.code === 404 && e.reason === 'NotFound');
    // A GET answered without a body is an error, never `undefined` (Client.get's "not found").
    await assert.rejects(t.request({ method: 'GET', path: '/empty' }), (e: ApiError) => e.code === 0 && /empty response body/.test(e.message));
    await sleep(100);
    stop.abort(new Error('stopped'));
    for (const w of watches) {
      assert.equal(((await w.done) as Error).message, 'stopped');
      assert.ok(w.events.length >= 3, `a watch received ${w.events.length} events`);
    }
    assert.equal(server.connections, 1, `${server.connections} TCP connections for 7 watches and 51 requests`);
    assert.ok(server.versions.every((v) => v === '2.0'));
  });

  test('a body whose DATA came before the caller reads it is whole (a watch keeps its first events)', async () => {
    // The caller reads a body only after the headers resolved its promise; the DATA sent with
    // them (a resumed watch's backlog) must wait for it, not be emitted to nobody. Lost, the
    // controller's Node cache missed Nodes, and its GC released their blocks (docs/performance.md#scale).
    const port = Number(new URL(kc.getCurrentCluster()!.server).port);
    const url = new URL(`https://127.0.0.1:${port}/burst`);
    const conn = new Http2Connection(url, { ca: ca.caPem, cert: await readFile(join(dir, 'user.crt')), key: await readFile(join(dir, 'user.key')) }, { readIdleTimeoutMs: 30_000, pingTimeoutMs: 15_000, connectTimeoutMs: 5_000 });
    try {
      const res = await conn.send({ method: 'GET', url, headers: {}, payload: undefined, signal: new AbortController().signal });
      assert.equal(res?.status, 200);
      await sleep(200);
      const parts: Uint8Array[] = [];
      for await (const c of res!.chunks) parts.push(c);
      const lines = Buffer.concat(parts).toString('utf8').trim().split('\n');
      assert.deepEqual(lines.map((l) => (JSON.parse(l) as { object: { n: number } }).object.n), [0, 1, 2, 3, 4]);
    } finally {
      conn.close();
    }
  });

  test('a timeout or an abort closes its stream, not the session', async () => {
    const t = transport({ requestTimeoutMs: 200 });
    await t.request({ method: 'GET', path: '/echo' });
    await assert.rejects(t.request({ method: 'GET', path: '/hang' }), (e: ApiError) => e instanceof ApiError && e.code === 0);
    const stop = new AbortController();
    const w = watch(t, stop.signal);
    await w.opened;
    stop.abort(new Error('stopped'));
    assert.equal(((await w.done) as Error).message, 'stopped');
    await assert.rejects(t.request({ method: 'GET', path: '/hang', signal: AbortSignal.abort(new Error('gave up')) }), /gave up/);
    await t.request({ method: 'GET', path: '/echo' });
    await sleep(50);
    assert.equal(server.connections, 1);
    assert.deepEqual(server.resets, [h2.NGHTTP2_CANCEL, h2.NGHTTP2_CANCEL]);
  });

  test('GOAWAY: the next request opens a new session; watches on the old one end when it closes', async () => {
    const t = transport();
    const stop = new AbortController();
    const w = watch(t, stop.signal);
    await w.opened;
    // The apiserver's --goaway-chance: GOAWAY(NO_ERROR), in-flight streams may finish.
    server.sessions[0]!.goaway(h2.NGHTTP2_NO_ERROR);
    await sleep(50);
    assert.equal((await t.request<{ version: string }>({ method: 'GET', path: '/echo' })).version, '2.0');
    assert.equal(server.connections, 2, 'the request after GOAWAY went over a new connection');
    const seen = w.events.length;
    await sleep(100);
    assert.ok(w.events.length > seen, 'the watch on the old session goes on after a graceful GOAWAY');
    // Then the old connection goes (an apiserver shutting down): the watch ends with an error.
    server.sessions[0]!.destroy();
    const end = await w.done;
    assert.ok(end instanceof Error, `the watch ended with ${String(end)}`);
    await t.request({ method: 'GET', path: '/echo' });
    assert.equal(server.connections, 2, 'the new session serves on');
  });

  test('a dropped connection ends the watches with an error and the next request reconnects', async () => {
    const t = transport();
    const ws = [watch(t, new AbortController().signal), watch(t, new AbortController().signal)];
    await Promise.all(ws.map((w) => w.opened));
    for (const s of server.sockets) s.destroy();
    for (const w of ws) assert.ok((await w.done) instanceof Error);
    await t.request({ method: 'GET', path: '/echo' });
    assert.equal(server.connections, 2);
  });

  test('a connection that stops answering is closed by PING within the ping timeout', async () => {
    const pass = new Pass((server.server.address() as AddressInfo).port);
    const t = new ApiTransport(kubeConfigFor(await pass.listen()), { readIdleTimeoutMs: 200, pingTimeoutMs: 300 });
    try {
      const w = watch(t, new AbortController().signal);
      await w.opened;
      const frozenAt = Date.now();
      pass.freeze();
      const end = await w.done;
      const tookMs = Date.now() - frozenAt;
      assert.match(String((end as Error).message), /PING/);
      // read idle (200) + ping timeout (300), with room for a slow machine.
      assert.ok(tookMs < 1500, `the dead connection was found after ${tookMs} ms`);
    } finally {
      await pass.close();
    }
  });

  test('a request that times out on a dead connection makes the next one find a new session', async () => {
    const pass = new Pass((server.server.address() as AddressInfo).port);
    // Read-idle PINGs far away: only the timeout's own PING can find the dead connection.
    const t = new ApiTransport(kubeConfigFor(await pass.listen()), { requestTimeoutMs: 300, readIdleTimeoutMs: 60_000, pingTimeoutMs: 200 });
    try {
      await t.request({ method: 'GET', path: '/echo' });
      pass.freeze();
      await assert.rejects(t.request({ method: 'GET', path: '/echo' }), (e: ApiError) => e.code === 0);
      await sleep(400);
      // The frozen pass-through still accepts new connections, which work.
      (pass as unknown as { frozen: boolean }).frozen = false;
      assert.equal((await t.request<{ version: string }>({ method: 'GET', path: '/echo' })).version, '2.0');
      assert.equal(server.connections, 2);
    } finally {
      await pass.close();
    }
  });

  test('http2: false speaks HTTP/1.1 (a connection per watch)', async () => {
    const t = transport({ http2: false });
    const stop = new AbortController();
    const watches = [watch(t, stop.signal), watch(t, stop.signal)];
    await Promise.all(watches.map((w) => w.opened));
    assert.equal((await t.request<{ version: string }>({ method: 'GET', path: '/echo' })).version, '1.1');
    stop.abort();
    await Promise.all(watches.map((w) => w.done));
    assert.equal(server.connections, 3);
  });
});

describe('a server without h2', () => {
  let server: HttpsServer;
  let connections = 0;

  before(async () => {
    server = createHttpsServer({ cert: serving.certPem, key: serving.keyPem, ca: ca.caPem, requestCert: true, rejectUnauthorized: true }, (req, res) => {
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ version: req.httpVersion }));
    });
    server.on('connection', () => connections++);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  });
  after(async () => {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  });

  test('is spoken to over HTTP/1.1, asked once', async () => {
    const t = new ApiTransport(kubeConfigFor((server.address() as AddressInfo).port));
    for (let i = 0; i < 5; i++) assert.deepEqual(await t.request({ method: 'GET', path: '/x' }), { version: '1.1' });
    // One connection to learn the server has no h2 (ALPN), one kept-alive HTTP/1.1 connection.
    assert.equal(connections, 2);
  });
});
