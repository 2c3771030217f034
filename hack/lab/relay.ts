/**
 * A byte relay between a TCP listener and a UNIX socket (either direction). The lab's nodes
 * are network namespaces that cannot reach the root namespace's loopback, where the
 * kube-apiserver listens; a UNIX socket crosses namespaces through the filesystem:
 *
 *   coild (node netns) → 127.0.0.1:6443 ─relay─▶ /tmp/coil-lab/apiserver.sock ─relay─▶ 127.0.0.1:<apiserver>
 *
 * TLS passes through untouched, so the apiserver's certificate (SAN 127.0.0.1) still verifies.
 *
 * The other way, the apiserver reaches into the lab's network — webhooks served by pods, kubelets
 * for `kubectl exec` and logs — through its egress selector: an HTTP CONNECT proxy on a UNIX
 * socket, run inside the lab's switch namespace, which has an address on the nodes' segment.
 *
 *   node relay.js tcp-to-unix 0.0.0.0:6443 /path.sock      (run inside a node netns)
 *   node relay.js connect-proxy /path.sock                 (run inside the switch netns)
 */
import { createServer as createHttpServer, type Server as HttpServer } from 'node:http';
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { rm } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';

/**
 * Pipes two sockets both ways. TCP_NODELAY on both (a no-op on a UNIX socket): a relay forwards
 * whatever it reads at once, so a message its sender wrote in two pieces (an HTTP/2 HEADERS then
 * DATA frame, say) arrives in two reads; with Nagle the second write waits for the ACK of the
 * first, which the peer delays ≈ 40 ms — a small API request from a node stalled so about one time
 * in three (test/lab-relay.test.ts).
 */
function pipe(a: Socket, b: Socket): void {
  a.setNoDelay(true);
  b.setNoDelay(true);
  a.pipe(b);
  b.pipe(a);
  const close = () => {
    a.destroy();
    b.destroy();
  };
  a.on('error', close).on('close', close);
  b.on('error', close).on('close', close);
}

/** Listens on a UNIX socket and forwards each connection to `host:port`. */
export async function unixToTcp(path: string, host: string, port: number): Promise<Server> {
  await rm(path, { force: true });
  const server = createServer((client) => pipe(client, createConnection({ host, port })));
  await new Promise<void>((resolve, reject) => server.once('error', reject).listen(path, resolve));
  return server;
}

/** Listens on `host:port` and forwards each connection to the UNIX socket `path`. */
export async function tcpToUnix(host: string, port: number, path: string): Promise<Server> {
  const server = createServer((client) => pipe(client, createConnection({ path })));
  await new Promise<void>((resolve, reject) => server.once('error', reject).listen(port, host, resolve));
  return server;
}

/**
 * An HTTP CONNECT proxy listening on the UNIX socket `path` (kube-apiserver's egress selector with
 * `proxyProtocol: HTTPConnect` and a `uds` transport): each CONNECT host:port is dialled from this
 * process's network namespace, answered 200, then piped both ways; a failed dial answers 502.
 */
export async function connectProxy(path: string): Promise<HttpServer> {
  await rm(path, { force: true });
  const server = createHttpServer((_req, res) => res.writeHead(405).end());
  server.on('connect', (req, client: Socket, head: Buffer) => {
    const target = /^\[?([^\]]+)\]?:(\d+)$/.exec(req.url ?? '');
    if (!target) {
      client.end('HTTP/1.1 400 Bad Request\r\n\r\n');
      return;
    }
    const upstream = createConnection({ host: target[1]!, port: Number(target[2]) });
    upstream.once('error', () => client.end('HTTP/1.1 502 Bad Gateway\r\n\r\n'));
    upstream.once('connect', () => {
      client.write('HTTP/1.1 200 Connection established\r\n\r\n');
      if (head.length > 0) upstream.write(head);
      pipe(client, upstream);
    });
  });
  await new Promise<void>((resolve, reject) => server.once('error', reject).listen(path, resolve));
  return server;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const [mode, listen, target] = process.argv.slice(2);
  if (mode === 'connect-proxy' && listen) {
    await connectProxy(listen);
    console.log(`CONNECT proxy on ${listen}`);
  } else if (mode === 'tcp-to-unix' && listen && target) {
    const [host, port] = listen.split(':');
    await tcpToUnix(host!, Number(port), target);
    console.log(`relay ${listen} -> ${target}`);
  } else {
    console.error('usage: relay.js tcp-to-unix HOST:PORT SOCKET | relay.js connect-proxy SOCKET');
    process.exit(2);
  }
}
