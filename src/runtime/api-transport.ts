import { createHash } from 'node:crypto';
import { Agent, request as httpRequest, type IncomingMessage } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest, type RequestOptions as HttpsRequestOptions } from 'node:https';
import type { ConnectionOptions } from 'node:tls';
import type { KubeConfig } from '@kubernetes/client-node';
import { Http2Connection } from './api-http2.js';
import { ApiError, type KubeStatus } from './errors.js';

/** One REST call: path relative to the cluster server, query parameters, JSON body. */
export interface ApiRequest {
  readonly method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
  /** Path such as `/apis/coil.cybozu.com/v2/addresspools/default`. */
  readonly path: string;
  readonly query?: Readonly<Record<string, string | number | boolean | undefined>>;
  /** Serialised as JSON unless already a string (SSA YAML/JSON bodies). */
  readonly body?: unknown;
  /** Default `application/json`; PATCH callers pass the patch media type. */
  readonly contentType?: string;
  /** Extra request headers (e.g. one the API server's pod proxy passes on to the pod). */
  readonly headers?: Readonly<Record<string, string>>;
  readonly signal?: AbortSignal;
}

/** Options of an {@link ApiTransport}; every field has a default. */
export interface ApiTransportOptions {
  /**
   * Upper bound of one call, default 30 000 ms. Without it a server that accepts the
   * connection but never answers would hang a reconcile (and its key) or an informer's list
   * forever; the timeout turns that into an ApiError the caller retries.
   */
  readonly requestTimeoutMs?: number;
  /**
   * Speak HTTP/2 to an https: server that negotiates it, all calls and watches multiplexed over
   * one connection (as client-go does). Default true; the programs' `--api-http2=false` turns it
   * off. Never used through a proxy or for plain http:.
   */
  readonly http2?: boolean;
  /** HTTP/2: PING after this long without reading from the server. Default 30 000 ms (client-go). */
  readonly readIdleTimeoutMs?: number;
  /** HTTP/2: close the connection when that PING is not answered within this long. Default 15 000 ms (client-go). */
  readonly pingTimeoutMs?: number;
}

/**
 * Sends REST calls with node:http2 or node:http(s), authenticated by client-node's KubeConfig
 * (`applyToHTTPSOptions`: TLS material, client certificates, tokens, exec plugins, proxies),
 * returning plain JSON.
 *
 * Why node:https rather than client-node's fetch-based HTTP library: that library hands TLS
 * material to undici as a `dispatcher`, which only Node's fetch understands; node:https works the
 * same on Node and on Bun, where coild runs (README, "coild's runtime"), and loads no more of
 * client-node than its KubeConfig.
 *
 * Why not only the typed APIs: `KubernetesObjectApi` runs discovery before its first call per
 * kind and has no subresource calls, `CustomObjectsApi` cannot address core kinds, and both
 * deserialise through ObjectSerializer, which turns timestamps into `Date`s — a cached object
 * would then differ from what the watch delivers. Kind descriptors already carry the path, so one
 * JSON transport serves the cache, the client, the Lease and Events alike.
 *
 * Connections are reused: client-node 2.0.1's `applySecurityAuthentication` builds a new undici
 * Agent — a new connection pool — on every call, so each call would open its own TCP and TLS
 * connection. Measured against envtest: 8 ms per GET instead of 2 ms, and about 230 MB more RSS
 * (TLS contexts and sockets waiting for the allocator) after 2,000 calls. (`applyToHTTPSOptions`
 * does the same with https Agents.) Here one keep-alive agent is kept per TLS identity (server, proxy, CA, client certificate and key, TLS options), so a
 * rotated certificate file or a switched context still gets a fresh pool on the next call, and
 * dropped after a call that timed out or failed on the network (each call had a fresh
 * connection before; a dead shared one must not hold every later call).
 *
 * HTTP/2 (the default for https: without a proxy): one connection per TLS identity carries every
 * call and watch as a stream (api-http2.ts), as client-go's does. Over HTTP/1.1 each open watch
 * holds a connection of its own: coild's 7 watches were 7 sockets in the apiserver per node,
 * 35,000 at 5,000 nodes (docs/performance.md#scale). A server that does not negotiate `h2` by
 * ALPN, a proxy (a CONNECT tunnel) and plain http: take the HTTP/1.1 path below.
 *
 * @throws ApiError on any non-2xx answer (code and decoded `metav1.Status`), or with code 0 when
 *   the server could not be reached (the cause holds the network error)
 */
