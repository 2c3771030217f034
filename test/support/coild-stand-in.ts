/**
 * A coild stand-in for timing and profiling the `coil` executable alone: coild's real gRPC
 * server (CniGrpcServer, with its call log and metrics) in front of a handler that answers at
 * once, ADD with a fixed dual-stack result. No kernel work, no API server.
 *
 * Usage: node dist/test/support/coild-stand-in.js SOCKET_PATH
 * Prints `ready` on stdout once it listens, and stops when its stdin closes (or on SIGTERM).
 * Used by hack/build-cni.sh (profile-guided bytecode layout, and --bench).
 */
import bunyan from 'bunyan';
import { Registry } from 'prom-client';
import type { CniHandler, CniResult } from '../../src/node-agent/rpc/cni-handler.js';
import { CniGrpcServer } from '../../src/node-agent/rpc/grpc-server.js';

const RESULT: CniResult = {
  cniVersion: '1.1.0',
  interfaces: [{ name: 'eth0', sandbox: '/var/run/netns/stand-in' }],
  ips: [
    { address: '10.64.0.1/32', gateway: '192.168.0.1', interface: 0 },
    { address: 'fd02::1/128', gateway: 'fe80::1', interface: 0 },
  ],
};

const handler: CniHandler = {
  add: async () => RESULT,
  del: async () => undefined,
  check: async () => undefined,
  gc: async () => undefined,
  status: async () => undefined,
};

const socketPath = process.argv[2];
if (!socketPath) {
  process.stderr.write('usage: coild-stand-in.js SOCKET_PATH\n');
  process.exit(2);
}
const server = new CniGrpcServer({ handler, logger: bunyan.createLogger({ name: 'coild-stand-in', level: 'warn' }), registry: new Registry(), socketPath });
await server.start();
process.stdout.write('ready\n');
const stop = (): void => void server.stop().then(() => process.exit(0));
process.stdin.on('end', stop).resume();
process.on('SIGTERM', stop);
