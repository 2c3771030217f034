import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import bunyan from 'bunyan';
import { Registry } from 'prom-client';
import { CniError } from './cni-error.js';
import type { CniArgs, CniHandler } from './cni-handler.js';
import { CniGrpcServer } from './grpc-server.js';

const PROTO_DIR = fileURLToPath(new URL('../../../../proto/', import.meta.url));

const handler: CniHandler = {
  add: async (a: CniArgs) => ({ cniVersion: '1.1.0', ips: [{ address: '10.64.0.9/32' }], interfaces: [{ name: a.ifname }] }),
  del: async () => {
    throw new CniError(3, 'pod not found');
  },
  check: async () => {},
  gc: async () => {},
  status: async () => {},
};

type Unary = (req: object, cb: (err: grpc.ServiceError | null, res?: Record<string, unknown>) => void) => void;

/** A grpc-js client for the CNI and health services, promisified. */
function clients(socketPath: string): { call: (service: 'cni' | 'health', method: string, req: object) => Promise<Record<string, unknown>>; close: () => void } {
  const def = protoLoader.loadSync(['cnirpc.proto', 'health.proto'], { keepCase: true, includeDirs: [PROTO_DIR], defaults: true, enums: String });
  const pkg = grpc.loadPackageDefinition(def) as unknown as {
    pkg: { cnirpc: { CNI: grpc.ServiceClientConstructor } };
    grpc: { health: { v1: { Health: grpc.ServiceClientConstructor } } };
  };
  const cni = new pkg.pkg.cnirpc.CNI(`unix:${socketPath}`, grpc.credentials.createInsecure());
  const health = new pkg.grpc.health.v1.Health(`unix:${socketPath}`, grpc.credentials.createInsecure());
  return {
    call: (service, method, req) =>
      new Promise((resolve, reject) => {
        const client = (service === 'cni' ? cni : health) as unknown as Record<string, Unary>;
        (client[method] as Unary).call(client, req, (err, res) => (err ? reject(err) : resolve(res ?? {})));
      }),
    close: () => {
      cni.close();
      health.close();
    },
  };
}