export class ApiTransport {
  /** The agent (connection pool) in use and the fingerprint of the TLS identity it was built for. */
  private pool: { readonly identity: string; readonly agent: Agent } | undefined;
  /** The HTTP/2 connection in use and the fingerprint of the TLS identity it was built for. */
  private h2: { readonly identity: string; readonly connection: Http2Connection } | undefined;
  private readonly requestTimeoutMs: number;

  constructor(
    readonly kubeConfig: KubeConfig,
    private readonly options: ApiTransportOptions = {},
  ) {
    this.requestTimeoutMs = options.requestTimeoutMs ?? 30_000;
  }

  /** Whether HTTP/2 is tried (ApiTransportOptions.http2; a server without `h2` still gets HTTP/1.1). */
  get http2(): boolean {
    return this.options.http2 ?? true;
  }

  /**
   * Closes the HTTP/2 connection gracefully (open streams finish); a later call opens a new one.
   * HTTP/1.1 keep-alive sockets need no closing: idle ones do not hold the process.
   */
  close(): void {
    this.h2?.connection.close();
    this.h2 = undefined;
  }

  /**
   * Sends `req` and returns the decoded JSON body (`undefined` for an empty body).
   * @throws ApiError (code 0) for a GET answered 2xx with an empty body: a GET always has one, and
   *   read as `undefined` it would look like a 404 to {@link Client.get} (an object taken for gone)
   */
  async request<T>(req: ApiRequest): Promise<T> {
    const timeout = AbortSignal.timeout(this.requestTimeoutMs);
    const signal = req.signal ? AbortSignal.any([req.signal, timeout]) : timeout;
    const { status, body } = await this.send(req, signal);
    let text: string;
    try {
      text = await body.text();
    } catch (cause) {
      throw networkError(req, signal, cause);
    }
    if (status >= 200 && status < 300) {
      if (text === '' && req.method === 'GET') throw new ApiError(0, '', `${req.method} ${req.path}: empty response body (HTTP ${status})`);
      return (text === '' ? undefined : JSON.parse(text)) as T;
    }
    throw failure(req, status, text);
  }

  /**
   * Opens a watch (a GET answered with newline-delimited JSON events) and calls `onEvent` per
   * event until the server ends the stream (resolves) or `signal` aborts (rejects with the abort
   * reason). Unlike client-node's `Watch`, the signal also cancels a request still waiting for
   * response headers, so a stopped informer never leaves a connection behind; inactivity is the
   * caller's business (see `onData`).
   *
   * @param onData called for every chunk received, events or not (watchdog resets)
   * @param onOpen called once the server has accepted the watch (a 2xx status), before any event
   * @throws ApiError when the server answers the watch with a non-2xx status (e.g. 410 Gone)
   */
  async watch(req: Omit<ApiRequest, 'method' | 'body' | 'signal'>, signal: AbortSignal, onEvent: (type: string, object: unknown) => void, onData: () => void = () => undefined, onOpen: () => void = () => undefined): Promise<void> {
    const full: ApiRequest = { ...req, method: 'GET', query: { ...req.query, watch: true } };
    const { status, body } = await this.send(full, signal);
    if (status < 200 || status >= 300) throw failure(full, status, await body.text());
    onOpen();
    const decoder = new TextDecoder();
    let buffered = '';
    try {
      for await (const value of body.chunks()) {
        onData();
        buffered += decoder.decode(value, { stream: true });
        let nl: number;
        while ((nl = buffered.indexOf('\n')) >= 0) {
          const line = buffered.slice(0, nl).trim();
          buffered = buffered.slice(nl + 1);
          if (!line) continue;
          const event = JSON.parse(line) as { type: string; object: unknown };
          onEvent(event.type, event.object);
        }
      }
    } catch (err) {
      throw signal.aborted ? signal.reason : err;
    }
    if (signal.aborted) throw signal.reason;
  }

