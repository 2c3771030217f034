/**
 * One HTTP(S) port of a coil program: the kubelet's probes (`/healthz`, `/readyz`) answered to
 * anyone, every other path only to a caller the {@link RequestAuthorizer} lets through
 * (docs/observability.md#access). With {@link EndpointSecurity} `plain`, Coil's unauthenticated
 * HTTP for clusters moving from Coil (`--secure-endpoints=false`).
 *
 * Secure, a port serving more than the probes is HTTPS (a self-signed certificate, see
 * self-signed-cert.ts) and answers, for any other path:
 * - no bearer token: 401, no API request;
 * - a token the TokenReview refuses: 401; a path served here that the SubjectAccessReview does not
 *   allow (`<verb>` on the non-resource path, `get` for GET and HEAD): 403;
 * - a path not served here: 404, once the token is accepted (no access review);
 * - reviews rate-limited: 429; the API server failing: 503.
 * A port serving only the probes stays plain HTTP (the kubelet probes it so) and answers 401 to
 * everything else without reading any credential.
 */
import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import type { RequestAuthorizer } from './http-auth.js';
import type { SelfSignedCert } from './self-signed-cert.js';

/** Where an endpoint listens; port 0 picks a free port. */
export interface BindAddress {
  readonly host?: string;
  readonly port: number;
}

/** Serves one request of a path. */
export type Handler = (req: IncomingMessage, res: ServerResponse) => void;

/** A path served behind authentication, with the methods it answers. */
export interface Route {
  /** Upper-case methods; default GET and HEAD. */
  readonly methods?: readonly string[];
  readonly handle: Handler;
}

/** Plain HTTP for everyone (Coil's), or authenticated HTTPS. */
export type EndpointSecurity =
  | { readonly mode: 'plain' }
  | { readonly mode: 'secure'; readonly authorizer: RequestAuthorizer; readonly tls: SelfSignedCert };

/** What one port serves. */
export interface EndpointRoutes {
  /** `/healthz`, `/readyz`: answered without authentication. */
  readonly probes: Readonly<Record<string, Handler>>;
  /** Everything else, by path. */
  readonly routes: Readonly<Record<string, Route>>;
}

/** The RBAC verb of an HTTP method on a non-resource path (the API server's own mapping). */
export function verbOf(method: string | undefined): string {
  const m = (method ?? 'GET').toUpperCase();
  return m === 'GET' || m === 'HEAD' ? 'get' : m === 'POST' ? 'create' : m === 'PUT' ? 'update' : m.toLowerCase();
}

const text = (res: ServerResponse, status: number, body: string): void => void res.writeHead(status, { 'content-type': 'text/plain; charset=utf-8' }).end(`${body}\n`);

/** Listens on `addr`. @returns the server (bound) @throws Error when the port is taken */
export async function listenEndpoints(addr: BindAddress, served: EndpointRoutes, security: EndpointSecurity): Promise<Server> {
  const secure = security.mode === 'secure';
  const probesOnly = Object.keys(served.routes).length === 0;
  const handler = (req: IncomingMessage, res: ServerResponse): void => {
    const path = new URL(req.url ?? '/', 'http://localhost').pathname;
    const probe = served.probes[path];
    if (probe) return probe(req, res);
    const route = served.routes[path];
    const methodOk = route !== undefined && (route.methods ?? ['GET', 'HEAD']).includes(req.method ?? 'GET');
    if (!secure) return methodOk ? route.handle(req, res) : void res.writeHead(404).end();
    if (probesOnly) return text(res, 401, 'Unauthorized: this port serves only the probes /healthz and /readyz');
    void security.authorizer.decide(req, methodOk ? { path, verb: verbOf(req.method) } : undefined).then((d) => {
      if (!d.allowed) return text(res, d.status, d.reason);
      if (!methodOk) return void res.writeHead(404).end();
      route.handle(req, res);
    });
  };
  const server = secure && !probesOnly ? createHttpsServer({ cert: security.tls.certPem, key: security.tls.keyPem, minVersion: 'TLSv1.2' }, handler) : createHttpServer(handler);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(addr.port, addr.host ?? '0.0.0.0', () => resolve());
  });
  return server;
}

/** The bound port of a listening server. */
export function boundPort(server: Server): number {
  return (server.address() as AddressInfo).port;
}

/** Closes a server and its open connections. */
export function closeServer(server: Server): Promise<void> {
  return new Promise<void>((resolve) => {
    server.close(() => resolve());
    server.closeAllConnections();
  });
}

/**
 * The security of a program's endpoints from its `--secure-endpoints` flag: secure, a
 * {@link RequestAuthorizer} of its own (one review bucket per process) over `client` and a
 * certificate made now for the host name and `addresses`.
 */
export function endpointSecurity(secure: boolean, make: () => { authorizer: RequestAuthorizer; tls: SelfSignedCert }): EndpointSecurity {
  return secure ? { mode: 'secure', ...make() } : { mode: 'plain' };
}

/** `--secure-endpoints` (ours, every program), default true; see {@link EndpointSecurity}. */
export const SECURE_ENDPOINTS_FLAG = Object.freeze({
  kind: 'bool' as const,
  default: true,
  help: 'serve every endpoint but /healthz and /readyz over HTTPS to bearer tokens a TokenReview accepts and a SubjectAccessReview allows; false: plain HTTP for anyone (Coil)',
});
