/**
 * One unary gRPC call over a UNIX socket, HTTP/2 written by hand: the connection preface, one
 * HEADERS + DATA exchange on stream 1, HPACK-decoded response headers and trailers, and the
 * `grpc-status-details-bin` CNIError detail. Neither grpc-js (≈ 100 ms of module loading,
 * npm-ecosystem.md §5) nor `node:http2` (≈ 17 ms to import in the Bun executable) is loaded.
 *
 * @see https://www.rfc-editor.org/rfc/rfc9113 (HTTP/2), https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md
 * @see ../shared/reference/coil-behaviour.md §6 (error mapping)
 */
import { latin1Bytes } from './bytes.js';
import { decodeStatusCniError } from './cnirpc.js';
import { encodeHeaders, type HeaderField, HpackDecoder } from './hpack.js';
import { ErrorCode, PluginError } from './plugin-error.js';
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
  request: Buffer | (() => Buffer);
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

function frame(type: number, flags: number, streamId: number, payload: Buffer = Buffer.alloc(0)): Buffer {
  const header = Buffer.alloc(9);
  header.writeUIntBE(payload.length, 0, 3);
  header[3] = type;
  header[4] = flags;
  header.writeUInt32BE(streamId, 5);
  return Buffer.concat([header, payload]);
}

/** The bytes a client sends for one unary call: preface, SETTINGS, HEADERS, DATA frames. */
function requestBytes(o: UnaryCallOptions): Buffer {
  const request = typeof o.request === 'function' ? o.request() : o.request;
  const message = Buffer.alloc(5 + request.length); // byte 0 = 0: not compressed
  message.writeUInt32BE(request.length, 1);
  request.copy(message, 5);
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
  const settings = Buffer.alloc(6); // SETTINGS_ENABLE_PUSH (2) = 0
  settings[1] = 2;
  const frames = [PREFACE, frame(SETTINGS, 0, 0, settings), frame(HEADERS, END_HEADERS, STREAM, encodeHeaders(headers))];
  for (let off = 0; off < message.length; off += MAX_FRAME_BYTES) {
    const end = Math.min(message.length, off + MAX_FRAME_BYTES);
    frames.push(frame(DATA, end === message.length ? END_STREAM : 0, STREAM, message.subarray(off, end)));
  }
  return Buffer.concat(frames);
}

/**
 * Calls `method` once and returns the response message bytes.
 * @throws PluginError 11 (try again later) when coild is unreachable, closes the connection or
 *   refuses the stream, the call times out, or it fails with gRPC Unavailable and no detail;
 *   the detail's own code when the status carries a CNIError;
 *   999 (internal) for any other failure, with the gRPC message.
 */