  private async send(req: ApiRequest, signal: AbortSignal): Promise<{ status: number; body: Body }> {
    const cluster = this.kubeConfig.getCurrentCluster();
    if (!cluster) throw new ApiError(0, '', 'kubeconfig has no current cluster');
    const url = new URL(cluster.server.replace(/\/$/, '') + req.path);
    for (const [k, v] of Object.entries(req.query ?? {})) if (v !== undefined && v !== '') url.searchParams.set(k, String(v));
    // The KubeConfig resolves authentication now (files re-read, exec plugins run, as client-node
    // does per call): TLS material and headers land in `opts`, with a fresh agent in `opts.agent`.
    const opts: HttpsOptions = {};
    await this.kubeConfig.applyToHTTPSOptions(opts);
    const identity = tlsIdentity(cluster, opts);
    const headers: Record<string, string> = { ...req.headers, ...(opts.headers as Record<string, string> | undefined), Accept: 'application/json' };
    const payload = req.body === undefined ? undefined : typeof req.body === 'string' ? req.body : JSON.stringify(req.body);
    if (payload !== undefined) {
      headers['Content-Type'] = req.contentType ?? 'application/json';
      // A length, not chunks: the API server ignores a chunked DELETE body, and the unread chunks
      // would then be taken for the next request on the kept connection.
      headers['Content-Length'] = String(Buffer.byteLength(payload));
    }
    if (this.http2 && url.protocol === 'https:' && !cluster.proxyUrl) {
      if (this.h2?.identity !== identity) {
        // A rotated certificate or switched context: the old session's streams run to their end.
        this.h2?.connection.close();
        this.h2 = { identity, connection: new Http2Connection(url, tlsOf(opts), {
          readIdleTimeoutMs: this.options.readIdleTimeoutMs ?? 30_000,
          pingTimeoutMs: this.options.pingTimeoutMs ?? 15_000,
          connectTimeoutMs: this.requestTimeoutMs,
        }) };
      }
      if (!this.h2.connection.speaksHttp1) {
        // node:https turns `auth` (a kubeconfig's username and password) into this header itself.
        const h2Headers = typeof opts.auth === 'string' ? { ...headers, Authorization: `Basic ${Buffer.from(opts.auth).toString('base64')}` } : headers;
        try {
          const res = await this.h2.connection.send({ method: req.method, url, headers: h2Headers, payload, signal });
          if (res) return { status: res.status, body: bodyOfChunks(res.chunks) };
        } catch (cause) {
          throw networkError(req, signal, cause);
        }
      }
    }
    if (this.pool?.identity !== identity) this.pool = { identity, agent: keptAgent(url, cluster.proxyUrl, opts) };
    const kept = this.pool;
    try {
      const res = await new Promise<IncomingMessage>((resolve, reject) => {
        const r = (url.protocol === 'https:' ? httpsRequest : httpRequest)(url, {
          method: req.method, headers, agent: kept.agent, signal, ...(opts.auth !== undefined ? { auth: opts.auth } : {}),
        }, resolve);
        r.on('error', reject);
        r.end(payload);
      });
      return { status: res.statusCode ?? 0, body: bodyOf(res) };
    } catch (cause) {
      // A call that timed out or failed on the network may sit on a dead (half-open) connection
      // that TCP would take minutes to notice; the next call starts a new pool instead.
      if (!(signal.aborted && (signal.reason as Error | undefined)?.name !== 'TimeoutError') && this.pool === kept) {
        this.pool = undefined;
        kept.agent.destroy();
      }
      throw networkError(req, signal, cause);
    }
  }
}

