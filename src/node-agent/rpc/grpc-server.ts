/**
 * coild's gRPC server shell: `pkg.cnirpc.CNI` (Add, Del, Check, plus CNI 1.1 GC and Status) and
 * `grpc.health.v1.Health` on a UNIX socket, with the call log and go-grpc-prometheus metrics.
 * The CNI work itself is a {@link CniHandler} passed in; this file only decodes, dispatches and
 * maps errors (`toCniError`).
 *
 * @see docs/compatibility.md#the-cni-grpc-api (API, socket),
 *   docs/compatibility.md#coild-logging-and-grpc-metrics (logging, metrics)
 * @see docs/design.md#cni-over-grpc
 */
import { chmod, lstat, mkdtemp, rename, rmdir, unlink } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import type Logger from 'bunyan';
import type { Registry } from 'prom-client';
import { DEFAULT_SOCKET_PATH } from '../../api/v2/keys.js';
import type { CniArgs, CniHandler } from './cni-handler.js';
import { toCniError } from './cni-error.js';
import { loggingInterceptor } from './grpc-server-logging.js';
import { GrpcServerMetrics, methodLabels } from './grpc-server-metrics.js';

/** Options of {@link CniGrpcServer}. */
export interface CniGrpcServerOptions {
  /** The CNI logic (coild's CNI service). */
  handler: CniHandler;
  /** Root logger; calls are logged through a `logger: 'grpc'` child. */
  logger: Logger;
  /** The program's metrics registry; the five `grpc_server_*` metrics are registered on it. */
  registry: Registry;
  /** Socket path (coild `--socket`). Default `/run/coild.sock`. */
  socketPath?: string;
  /** File mode of the socket. Default 0o600: only root may ask for pod networks. */
  socketMode?: number;
  /** Folder holding cnirpc.proto and health.proto. Default: the repository's `proto/`. */
  protoDir?: string;
  /** How long `stop()` lets calls in flight finish before cutting them. Default 10 000 ms. */
  shutdownTimeoutMs?: number;
}

/** `CNIArgs` as proto-loader decodes it with keepCase/defaults (field names of the .proto). */
interface WireCniArgs {
  container_id: string;
  netns: string;
  ifname: string;
  args: Record<string, string>;
  path: string;
  stdin_data: Buffer;
  ips: string[];
  interfaces: Record<string, boolean>;
  valid_attachments: { container_id: string; ifname: string }[];
}

const LOADER_OPTIONS: protoLoader.Options = { keepCase: true, longs: String, enums: Number, defaults: true, arrays: true, objects: true };
const CNI_SERVICE = 'pkg.cnirpc.CNI';
const HEALTH_SERVICE = 'grpc.health.v1.Health';
const SERVING = 1;
const NOT_SERVING = 2;

/** Converts the wire message to the handler's camelCase shape. */
export function decodeCniArgs(w: WireCniArgs): CniArgs {
  return {
    containerId: w.container_id,
    netns: w.netns,
    ifname: w.ifname,
    args: { ...w.args },
    path: w.path,
    stdinData: w.stdin_data,
    ips: [...w.ips],
    interfaces: { ...w.interfaces },
    validAttachments: w.valid_attachments.map((a) => ({ containerId: a.container_id, ifname: a.ifname })),
  };
}

/**
 * The gRPC server of coild. Calls run concurrently; the handler owns any locking. Health
 * reports SERVING between `start()` and `stop()`.
 */
export class CniGrpcServer {
  /** Socket path in use. */
  readonly socketPath: string;
  private readonly opts: CniGrpcServerOptions;
  private readonly metrics: GrpcServerMetrics;
  private server: grpc.Server | undefined;
  private servingStatus = NOT_SERVING;
  /** Inode of the socket we created, so stop() never removes a successor's socket. */
  private socketIno: number | bigint | undefined;

  /** @throws Error from prom-client when `registry` already holds the grpc_server_* metrics. */
  constructor(options: CniGrpcServerOptions) {
    this.opts = options;
    this.socketPath = options.socketPath ?? DEFAULT_SOCKET_PATH;
    this.metrics = new GrpcServerMetrics(options.registry);
  }

