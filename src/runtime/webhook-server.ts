import { watchFile, unwatchFile, readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from './logging.js';
import { deny, type AdmissionRequest, type AdmissionResponse, type AdmissionReview } from './admission.js';
import type { Metrics } from './metrics.js';

/** Answers one admission request. */
export type AdmissionHandler = (req: AdmissionRequest) => Promise<AdmissionResponse>;

/** Options of the {@link WebhookServer}. */
export interface WebhookServerOptions {
  /** Default 9443 (controller-runtime, Coil); 0 picks a free port. */
  readonly port?: number;
  /** Default `0.0.0.0`. */
  readonly host?: string;
  /** PEM files (cert-manager / Secret mount: `tls.crt`, `tls.key`); reloaded when they change. */
  readonly certFile: string;
  readonly keyFile: string;
  /** How often the files are checked for changes. Default 10 000 ms (a mounted Secret updates within ~1 min anyway). */
  readonly certPollMs?: number;
  /**
   * Returns undefined when requests may be served, else the reason they may not (e.g. the cache
   * is not synced): such requests are denied with 503, never allowed by default.
   */
  readonly notReadyReason?: () => string | undefined;
}

/**
 * The HTTPS admission webhook server: `AdmissionReview` v1 in, `AdmissionReview` v1 out, one
 * handler per path. Certificates are re-read when their files change and swapped in with
 * `setSecureContext`, so rotation (cert-manager, Coil's rotator) needs no restart; a broken new
 * pair is logged and counted and the old one stays in use.
 *
 * Serves on every replica (not only the leader), like controller-runtime.
 * @see controller-runtime `pkg/webhook/server.go`, `pkg/certwatcher`
 */
export class WebhookServer {
  private readonly handlers = new Map<string, AdmissionHandler>();
  private server: Server | undefined;
  private reload: (() => void) | undefined;

  constructor(
    private readonly options: WebhookServerOptions,
    private readonly metrics: Metrics,
    private readonly log: Logger,
  ) {}

  /** Serves `handler` at `path` (e.g. `/validate-coil-cybozu-com-v2-addresspool`). @throws Error on a duplicate path */
  register(path: string, handler: AdmissionHandler): void {
    if (this.handlers.has(path)) throw new Error(`webhook path ${path} registered twice`);
    this.handlers.set(path, handler);
  }

  /** Reads the certificates and listens. @throws Error when the certificate files cannot be read or the port is taken */
  async start(): Promise<void> {
    const creds = this.readCerts();
    if (!creds) throw new Error(`cannot read webhook certificate ${this.options.certFile} / ${this.options.keyFile}`);
    const server = createServer({ ...creds, minVersion: 'TLSv1.2' }, (req, res) => void this.serve(req, res));
    this.server = server;
    const reload = (this.reload = (): void => {
      const next = this.readCerts();
      if (next) {
        server.setSecureContext({ ...next, minVersion: 'TLSv1.2' });
        this.log.info({ certFile: this.options.certFile }, 'webhook certificate reloaded');
      }
    });
    const interval = this.options.certPollMs ?? 10_000;
    watchFile(this.options.certFile, { interval, persistent: false }, reload);
    watchFile(this.options.keyFile, { interval, persistent: false }, reload);
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.options.port ?? 9443, this.options.host ?? '0.0.0.0', () => resolve());
    });
  }

  /** The bound port (after {@link start}). */
  port(): number {
    return (this.server?.address() as AddressInfo | null)?.port ?? 0;
  }

  /** Stops listening and closes idle connections. */
  async stop(): Promise<void> {
    if (this.reload) {
      unwatchFile(this.options.certFile, this.reload);
      unwatchFile(this.options.keyFile, this.reload);
    }
    const server = this.server;
    if (!server) return;
    await new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeIdleConnections();
    });
  }

  private readCerts(): { cert: string; key: string } | undefined {
    try {
      const cert = readFileSync(this.options.certFile, 'utf8');
      const key = readFileSync(this.options.keyFile, 'utf8');
      this.metrics.certReads.inc();
      return { cert, key };
    } catch (err) {
      this.metrics.certReadErrors.inc();
      this.log.error({ err }, 'cannot read webhook certificate');
      return undefined;
    }
  }

  private async serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = new URL(req.url ?? '/', 'https://localhost').pathname;
    const handler = this.handlers.get(path);
    if (!handler || req.method !== 'POST') {
      res.writeHead(404).end();
      return;
    }
    const labels = { webhook: path };
    const endTimer = this.metrics.webhookLatency.startTimer(labels);
    this.metrics.webhookInFlight.inc(labels);
    let code = 200;
    try {
      const body = await readBody(req);
      let review: AdmissionReview;
      try {
        review = JSON.parse(body) as AdmissionReview;
      } catch {
        review = { apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview' };
      }
      const request = review.request;
      if (!request?.uid) {
        code = 400;
        res.writeHead(400, { 'content-type': 'text/plain' }).end('expected an admission.k8s.io/v1 AdmissionReview with a request');
        return;
      }
      const notReady = this.options.notReadyReason?.();
      const response = notReady ? deny(request.uid, 503, `${notReady}; retry later`, 'ServiceUnavailable') : await handler(request);
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', response }));
      this.log.debug({ path, uid: request.uid, operation: request.operation, allowed: response.allowed }, 'admission review');
    } catch (err) {
      code = 500;
      this.log.error({ err, path }, 'webhook request failed');
      if (!res.headersSent) res.writeHead(500).end();
    } finally {
      this.metrics.webhookInFlight.dec(labels);
      this.metrics.webhookRequests.inc({ ...labels, code: String(code) });
      endTimer();
    }
  }
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}
