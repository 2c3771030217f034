import { connect as http2Connect, constants as h2, type ClientHttp2Session, type ClientHttp2Stream, type IncomingHttpHeaders } from 'node:http2';
import { isIP } from 'node:net';
import { connect as tlsConnect, type ConnectionOptions, type TLSSocket } from 'node:tls';

/** How a session's health is checked, as client-go configures Go's HTTP/2 transport. */
export interface Http2Health {
  /**
   * A PING is sent when nothing was read from the server for this long (ms). client-go:
   * `ReadIdleTimeout` 30 s (k8s.io/apimachinery/pkg/util/net/http.go, `readIdleTimeoutSeconds`).
   */
  readonly readIdleTimeoutMs: number;
  /** The session is closed when that PING is not answered within this long (ms). client-go: `PingTimeout` 15 s. */
  readonly pingTimeoutMs: number;
  /** Upper bound of the TCP + TLS connect (ms). */
  readonly connectTimeoutMs: number;
}

/** One request on the session: pseudo-headers are made here; `headers` are the caller's, any case. */
export interface Http2Call {
  readonly method: string;
  readonly url: URL;
  readonly headers: Readonly<Record<string, string>>;
  readonly payload: string | undefined;
  readonly signal: AbortSignal;
}

/** A response: status and the body stream, which throws when the stream did not end cleanly. */
export interface Http2Answer {
  readonly status: number;
  readonly chunks: AsyncIterable<Uint8Array>;
}

/** Thrown when a stream ends without the server's END_STREAM: reset, session gone, PING unanswered. */
export class Http2StreamError extends Error {
  override readonly name = 'Http2StreamError';
}

/**
 * One HTTP/2 connection (a `ClientHttp2Session`) to the API server for one TLS identity, as
 * client-go keeps one per rest.Config: every request and every watch of the process is a stream
 * on it. ALPN offers `h2` and `http/1.1`; a server that picks `http/1.1` (or no ALPN) is
 * remembered, and {@link send} answers `undefined` so the caller takes its HTTP/1.1 path.
 *
 * The session is replaced, never repaired: after a GOAWAY (the apiserver's `--goaway-chance`, its
 * shutdown) new requests open a new session while the old one's streams run to their end; after
 * a reset, an apiserver gone, or an unanswered PING the session is destroyed, its streams end
 * with {@link Http2StreamError} (an informer then lists and watches again, on a new session).
 * A half-open TCP connection — the peer gone without a FIN or RST — is found by PING after
 * `readIdleTimeoutMs` without reading, and a request that timed out checks its session by PING
 * at once: a timeout closes its own stream only, so a session must not be trusted because a
 * stream on it was given up.
 *
 * The session holds the event loop only while a stream is open (like a keep-alive agent's busy
 * sockets), so a CLI exits when its last call is answered.
 */
export class Http2Connection {
  private session: ClientHttp2Session | undefined;
  private connecting: Promise<ClientHttp2Session | undefined> | undefined;
  /** The server answered ALPN without `h2`: every call of this identity goes over HTTP/1.1. */
  private http1 = false;
  private closed = false;

  constructor(
    private readonly origin: URL,
    private readonly tls: ConnectionOptions,
    private readonly health: Http2Health,
  ) {}

  /**
   * Sends one call as a stream; resolves once response headers arrived.
   * @returns `undefined` when the server does not speak HTTP/2 (send it over HTTP/1.1)
   * @throws the network error of the connect, {@link Http2StreamError} when the stream is reset
   *   before its headers, or `signal.reason` when the signal aborts first
   */
  async send(call: Http2Call): Promise<Http2Answer | undefined> {
    const session = await this.sessionFor(call.signal);
    if (!session) return undefined;
    return this.stream(session, call);
  }

  /** True once the server was found to answer ALPN without `h2`. */
  get speaksHttp1(): boolean {
    return this.http1;
  }

  /** Closes the session gracefully: open streams finish, no new one starts. Later calls open none. */
  close(): void {
    this.closed = true;
    this.session?.close();
    this.session = undefined;
  }

  private async sessionFor(signal: AbortSignal): Promise<ClientHttp2Session | undefined> {
    signal.throwIfAborted();
    if (this.http1) return undefined;
    const s = this.session;
    if (s && !s.closed && !s.destroyed) return s;
    this.connecting ??= this.connect().finally(() => (this.connecting = undefined));
    let onAbort: (() => void) | undefined;
    try {
      return await Promise.race([
        this.connecting,
        new Promise<never>((_, reject) => {
          onAbort = () => reject(signal.reason);
          signal.addEventListener('abort', onAbort, { once: true });
        }),
      ]);
    } finally {
      signal.removeEventListener('abort', onAbort!);
    }
  }