  /**
   * Binds (replacing a stale socket), sets the socket mode, and starts serving.
   * @throws Error when `socketPath` exists and is not a socket (never delete a file we don't own),
   *   or when binding or chmod fails (directory missing, permission); nothing is left listening.
   */
  async start(): Promise<void> {
    if (this.server) throw new Error('CniGrpcServer already started');
    const protoDir = this.opts.protoDir ?? fileURLToPath(new URL('../../../../proto/', import.meta.url));
    const definition = protoLoader.loadSync(['cnirpc.proto', 'health.proto'], { ...LOADER_OPTIONS, includeDirs: [protoDir] });
    const cniService = definition[CNI_SERVICE] as grpc.ServiceDefinition;
    const healthService = definition[HEALTH_SERVICE] as grpc.ServiceDefinition;
    this.metrics.initialize(
      [...Object.values(cniService), ...Object.values(healthService)].map((m) => methodLabels(m.path, m.requestStream, m.responseStream)),
    );

    // No channelz: nothing serves it here, and its per-call and per-socket bookkeeping sits on every
    // ADD's path (the call log and the metrics above tell what it would).
    const server = new grpc.Server({ 'grpc.enable_channelz': 0, interceptors: [loggingInterceptor(this.opts.logger), this.metrics.interceptor()] });
    const h = this.opts.handler;
    // Del, Check, GC and Status answer google.protobuf.Empty.
    const toEmpty = (fn: (a: CniArgs) => Promise<void>) =>
      unary(async (a) => {
        await fn(a);
        return {};
      });
    server.addService(cniService, {
      Add: unary(async (a) => ({ result: Buffer.from(JSON.stringify(await h.add(a))) })),
      Del: toEmpty((a) => h.del(a)),
      Check: toEmpty((a) => h.check(a)),
      GC: toEmpty((a) => h.gc(a)),
      Status: toEmpty((a) => h.status(a)),
    });
    server.addService(healthService, {
      Check: (call: grpc.ServerUnaryCall<{ service: string }, unknown>, callback: grpc.sendUnaryData<unknown>) => {
        const service = call.request.service;
        if (service !== '' && service !== CNI_SERVICE) {
          callback({ code: grpc.status.NOT_FOUND, details: `unknown service ${service}` });
          return;
        }
        callback(null, { status: this.servingStatus });
      },
    });

    await checkReplaceable(this.socketPath);
    // Bind inside a fresh 0700 directory, set the mode, then rename into place: the socket is
    // never reachable with the umask's mode, and rename() replaces a stale socket atomically.
    const privateDir = await mkdtemp(join(dirname(this.socketPath), `.${basename(this.socketPath)}-`));
    const bindPath = join(privateDir, 's');
    try {
      await new Promise<void>((resolve, reject) =>
        server.bindAsync(`unix:${bindPath}`, grpc.ServerCredentials.createInsecure(), (err) => (err ? reject(err) : resolve())),
      );
      await chmod(bindPath, this.opts.socketMode ?? 0o600);
      await rename(bindPath, this.socketPath);
      this.socketIno = (await lstat(this.socketPath)).ino;
    } catch (err) {
      server.forceShutdown();
      throw err;
    } finally {
      await unlink(bindPath).catch(() => undefined);
      await rmdir(privateDir).catch(() => undefined);
    }
    this.server = server;
    this.servingStatus = SERVING;
  }

  /**
   * Reports NOT_SERVING, drains calls for up to `shutdownTimeoutMs`, then removes the socket
   * unless another coild has replaced it meanwhile.
   */
  async stop(): Promise<void> {
    const server = this.server;
    if (!server) return;
    this.server = undefined;
    this.servingStatus = NOT_SERVING;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        server.forceShutdown();
        resolve();
      }, this.opts.shutdownTimeoutMs ?? 10_000);
      server.tryShutdown(() => {
        clearTimeout(timer);
        resolve();
      });
    });
    const st = await lstat(this.socketPath).catch(() => undefined);
    if (st && st.ino === this.socketIno) await unlink(this.socketPath).catch(() => undefined);
  }
}

/** Adapts a handler method to a grpc-js unary implementation, mapping errors with toCniError. */
function unary(fn: (args: CniArgs) => Promise<object>): grpc.handleUnaryCall<WireCniArgs, object> {
  return (call, callback) => {
    let args: CniArgs;
    try {
      args = decodeCniArgs(call.request);
    } catch (err) {
      callback(toCniError(err));
      return;
    }
    fn(args).then(
      (response) => callback(null, response),
      (err: unknown) => callback(toCniError(err)),
    );
  };
}

/**
 * A socket left by a previous coild may be replaced; anything else at the path is refused, so a
 * typo in `--socket` never deletes a file we do not own.
 */
async function checkReplaceable(path: string): Promise<void> {
  const st = await lstat(path).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return undefined;
    throw err;
  });
  if (st && !st.isSocket()) throw new Error(`${path} exists and is not a socket; refusing to replace it`);
}
