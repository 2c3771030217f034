/**
 * One unary gRPC call over a UNIX socket, HTTP/2 written by hand: the connection preface, one
 * HEADERS + DATA exchange on stream 1, HPACK-decoded response headers and trailers, and the
 * `grpc-status-details-bin` CNIError detail. Neither grpc-js nor `node:http2` is loaded: each
 * would cost every pod's ADD more than the whole call (docs/performance.md#process-start-costs,
 * docs/performance.md#the-cni-executables-start).
 *
 * @see https://www.rfc-editor.org/rfc/rfc9113 (HTTP/2), https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md
 * @see docs/compatibility.md#the-cni-executable (error mapping)
 */
import { concatBytes, latin1Bytes, uint32BE } from './bytes.js';
import { decodeStatusCniError } from './cnirpc.js';
import { encodeHeaders, type HeaderField, HpackDecoder } from './hpack.js';
import { ErrorCode, PluginError } from './plugin-error.js';
import type { Libc } from './libc.js';
import { connectUnix, type UnixConnection } from './unix-socket.js';

/** What one call needs. */
export interface UnaryCallOptions {
  /** coild's socket, e.g. `/run/coild.sock`. */
  socketPath: string;
  /** Method path, e.g. `/pkg.cnirpc.CNI/Add`. */
  method: string;
  /**
   * The encoded request message, or a function producing it: a function is called after the
   * connection attempt has started, so encoding overlaps with coild accepting the connection.
   */
  request: Uint8Array | (() => Uint8Array);
  /** Deadline of the whole call, sent to the server as `grpc-timeout` too. */
  timeoutMs: number;
}

/** gRPC status codes the shim treats specially. */
const GRPC_OK = 0;
const GRPC_UNAVAILABLE = 14;

/**
 * Socket errors meaning "coild is not there (yet)" or cannot take the call now (EAGAIN: its
 * listen backlog is full): worth a retry by the runtime.
 */