  /** TLS with ALPN first, so that the protocol is chosen before HTTP/2 is spoken. */
  private async connect(): Promise<ClientHttp2Session | undefined> {
    if (this.closed) throw new Error('HTTP/2 connection closed');
    const host = this.origin.hostname.replace(/^\[|\]$/g, '');
    const port = Number(this.origin.port || 443);
    const socket: TLSSocket = tlsConnect({
      ...this.tls, host, port, ALPNProtocols: ['h2', 'http/1.1'],
      // SNI carries names only (RFC 6066 §3); Node warns on an IP.
      ...(this.tls.servername === undefined && isIP(host) === 0 ? { servername: host } : {}),
    });
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => socket.destroy(new Error(`connect timed out after ${this.health.connectTimeoutMs} ms`)), this.health.connectTimeoutMs);
      const failed = (err: Error): void => {
        clearTimeout(timer);
        reject(err);
      };
      socket.once('secureConnect', () => {
        clearTimeout(timer);
        socket.off('error', failed);
        resolve();
      });
      socket.once('error', failed);
    });
    if (socket.alpnProtocol !== 'h2') {
      this.http1 = true;
      socket.destroy();
      return undefined;
    }
    const session = http2Connect(this.origin.origin, { createConnection: () => socket });
    // Errors reach the streams (and through them the callers); the session is only replaced.
    session.on('error', () => undefined);
    const forget = (): void => {
      if (this.session === session) this.session = undefined;
    };
    session.on('goaway', forget);
    session.on('close', forget);
    new HealthCheck(session, this.health);
    streamsOf.set(session, 0);
    session.unref();
    if (this.closed) {
      session.close();
      throw new Error('HTTP/2 connection closed');
    }
    this.session = session;
    return session;
  }

  private stream(session: ClientHttp2Session, call: Http2Call): Promise<Http2Answer> {
    const { signal } = call;
    signal.throwIfAborted();
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(call.headers)) {
      // Connection-specific headers are forbidden in HTTP/2 (RFC 9113 §8.2.2).
      const name = k.toLowerCase();
      if (name !== 'connection' && name !== 'keep-alive' && name !== 'transfer-encoding' && name !== 'host') headers[name] = v;
    }
    const stream = session.request(
      { ...headers, [h2.HTTP2_HEADER_METHOD]: call.method, [h2.HTTP2_HEADER_PATH]: call.url.pathname + call.url.search },
      { endStream: call.payload === undefined },
    );
    if (call.payload !== undefined) stream.end(call.payload);
    opened(session);
    const health = HealthCheck.of(session);
    let cleanEnd = false;
    // Every DATA chunk is kept from the start, for the body's reader to take in order. Read from
    // the stream itself once the caller reads the body (after the response headers resolved its
    // promise), the chunks that came in the same socket read as the headers had already gone to
    // this flowing listener: a body read from its middle, a watch silently missing its first
    // events (docs/performance.md#scale: a Node the controller's cache never showed).
    const chunks = new ChunkQueue();
    stream.on('data', (chunk: Uint8Array) => {
      health?.read();
      chunks.push(chunk);
    });
    stream.once('end', () => {
      // Bun ends a stream whose session was destroyed under it with 'end'; Node does not.
      cleanEnd = !session.destroyed && (stream.rstCode === undefined || stream.rstCode === h2.NGHTTP2_NO_ERROR);
      chunks.end();
    });
    stream.on('error', (err: unknown) => chunks.fail(err));
    const onAbort = (): void => {
      stream.close(h2.NGHTTP2_CANCEL);
      // The stream is ours to give up; whether the session still lives is the PING's to say.
      if ((signal.reason as Error | undefined)?.name === 'TimeoutError') health?.checkNow();
    };
    signal.addEventListener('abort', onAbort, { once: true });
    stream.once('close', () => {
      chunks.end();
      signal.removeEventListener('abort', onAbort);
      closed(session);
    });
    return new Promise<Http2Answer>((resolve, reject) => {
      const early = (why: string) => (): void => reject(signal.aborted ? signal.reason : new Http2StreamError(`${why} before response headers (HTTP/2 ${rstName(stream)})`));
      const onClose = early('stream closed');
      stream.once('close', onClose);
      // `on`, not `once`: the body's reader sees later errors as a cut-off stream (body below).
      stream.on('error', (err) => reject(signal.aborted ? signal.reason : err));
      stream.once('response', (h: IncomingHttpHeaders) => {
        stream.off('close', onClose);
        health?.read();
        resolve({ status: Number(h[h2.HTTP2_HEADER_STATUS] ?? 0), chunks: body(stream, chunks, () => cleanEnd, signal) });
      });
    });
  }
}

/**
 * The DATA chunks of one stream, in order, from its creation until it ends, closes or fails: what
 * a flowing stream emits before its reader comes is kept, not lost.
 */
class ChunkQueue {
  private readonly chunks: Uint8Array[] = [];
  private done = false;
  private failure: { err: unknown } | undefined;
  private wake: (() => void) | undefined;

