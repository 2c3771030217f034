/**
 * A byte relay between a TCP listener and a UNIX socket (either direction). The lab's nodes
 * are network namespaces that cannot reach the root namespace's loopback, where the
 * kube-apiserver listens; a UNIX socket crosses namespaces through the filesystem:
 *
 *   coild (node netns) → 127.0.0.1:6443 ─relay─▶ /tmp/coil-lab/apiserver.sock ─relay─▶ 127.0.0.1:<apiserver>
 *
 * TLS passes through untouched, so the apiserver's certificate (SAN 127.0.0.1) still verifies.
 *
 *   node relay.js tcp-to-unix 127.0.0.1:6443 /path.sock      (run inside a node netns)
 */
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { rm } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';

function pipe(a: Socket, b: Socket): void {
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

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const [mode, listen, target] = process.argv.slice(2);
  if (mode !== 'tcp-to-unix' || !listen || !target) {
    console.error('usage: relay.js tcp-to-unix HOST:PORT SOCKET');
    process.exit(2);
  }
  const [host, port] = listen.split(':');
  await tcpToUnix(host!, Number(port), target);
  console.log(`relay ${listen} -> ${target}`);
}