describe('CniGrpcServer', () => {
  const dir = mkdtempSync(join(tmpdir(), 'coild-grpc-'));
  const socketPath = join(dir, 'coild.sock');
  const registry = new Registry();
  const ring = new bunyan.RingBuffer({ limit: 100 });
  const logger = bunyan.createLogger({ name: 'test', streams: [{ type: 'raw', stream: ring, level: 'trace' }] });
  const server = new CniGrpcServer({ handler, logger, registry, socketPath, protoDir: PROTO_DIR });
  let c: ReturnType<typeof clients>;

  before(async () => {
    // A socket left by a killed coild: python binds and exits without unlinking.
    execFileSync('python3', ['-c', `import socket; socket.socket(socket.AF_UNIX).bind(${JSON.stringify(socketPath)})`]);
    await server.start();
    c = clients(socketPath);
  });
  after(async () => {
    c.close();
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('replaces a stale socket and sets mode 0600', () => {
    const st = statSync(socketPath);
    assert.ok(st.isSocket());
    assert.equal(st.mode & 0o777, 0o600);
  });

  it('refuses to delete a regular file at the socket path', async () => {
    const file = join(dir, 'not-a-socket');
    writeFileSync(file, 'keep me');
    const other = new CniGrpcServer({ handler, logger, registry: new Registry(), socketPath: file, protoDir: PROTO_DIR });
    await assert.rejects(other.start(), /not a socket/);
  });

  it('stop() removes its socket, but not one a successor put in its place', async () => {
    const path = join(dir, 'second.sock');
    const first = new CniGrpcServer({ handler, logger, registry: new Registry(), socketPath: path, protoDir: PROTO_DIR });
    await first.start();
    await first.stop();
    assert.equal(existsSync(path), false);
    await first.start();
    const successor = new CniGrpcServer({ handler, logger, registry: new Registry(), socketPath: path, protoDir: PROTO_DIR });
    await successor.start();
    await first.stop();
    assert.ok(statSync(path).isSocket());
    await successor.stop();
    assert.equal(existsSync(path), false);
  });

  it('Add returns the handler result as JSON bytes', async () => {
    const res = await c.call('cni', 'Add', { container_id: 'c1', ifname: 'eth0', args: { K8S_POD_NAME: 'web-0', K8S_POD_NAMESPACE: 'default' } });
    assert.deepEqual(JSON.parse((res.result as Buffer).toString()), { cniVersion: '1.1.0', ips: [{ address: '10.64.0.9/32' }], interfaces: [{ name: 'eth0' }] });
  });

  it('a thrown CniError becomes the gRPC code and a status detail', async () => {
    await assert.rejects(c.call('cni', 'Del', { container_id: 'c1' }), (err: grpc.ServiceError) => {
      assert.equal(err.code, grpc.status.NOT_FOUND);
      assert.equal(err.details, 'pod not found');
      assert.equal(err.metadata.get('grpc-status-details-bin').length, 1);
      return true;
    });
  });

  it('health Check reports SERVING for "" and the CNI service, NOT_FOUND otherwise', async () => {
    assert.equal((await c.call('health', 'Check', { service: '' })).status, 'SERVING');
    assert.equal((await c.call('health', 'Check', { service: 'pkg.cnirpc.CNI' })).status, 'SERVING');
    await assert.rejects(c.call('health', 'Check', { service: 'nope' }), (e: grpc.ServiceError) => e.code === grpc.status.NOT_FOUND);
  });

  it('logs each finished call with the pod, container, code and duration', async () => {
    await c.call('cni', 'Add', { container_id: 'c7', netns: '/var/run/netns/p7', ifname: 'eth0', args: { K8S_POD_NAME: 'p7', K8S_POD_NAMESPACE: 'ns7' } });
    const rec = (ring.records as Record<string, unknown>[]).find((r) => r['grpc.request.container_id'] === 'c7');
    assert.ok(rec);
    assert.equal(rec['grpc.method'], 'Add');
    assert.equal(rec['grpc.code'], 'OK');
    assert.equal(rec['grpc.request.pod.name'], 'p7');
    assert.equal(rec['grpc.request.pod.namespace'], 'ns7');
    assert.equal(rec['grpc.request.netns'], '/var/run/netns/p7');
    assert.equal(rec['grpc.request.ifname'], 'eth0');
    assert.equal(typeof rec['grpc.time_ms'], 'number');
  });

  it('counts calls in the grpc_server_* metrics of the registry passed in', async () => {
    const value = async (name: string, labels: Record<string, string>): Promise<number> => {
      const metric = registry.getSingleMetric(name.replace(/_count$/, ''));
      const m = (await metric?.get())?.values ?? [];
      const v = m.find((x) => ((x as { metricName?: string }).metricName ?? name) === name && Object.entries(labels).every(([k, l]) => x.labels[k] === l));
      return v?.value ?? -1;
    };
    const add = { grpc_type: 'unary', grpc_service: 'pkg.cnirpc.CNI', grpc_method: 'Add' };
    const before = await value('grpc_server_handled_total', { ...add, grpc_code: 'OK' });
    await c.call('cni', 'Add', { container_id: 'c8' });
    assert.equal(await value('grpc_server_handled_total', { ...add, grpc_code: 'OK' }), before + 1);
    assert.ok((await value('grpc_server_started_total', add)) >= 2);
    assert.ok((await value('grpc_server_msg_received_total', add)) >= 2);
    assert.ok((await value('grpc_server_msg_sent_total', add)) >= 2);
    const del = { grpc_type: 'unary', grpc_service: 'pkg.cnirpc.CNI', grpc_method: 'Del' };
    assert.equal(await value('grpc_server_handled_total', { ...del, grpc_code: 'NotFound' }), 1);
    assert.equal(await value('grpc_server_msg_sent_total', del), 0);
    assert.ok((await value('grpc_server_handling_seconds_count', add)) >= 2);
    assert.equal(await value('grpc_server_started_total', { grpc_type: 'unary', grpc_service: 'pkg.cnirpc.CNI', grpc_method: 'GC' }), 0);
  });
});