const UNREACHABLE = new Set(['ENOENT', 'ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'EAGAIN']);

const PREFACE = latin1Bytes('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');
const DATA = 0x0;
const HEADERS = 0x1;
const RST_STREAM = 0x3;
const SETTINGS = 0x4;
const PING = 0x6;
const GOAWAY = 0x7;
const CONTINUATION = 0x9;
const END_STREAM = 0x1;
const ACK = 0x1;
const END_HEADERS = 0x4;
const PADDED = 0x8;
const PRIORITY = 0x20;
const REFUSED_STREAM = 0x7;
/** The smallest SETTINGS_MAX_FRAME_SIZE a peer may announce: always safe to send. */
const MAX_FRAME_BYTES = 16_384;
/** The default initial flow-control window: a larger request would have to wait for WINDOW_UPDATE. */
const MAX_REQUEST_BYTES = 65_535;
const STREAM = 1;

function frame(type: number, flags: number, streamId: number, payload: Uint8Array = new Uint8Array(0)): Uint8Array {
  const f = new Uint8Array(9 + payload.length);
  f[0] = payload.length >>> 16;
  f[1] = payload.length >>> 8;
  f[2] = payload.length;
  f[3] = type;
  f[4] = flags;
  f[5] = streamId >>> 24;
  f[6] = streamId >>> 16;
  f[7] = streamId >>> 8;
  f[8] = streamId;
  f.set(payload, 9);
  return f;
}

/** The bytes a client sends for one unary call: preface, SETTINGS, HEADERS, DATA frames. */
function requestBytes(o: UnaryCallOptions): Uint8Array {
  const request = typeof o.request === 'function' ? o.request() : o.request;
  const message = new Uint8Array(5 + request.length); // byte 0 = 0: not compressed
  message[1] = request.length >>> 24;
  message[2] = request.length >>> 16;
  message[3] = request.length >>> 8;
  message[4] = request.length;
  message.set(request, 5);
  if (message.length > MAX_REQUEST_BYTES) {
    throw new PluginError(ErrorCode.INVALID_NETWORK_CONFIG, `request of ${message.length} bytes exceeds ${MAX_REQUEST_BYTES}; is the netconf that large?`);
  }
  const headers: HeaderField[] = [
    [':method', 'POST'],
    [':scheme', 'http'],
    [':path', o.method],
    [':authority', 'localhost'],
    ['content-type', 'application/grpc'],
    ['te', 'trailers'],
    ['grpc-timeout', `${Math.max(1, Math.ceil(o.timeoutMs))}m`],
  ];
  // SETTINGS_HEADER_TABLE_SIZE (1) = 0: coild's encoder indexes nothing, so the decoder never
  // needs the size of a field it skips (hpack.ts); SETTINGS_ENABLE_PUSH (2) = 0.
  const settings = new Uint8Array(12);
  settings[1] = 1;
  settings[7] = 2;
  const frames = [PREFACE, frame(SETTINGS, 0, 0, settings), frame(HEADERS, END_HEADERS, STREAM, encodeHeaders(headers))];
  for (let off = 0; off < message.length; off += MAX_FRAME_BYTES) {
    const end = Math.min(message.length, off + MAX_FRAME_BYTES);
    frames.push(frame(DATA, end === message.length ? END_STREAM : 0, STREAM, message.subarray(off, end)));
  }
  return concatBytes(frames);
}

/** The response headers and trailers {@link readResponse} reads; the rest are not decoded. */
function isResponseField(name: string): boolean {
  return name === 'grpc-status' || name === 'grpc-message' || name === 'grpc-status-details-bin' || name === ':status';
}

/**
 * The client side of one call's HTTP/2 exchange, whatever drives the socket: bytes in through
 * {@link CallExchange.onData}, the outcome in `result` or `error` once `settled`. Control frames
 * that need an answer (SETTINGS, PING) are answered through `send`.
 */
class CallExchange {
  settled = false;
  result: Uint8Array | undefined;
  error: PluginError | undefined;
  private readonly decoder = new HpackDecoder();
  private readonly headerSets: Record<string, string>[] = [];
  private readonly body: Uint8Array[] = [];
  private block: Uint8Array[] | undefined; // header block being assembled from CONTINUATION frames
  private blockEndsStream = false;
  private inbox: Uint8Array = new Uint8Array(0);

  /**
   * @param send writes bytes to coild.
   * @param onSettled called once, when the outcome is known.
   */
  constructor(
    private readonly send: (bytes: Uint8Array) => void,
    private readonly onSettled: () => void,
  ) {}

  fail(code: number, msg: string, cause?: unknown): void {
    this.settle(new PluginError(code, msg, '', { cause }));
  }

  settle(err: PluginError | undefined, value?: Uint8Array): void {
    if (this.settled) return;
    this.settled = true;
    this.error = err;
    this.result = value;
    this.onSettled();
  }

  onData(chunk: Uint8Array): void {
    this.inbox = this.inbox.length === 0 ? chunk : concatBytes([this.inbox, chunk]);
    try {
      while (!this.settled && this.inbox.length >= 9) {
        const inbox = this.inbox;
        const length = ((inbox[0] as number) << 16) | ((inbox[1] as number) << 8) | (inbox[2] as number);
        if (inbox.length < 9 + length) return;
        this.inbox = inbox.subarray(9 + length);
        this.onFrame(inbox[3] as number, inbox[4] as number, uint32BE(inbox, 5) & 0x7fffffff, inbox.subarray(9, 9 + length));
      }
    } catch (err) {
      this.fail(ErrorCode.INTERNAL, `bad HTTP/2 response from coild: ${String(err)}`, err);
    }
  }

  private onFrame(type: number, flags: number, streamId: number, payload: Uint8Array): void {
    if (type === SETTINGS && !(flags & ACK)) this.send(frame(SETTINGS, ACK, 0));
    else if (type === PING && !(flags & ACK)) this.send(frame(PING, ACK, 0, payload));
    else if (type === GOAWAY && (uint32BE(payload, 0) & 0x7fffffff) < STREAM) this.fail(ErrorCode.TRY_AGAIN_LATER, 'coild is shutting down (GOAWAY)');
    else if (type === RST_STREAM && streamId === STREAM) {
      const code = uint32BE(payload, 0);
      this.fail(code === REFUSED_STREAM ? ErrorCode.TRY_AGAIN_LATER : ErrorCode.INTERNAL, `coild reset the stream (HTTP/2 error ${code})`);
    } else if (type === HEADERS && streamId === STREAM) {
      let p = flags & PADDED ? payload.subarray(1, payload.length - (payload[0] as number)) : payload;
      if (flags & PRIORITY) p = p.subarray(5);
      this.block = [p];
      this.blockEndsStream = (flags & END_STREAM) !== 0;
      if (flags & END_HEADERS) this.endBlock();
    } else if (type === CONTINUATION && this.block) {
      this.block.push(payload);
      if (flags & END_HEADERS) this.endBlock();
    } else if (type === DATA && streamId === STREAM) {
      this.body.push(flags & PADDED ? payload.subarray(1, payload.length - (payload[0] as number)) : payload);
      if (flags & END_STREAM) this.complete();
    }
  }

  private endBlock(): void {
    const block = this.block ?? [];
    const fields = this.decoder.decode(block.length === 1 ? (block[0] as Uint8Array) : concatBytes(block), isResponseField);
    this.block = undefined;
    const set: Record<string, string> = {};
    for (const [name, value] of fields) set[name] ??= value;
    this.headerSets.push(set);
    if (this.blockEndsStream) this.complete();
  }

  private complete(): void {
    try {
      const body = this.body.length === 1 ? (this.body[0] as Uint8Array) : concatBytes(this.body);
      this.settle(undefined, readResponse(this.headerSets[0] ?? {}, this.headerSets[1] ?? {}, body));
    } catch (err) {
      this.settle(err instanceof PluginError ? err : new PluginError(ErrorCode.INTERNAL, String(err)));
    }
  }
}

/** The request bytes, or the PluginError that encoding them raised. */
function encodeRequest(o: UnaryCallOptions): Uint8Array | PluginError {
  try {
    return requestBytes(o);
  } catch (err) {
    return err instanceof PluginError ? err : new PluginError(ErrorCode.INTERNAL, String(err));
  }
}

function unreachableError(socketPath: string, err: unknown): PluginError {
  const msg = `cannot reach coild at ${socketPath}: ${err instanceof Error ? err.message : String(err)}`;
  return new PluginError(isUnreachable(err) ? ErrorCode.TRY_AGAIN_LATER : ErrorCode.INTERNAL, msg, '', { cause: err });
}

function closedError(err?: Error): PluginError {
  return new PluginError(ErrorCode.TRY_AGAIN_LATER, `coild closed the connection before answering${err ? `: ${err.message}` : ''}`, '', { cause: err });
}

function timeoutError(timeoutMs: number): PluginError {
  return new PluginError(ErrorCode.TRY_AGAIN_LATER, `coild did not answer within ${timeoutMs} ms`);
}

/**
 * Calls `method` once and returns the response message bytes, driving the socket through the
 * runtime's event loop (Bun's or Node's sockets).
 * @throws PluginError 11 (try again later) when coild is unreachable, closes the connection or
 *   refuses the stream, the call times out, or it fails with gRPC Unavailable and no detail;
 *   the detail's own code when the status carries a CNIError;
 *   999 (internal) for any other failure, with the gRPC message.
 */
export function unaryCall(o: UnaryCallOptions): Promise<Uint8Array> {
  return new Promise((resolve, reject) => {
    let conn: UnixConnection | undefined;
    const exchange: CallExchange = new CallExchange(
      (bytes) => conn?.write(bytes),
      () => {
        clearTimeout(timer);
        conn?.destroy();
        if (exchange.error) reject(exchange.error);
        else resolve(exchange.result ?? new Uint8Array(0));
      },
    );
    const timer = setTimeout(() => exchange.settle(timeoutError(o.timeoutMs)), o.timeoutMs);

    // Connect first and encode while coild accepts: the two overlap (≈ 0.5 ms of a cold start).
    const connecting = connectUnix(o.socketPath, {
      onData: (chunk) => exchange.onData(chunk),
      onClose: (err) => exchange.settle(closedError(err)),
    });
    const request = encodeRequest(o);
    if (request instanceof PluginError) exchange.settle(request);
    connecting.then(
      (c) => {
        conn = c;
        if (exchange.settled || request instanceof PluginError) c.destroy();
        else c.write(request);
      },
      (err: unknown) => exchange.settle(unreachableError(o.socketPath, err)),
    );
  });
}

/**
 * {@link unaryCall} with blocking libc calls and no event loop: connect, write, then poll(2)
 * and read(2) until the trailers arrive or the deadline passes. The Bun executable's path: it
 * starts no promise, timer or immediate, each of which costs a cold one-shot process tens of µs
 * (docs/performance.md#the-cni-executables-start).
 * @throws PluginError as {@link unaryCall} does.
 */
export function unaryCallSync(c: Libc, o: UnaryCallOptions): Uint8Array {
  const deadline = Date.now() + o.timeoutMs; // not performance.now(): see base64Bytes on globals
  let fd: number;
  try {
    fd = c.connectUnix(o.socketPath);
  } catch (err) {
    throw unreachableError(o.socketPath, err);
  }
  try {
    let broken: Error | undefined;
    const send = (bytes: Uint8Array): void => {
      if (broken) return;
      try {
        c.writeAll(fd, bytes);
      } catch (err) {
        broken = err as Error;
      }
    };
    const exchange = new CallExchange(send, () => undefined);
    // Connect first and encode while coild accepts: the two overlap (≈ 0.5 ms of a cold start).
    const request = encodeRequest(o);
    if (request instanceof PluginError) throw request;
    send(request);
    while (!exchange.settled) {
      if (broken) throw closedError(broken);
      const left = deadline - Date.now();
      if (left <= 0) throw timeoutError(o.timeoutMs);
      let chunk: Uint8Array | undefined;
      try {
        chunk = c.readSome(fd, Math.ceil(left));
      } catch (err) {
        throw closedError(err as Error);
      }
      if (chunk === undefined) continue;
      if (chunk.length === 0) throw closedError();
      exchange.onData(chunk);
    }
    if (exchange.error) throw exchange.error;
    return exchange.result ?? new Uint8Array(0);
  } finally {
    c.close(fd);
  }
}

/**
 * Interprets a finished response. A trailers-only response carries `grpc-status` in the
 * headers, so both places are read.
 * @throws PluginError as described on {@link unaryCall}.
 */
export function readResponse(headers: Record<string, unknown>, trailers: Record<string, unknown>, body: Uint8Array): Uint8Array {
  const field = (name: string): string | undefined => {
    const v = trailers[name] ?? headers[name];
    return Array.isArray(v) ? String(v[0]) : v === undefined ? undefined : String(v);
  };
  const httpStatus = Number(headers[':status'] ?? 0);
  const grpcStatus = field('grpc-status');
  if (grpcStatus === undefined) {
    throw new PluginError(ErrorCode.INTERNAL, `coild answered HTTP ${httpStatus} without a gRPC status`);
  }
  if (Number(grpcStatus) !== GRPC_OK) {
    const message = decodeGrpcMessage(field('grpc-message') ?? '');
    const detailsBin = field('grpc-status-details-bin');
    const cniError = detailsBin === undefined ? undefined : decodeStatusCniError(base64Bytes(detailsBin));
    if (cniError) throw new PluginError(cniError.code, cniError.msg, cniError.details);
    const code = Number(grpcStatus) === GRPC_UNAVAILABLE ? ErrorCode.TRY_AGAIN_LATER : ErrorCode.INTERNAL;
    throw new PluginError(code, message === '' ? `coild failed with gRPC status ${grpcStatus}` : message);
  }
  // Unary: exactly one length-prefixed message; compressed frames are never requested.
  if (body.length < 5) throw new PluginError(ErrorCode.INTERNAL, 'coild sent no response message');
  if (body[0] !== 0) throw new PluginError(ErrorCode.INTERNAL, 'coild sent a compressed message');
  const length = uint32BE(body, 1);
  if (body.length < 5 + length) throw new PluginError(ErrorCode.INTERNAL, 'coild sent a truncated message');
  return body.subarray(5, 5 + length);
}

/**
 * The bytes of a `-bin` header value: base64, padded or not (PROTOCOL-HTTP2.md). Not
 * `Buffer.from(…, 'base64')`: a function that merely names `Buffer` makes the one-shot executable
 * set `Buffer` up the first time it runs (docs/performance.md#the-cni-executables-start).
 * @throws Error (from atob) for characters outside the base64 alphabet.
 */
function base64Bytes(text: string): Uint8Array {
  const binary = atob(text);
  const out = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) out[i] = binary.charCodeAt(i);
  return out;
}

/**
 * Whether a connection error means coild is not listening (or cannot take the call now): the
 * system error's `code` — of a `SyscallError` (libc.ts) or of Bun's or Node's socket error —
 * looked for on the error itself and along its `cause` chain, so a wrapped error reads the same.
 */
function isUnreachable(err: unknown): boolean {
  for (let e = err, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    if (UNREACHABLE.has((e as NodeJS.ErrnoException).code ?? '')) return true;
  }
  return false;
}

/** `grpc-message` is percent-encoded (PROTOCOL-HTTP2.md); a bad escape is shown as sent. */
function decodeGrpcMessage(raw: string): string {
  try {
    return decodeURIComponent(raw);
  } catch {
    return raw;
  }
}
