import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Registry } from 'prom-client';

/** A named health check: returns undefined when healthy, else the reason. */
export type Check = () => string | undefined;

/** Where a plain-HTTP endpoint listens; port 0 picks a free port. */
export interface BindAddress {
  readonly host?: string;
  readonly port: number;
}

/**
 * The plain-HTTP endpoints of a Manager: `/metrics` (Prometheus text format from the Manager's
 * own prom-client Registry) and the `/healthz` and `/readyz` probes. Each probe answers 200 `ok`
 * when every check passes, else 500 with one `[-]name failed: reason` line per failing check, the
 * format of kube-apiserver's and controller-runtime's probes.
 *
 * Metrics and probes may share one server (tests) or use two (programs: Coil's 9386 and 9387).
 * @see controller-runtime `pkg/healthz`, `pkg/metrics/server`
 */
export class HttpEndpoints {
  private readonly servers: Server[] = [];
  readonly healthChecks = new Map<string, Check>();
  readonly readyChecks = new Map<string, Check>();

  constructor(private readonly registry: Registry) {}

  /** Listens on `addr` serving the given routes. @returns the bound port */
  async listen(addr: BindAddress, routes: { metrics?: boolean; probes?: boolean }): Promise<number> {
    const server = createServer((req, res) => {
      const path = new URL(req.url ?? '/', 'http://localhost').pathname;
      if (routes.metrics && path === '/metrics') {
        this.registry.metrics().then(
          (text) => res.writeHead(200, { 'content-type': this.registry.contentType }).end(text),
          (err: Error) => res.writeHead(500).end(err.message),
        );
      } else if (routes.probes && (path === '/healthz' || path === '/readyz')) {
        const checks = path === '/healthz' ? this.healthChecks : this.readyChecks;
        const failures = [...checks].flatMap(([name, check]) => {
          const reason = check();
          return reason === undefined ? [] : [`[-]${name} failed: ${reason}`];
        });
        if (failures.length === 0) res.writeHead(200, { 'content-type': 'text/plain' }).end('ok');
        else res.writeHead(500, { 'content-type': 'text/plain' }).end(`${failures.join('\n')}\n${path.slice(1)} check failed`);
      } else {
        res.writeHead(404).end();
      }
    });
    this.servers.push(server);
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(addr.port, addr.host ?? '0.0.0.0', () => resolve());
    });
    return (server.address() as AddressInfo).port;
  }

  /** Closes every server. */
  async close(): Promise<void> {
    await Promise.all(
      this.servers.splice(0).map(
        (s) =>
          new Promise<void>((resolve) => {
            s.close(() => resolve());
            s.closeAllConnections();
          }),
      ),
    );
  }
}