  push(chunk: Uint8Array): void {
    this.chunks.push(chunk);
    this.notify();
  }

  end(): void {
    this.done = true;
    this.notify();
  }

  fail(err: unknown): void {
    this.failure ??= { err };
    this.notify();
  }

  /** The next chunk; undefined at the end. @throws the stream's error, once the chunks before it were taken */
  async next(): Promise<Uint8Array | undefined> {
    for (;;) {
      const chunk = this.chunks.shift();
      if (chunk !== undefined) return chunk;
      if (this.failure) throw this.failure.err;
      if (this.done) return undefined;
      await new Promise<void>((resolve) => (this.wake = resolve));
    }
  }

  private notify(): void {
    const wake = this.wake;
    this.wake = undefined;
    wake?.();
  }
}

/** The body of `stream`, throwing at its end unless the server ended it (END_STREAM, no reset). */
async function* body(stream: ClientHttp2Stream, chunks: ChunkQueue, clean: () => boolean, signal: AbortSignal): AsyncGenerator<Uint8Array> {
  try {
    for (let chunk = await chunks.next(); chunk !== undefined; chunk = await chunks.next()) yield chunk;
  } catch (err) {
    throw signal.aborted ? signal.reason : err;
  }
  if (signal.aborted) throw signal.reason;
  if (!clean()) throw new Http2StreamError(`response body cut off (HTTP/2 ${rstName(stream)})`);
}

function rstName(stream: ClientHttp2Stream): string {
  return stream.rstCode === undefined ? 'no reset code' : `reset code ${stream.rstCode}`;
}

/** Open streams per session: the session holds the event loop only while one is open. */
const streamsOf = new WeakMap<ClientHttp2Session, number>();

function opened(session: ClientHttp2Session): void {
  const n = (streamsOf.get(session) ?? 0) + 1;
  streamsOf.set(session, n);
  if (n === 1) session.ref();
}

function closed(session: ClientHttp2Session): void {
  const n = Math.max(0, (streamsOf.get(session) ?? 1) - 1);
  streamsOf.set(session, n);
  if (n === 0 && !session.destroyed) session.unref();
}

/**
 * Go's HTTP/2 health check (golang.org/x/net/http2 `Transport.ReadIdleTimeout`/`PingTimeout`):
 * after `readIdleTimeoutMs` without reading from the session a PING is sent, and the session is
 * destroyed (with its streams) when the answer does not come within `pingTimeoutMs`. "Reading" is
 * seen here as response headers, body data and PING answers — what node:http2 lets a client
 * observe — so an idle healthy session is pinged once per `readIdleTimeoutMs`, as Go's is.
 */
class HealthCheck {
  private static readonly bySession = new WeakMap<ClientHttp2Session, HealthCheck>();
  private lastRead = Date.now();
  private idleTimer: NodeJS.Timeout | undefined;
  private pingTimer: NodeJS.Timeout | undefined;

  static of(session: ClientHttp2Session): HealthCheck | undefined {
    return HealthCheck.bySession.get(session);
  }

  constructor(
    private readonly session: ClientHttp2Session,
    private readonly health: Http2Health,
  ) {
    HealthCheck.bySession.set(session, this);
    session.once('close', () => {
      clearTimeout(this.idleTimer);
      clearTimeout(this.pingTimer);
    });
    this.schedule(health.readIdleTimeoutMs);
  }

  /** Something was read from the server. */
  read(): void {
    this.lastRead = Date.now();
  }

  /** PINGs now unless a PING is already out. */
  checkNow(): void {
    if (this.pingTimer === undefined && !this.session.destroyed) this.ping();
  }

  private schedule(ms: number): void {
    clearTimeout(this.idleTimer);
    this.idleTimer = setTimeout(() => this.onIdleTimer(), ms).unref();
  }

  private onIdleTimer(): void {
    if (this.session.destroyed) return;
    const idle = Date.now() - this.lastRead;
    if (idle < this.health.readIdleTimeoutMs) return this.schedule(this.health.readIdleTimeoutMs - idle);
    this.checkNow();
  }

  private ping(): void {
    const session = this.session;
    this.pingTimer = setTimeout(() => {
      session.destroy(new Http2StreamError(`no answer to an HTTP/2 PING within ${this.health.pingTimeoutMs} ms: connection dead`));
    }, this.health.pingTimeoutMs).unref();
    const sent = session.ping((err) => {
      clearTimeout(this.pingTimer);
      this.pingTimer = undefined;
      if (err) return;
      this.read();
      this.schedule(this.health.readIdleTimeoutMs);
    });
    if (!sent) {
      clearTimeout(this.pingTimer);
      this.pingTimer = undefined;
      this.schedule(this.health.readIdleTimeoutMs);
    }
  }
}