export function unaryCall(o: UnaryCallOptions): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    let settled = false;
    let conn: UnixConnection | undefined;
    const finish = (err: PluginError | undefined, value?: Buffer): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      conn?.destroy();
      if (err) reject(err);
      else resolve(value ?? Buffer.alloc(0));
    };
    const fail = (code: number, msg: string, cause?: unknown): void => finish(new PluginError(code, msg, '', { cause }));
    const timer = setTimeout(() => fail(ErrorCode.TRY_AGAIN_LATER, `coild did not answer within ${o.timeoutMs} ms`), o.timeoutMs);

    const decoder = new HpackDecoder();
    const headerSets: Record<string, string>[] = [];
    const body: Buffer[] = [];
    let block: Buffer[] | undefined; // header block being assembled from CONTINUATION frames
    let blockEndsStream = false;
    let inbox: Buffer = Buffer.alloc(0);

    const complete = (): void => {
      try {
        finish(undefined, readResponse(headerSets[0] ?? {}, headerSets[1] ?? {}, Buffer.concat(body)));
      } catch (err) {
        finish(err instanceof PluginError ? err : new PluginError(ErrorCode.INTERNAL, String(err)));
      }
    };
    const endBlock = (): void => {
      const fields = decoder.decode(Buffer.concat(block ?? []));
      block = undefined;
      const set: Record<string, string> = {};
      for (const [name, value] of fields) set[name] ??= value;
      headerSets.push(set);
      if (blockEndsStream) complete();
    };
    const onFrame = (type: number, flags: number, streamId: number, payload: Buffer): void => {
      if (type === SETTINGS && !(flags & ACK)) conn?.write(frame(SETTINGS, ACK, 0));
      else if (type === PING && !(flags & ACK)) conn?.write(frame(PING, ACK, 0, payload));
      else if (type === GOAWAY && (payload.readUInt32BE(0) & 0x7fffffff) < STREAM) fail(ErrorCode.TRY_AGAIN_LATER, 'coild is shutting down (GOAWAY)');
      else if (type === RST_STREAM && streamId === STREAM) {
        const code = payload.readUInt32BE(0);
        fail(code === REFUSED_STREAM ? ErrorCode.TRY_AGAIN_LATER : ErrorCode.INTERNAL, `coild reset the stream (HTTP/2 error ${code})`);
      } else if (type === HEADERS && streamId === STREAM) {
        let p = flags & PADDED ? payload.subarray(1, payload.length - (payload[0] as number)) : payload;
        if (flags & PRIORITY) p = p.subarray(5);
        block = [p];
        blockEndsStream = (flags & END_STREAM) !== 0;
        if (flags & END_HEADERS) endBlock();
      } else if (type === CONTINUATION && block) {
        block.push(payload);
        if (flags & END_HEADERS) endBlock();
      } else if (type === DATA && streamId === STREAM) {
        body.push(flags & PADDED ? payload.subarray(1, payload.length - (payload[0] as number)) : payload);
        if (flags & END_STREAM) complete();
      }
    };
    const onData = (chunk: Buffer): void => {
      inbox = inbox.length === 0 ? chunk : Buffer.concat([inbox, chunk]);
      try {
        while (!settled && inbox.length >= 9) {
          const length = inbox.readUIntBE(0, 3);
          if (inbox.length < 9 + length) return;
          onFrame(inbox[3] as number, inbox[4] as number, inbox.readUInt32BE(5) & 0x7fffffff, inbox.subarray(9, 9 + length));
          inbox = inbox.subarray(9 + length);
        }
      } catch (err) {
        fail(ErrorCode.INTERNAL, `bad HTTP/2 response from coild: ${String(err)}`, err);
      }
    };

    // Connect first and encode while coild accepts: the two overlap (≈ 0.5 ms of a cold start).
    let request: Buffer | undefined;
    const connecting = connectUnix(o.socketPath, {
      onData,
      onClose: (err) => fail(ErrorCode.TRY_AGAIN_LATER, `coild closed the connection before answering${err ? `: ${err.message}` : ''}`, err),
    });
    try {
      request = requestBytes(o);
    } catch (err) {
      finish(err instanceof PluginError ? err : new PluginError(ErrorCode.INTERNAL, String(err)));
    }
    connecting.then(
      (c) => {
        conn = c;
        if (settled || request === undefined) c.destroy();
        else c.write(request);
      },
      (err: unknown) => {
        const msg = `cannot reach coild at ${o.socketPath}: ${err instanceof Error ? err.message : String(err)}`;
        fail(isUnreachable(err) ? ErrorCode.TRY_AGAIN_LATER : ErrorCode.INTERNAL, msg, err);
      },
    );
  });
}

/**
 * Interprets a finished response. A trailers-only response carries `grpc-status` in the
 * headers, so both places are read.
 * @throws PluginError as described on {@link unaryCall}.
 */
export function readResponse(headers: Record<string, unknown>, trailers: Record<string, unknown>, body: Buffer): Buffer {
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
    const cniError = detailsBin === undefined ? undefined : decodeStatusCniError(Buffer.from(detailsBin, 'base64'));
    if (cniError) throw new PluginError(cniError.code, cniError.msg, cniError.details);
    const code = Number(grpcStatus) === GRPC_UNAVAILABLE ? ErrorCode.TRY_AGAIN_LATER : ErrorCode.INTERNAL;
    throw new PluginError(code, message === '' ? `coild failed with gRPC status ${grpcStatus}` : message);
  }
  // Unary: exactly one length-prefixed message; compressed frames are never requested.
  if (body.length < 5) throw new PluginError(ErrorCode.INTERNAL, 'coild sent no response message');
  if (body[0] !== 0) throw new PluginError(ErrorCode.INTERNAL, 'coild sent a compressed message');
  const length = body.readUInt32BE(1);
  if (body.length < 5 + length) throw new PluginError(ErrorCode.INTERNAL, 'coild sent a truncated message');
  return body.subarray(5, 5 + length);
}

/**
 * Whether a connection error means coild is not listening. The stream's error
 * (ERR_HTTP2_STREAM_CANCEL) often arrives first and holds the socket error as its cause.
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
