import type { Server } from 'node:http';
import type { Registry } from 'prom-client';
import { boundPort, closeServer, listenEndpoints, type BindAddress, type EndpointSecurity, type Handler } from './secure-serving.js';

export type { BindAddress } from './secure-serving.js';

/** A named health check: returns undefined when healthy, else the reason. */
export type Check = () => string | undefined;

/**
 * The HTTP endpoints of a Manager: `/metrics` (Prometheus text format from the Manager's own
 * prom-client Registry) and the `/healthz` and `/readyz` probes. Each probe answers 200 `ok`
 * when every check passes, else 500 with one `[-]name failed: reason` line per failing check, the
 * format of kube-apiserver's and controller-runtime's probes.
 *
 * Metrics and probes may share one server (tests) or use two (programs: Coil's 9386 and 9387).
 * With `secure` security `/metrics` is served over HTTPS to callers allowed `get` on the
 * non-resource path `/metrics` (secure-serving.ts); the probes stay open.
 * @see controller-runtime `pkg/healthz`, `pkg/metrics/server`
 */
export class HttpEndpoints {
  private readonly servers: Server[] = [];
  readonly healthChecks = new Map<string, Check>();
  readonly readyChecks = new Map<string, Check>();

  constructor(
    private readonly registry: Registry,
    private readonly security: EndpointSecurity = { mode: 'plain' },
  ) {}

  /** Listens on `addr` serving the given routes. @returns the bound port */
  async listen(addr: BindAddress, routes: { metrics?: boolean; probes?: boolean }): Promise<number> {
    const probe = (checks: Map<string, Check>, name: string): Handler => (_req, res) => {
      const failures = [...checks].flatMap(([check, run]) => {
        const reason = run();
        return reason === undefined ? [] : [`[-]${check} failed: ${reason}`];
      });
      if (failures.length === 0) res.writeHead(200, { 'content-type': 'text/plain' }).end('ok');
      else res.writeHead(500, { 'content-type': 'text/plain' }).end(`${failures.join('\n')}\n${name} check failed`);
    };
    const metrics: Handler = (_req, res) => {
      this.registry.metrics().then(
        (text) => res.writeHead(200, { 'content-type': this.registry.contentType }).end(text),
        (err: Error) => res.writeHead(500).end(err.message),
      );
    };
    const server = await listenEndpoints(
      addr,
      {
        probes: routes.probes ? { '/healthz': probe(this.healthChecks, 'healthz'), '/readyz': probe(this.readyChecks, 'readyz') } : {},
        routes: routes.metrics ? { '/metrics': { handle: metrics } } : {},
      },
      this.security,
    );
    this.servers.push(server);
    return boundPort(server);
  }

  /** Closes every server. */
  async close(): Promise<void> {
    await Promise.all(this.servers.splice(0).map(closeServer));
  }
}