/**
 * What a failed send throws: the caller's abort propagates as its reason; our own request timeout
 * and network errors become an ApiError with code 0 (the cause holds the error).
 */
function networkError(req: ApiRequest, signal: AbortSignal, cause: unknown): unknown {
  if (signal.aborted && (signal.reason as Error | undefined)?.name !== 'TimeoutError') return signal.reason;
  return new ApiError(0, '', `${req.method} ${req.path}: ${(cause as Error).message}`, undefined, { cause });
}

/** https.RequestOptions as KubeConfig.applyToHTTPSOptions fills it. */
type HttpsOptions = HttpsRequestOptions;

/** A response body, read whole or as a stream of chunks. */
interface Body {
  text(): Promise<string>;
  chunks(): AsyncIterable<Uint8Array>;
}

function bodyOf(res: IncomingMessage): Body {
  return {
    async text() {
      const parts: Buffer[] = [];
      for await (const c of res) parts.push(c as Buffer);
      return Buffer.concat(parts).toString('utf8');
    },
    chunks: () => res,
  };
}

/** A body over HTTP/2 stream chunks (api-http2.ts throws when the stream was cut off). */
function bodyOfChunks(chunks: AsyncIterable<Uint8Array>): Body {
  return {
    async text() {
      const parts: Uint8Array[] = [];
      for await (const c of chunks) parts.push(c);
      return Buffer.concat(parts).toString('utf8');
    },
    chunks: () => chunks,
  };
}

/**
 * The agent to keep for a TLS identity: a keep-alive agent with the KubeConfig's TLS material, or,
 * behind a proxy, the proxy agent client-node built (it tunnels; it keeps its own connections).
 */
function keptAgent(url: URL, proxyUrl: string | undefined, o: HttpsOptions): Agent {
  if (proxyUrl && o.agent instanceof Agent) return o.agent;
  if (url.protocol !== 'https:') return new Agent({ keepAlive: true });
  return new HttpsAgent({ keepAlive: true, ...tlsOf(o) });
}

/** The TLS material of `o` (CA, client certificate and key, PFX, passphrase, verification, SNI), set fields only. */
function tlsOf(o: HttpsOptions): ConnectionOptions {
  return Object.fromEntries(Object.entries({
    ca: o.ca, cert: o.cert, key: o.key, pfx: o.pfx, passphrase: o.passphrase, rejectUnauthorized: o.rejectUnauthorized, servername: o.servername,
  }).filter(([, v]) => v !== undefined)) as ConnectionOptions;
}

/**
 * SHA-256 of what decides the connection pool: the cluster's server, proxy, TLS server name and
 * skip-verify flag, and the CA, client certificate, key, PFX and passphrase as the KubeConfig
 * resolved them for this call.
 */
function tlsIdentity(cluster: { server: string; proxyUrl?: string; tlsServerName?: string; skipTLSVerify?: boolean }, opts: HttpsOptions): string {
  const hash = createHash('sha256');
  for (const part of [cluster.server, cluster.proxyUrl, cluster.tlsServerName, cluster.skipTLSVerify, opts.ca, opts.cert, opts.key, opts.pfx, opts.passphrase, opts.rejectUnauthorized, opts.servername]) {
    hash.update(part === undefined || part === null ? '-' : Buffer.isBuffer(part) ? part : String(part));
    hash.update('\0');
  }
  return hash.digest('hex');
}

function failure(req: ApiRequest, status: number, text: string): ApiError {
  let body: KubeStatus | undefined;
  try {
    body = JSON.parse(text) as KubeStatus;
  } catch {
    body = undefined;
  }
  const message = body?.message ?? (text || `HTTP ${status}`);
  return new ApiError(status, body?.reason ?? '', `${req.method} ${req.path}: ${message}`, body);
}
