/**
 * End to end: the built `coil` executable (dist/bin/coil, from hack/build-cni.sh) invoked the
 * way containerd does — CNI_* environment plus netconf on stdin — against the real grpc-js
 * server of coild (src/node-agent/rpc/grpc-server.ts) with a recording test handler.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, beforeEach, describe, it } from 'node:test';
import bunyan from 'bunyan';
import { Registry } from 'prom-client';
import { CniError } from '../node-agent/rpc/cni-error.js';
import type { CniArgs, CniHandler, CniResult } from '../node-agent/rpc/cni-handler.js';
import { CniGrpcServer } from '../node-agent/rpc/grpc-server.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const COIL = join(ROOT, 'dist/bin/coil');
const CID = '0f3c5e2a9b7d4c1e8f6a3b2c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e';

const RESULT: CniResult = {
  cniVersion: '1.1.0',
  interfaces: [{ name: 'eth0', sandbox: '/var/run/netns/pod-1' }],
  ips: [
    { address: '10.64.0.7/32', interface: 0 },
    { address: 'fd02::7/128', interface: 0 },
  ],
};

/** Records every call; ADD fails with CNI 3 for pod "ghost" and with a plain Error for "buggy". */
class RecordingHandler implements CniHandler {
  calls: { verb: string; args: CniArgs }[] = [];
  statusError: Error | undefined;
  async add(args: CniArgs): Promise<CniResult> {
    this.calls.push({ verb: 'add', args });
    if (args.args.K8S_POD_NAME === 'ghost') throw new CniError(3, 'pod not found', { details: 'default/ghost' });
    if (args.args.K8S_POD_NAME === 'buggy') throw new Error('boom');
    return RESULT;
  }
  async del(args: CniArgs): Promise<void> {
    this.calls.push({ verb: 'del', args });
  }
  async check(args: CniArgs): Promise<void> {
    this.calls.push({ verb: 'check', args });
  }
  async gc(args: CniArgs): Promise<void> {
    this.calls.push({ verb: 'gc', args });
  }
  async status(args: CniArgs): Promise<void> {
    this.calls.push({ verb: 'status', args });
    if (this.statusError) throw this.statusError;
  }
}

/** The executable is missing or older than a shim source file. */
function isStale(): boolean {
  if (!existsSync(COIL)) return true;
  const builtMs = statSync(COIL).mtimeMs;
  const srcDir = join(ROOT, 'src/cni-shim');
  return readdirSync(srcDir).some((f) => f.endsWith('.ts') && statSync(join(srcDir, f)).mtimeMs > builtMs);
}

interface Run {
  code: number | null;
  stdout: string;
  json: Record<string, unknown> | undefined;
}

/**
 * Runs the executable like containerd: env + stdin, stdout captured. Async, so our server can
 * answer. `stdin` given as several parts is written part by part, `delayMs` apart.
 */
function runCoilWith(env: Record<string, string>, stdin: string | string[], delayMs = 0): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(COIL, [], { env: { PATH: process.env.PATH ?? '/usr/bin:/bin', ...env }, stdio: ['pipe', 'pipe', 'inherit'] });
    let stdout = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, json: stdout.trim() === '' ? undefined : (JSON.parse(stdout) as Record<string, unknown>) }));
    const parts = typeof stdin === 'string' ? [stdin] : [...stdin];
    const next = (): void => {
      const part = parts.shift() ?? '';
      if (parts.length === 0) child.stdin.end(part);
      else child.stdin.write(part, () => setTimeout(next, delayMs));
    };
    next();
  });
}

// The executable does its I/O with libc calls (libc.ts) and falls back to Bun's own I/O when
// those cannot be loaded; COIL_SHIM_NO_FFI=1 forces the fallback, so both paths meet every case.
for (const io of ['libc', 'Bun'] as const) describe(`coil executable against coild gRPC server (${io} I/O)`, () => {
  const ioEnv: Record<string, string> = io === 'Bun' ? { COIL_SHIM_NO_FFI: '1' } : {};
  const runCoil = (env: Record<string, string>, stdin: string | string[], delayMs = 0): Promise<Run> => runCoilWith({ ...ioEnv, ...env }, stdin, delayMs);
  const dir = mkdtempSync(join(tmpdir(), 'coil-shim-'));
  const socketPath = join(dir, 'coild.sock');
  const handler = new RecordingHandler();
  const server = new CniGrpcServer({ handler, logger: bunyan.createLogger({ name: 'shim-test', level: 'fatal' }), registry: new Registry(), socketPath });
  const env = (command: string, podName = 'web-0'): Record<string, string> => ({
    CNI_COMMAND: command,
    CNI_CONTAINERID: CID,
    CNI_NETNS: '/var/run/netns/pod-1',
    CNI_IFNAME: 'eth0',
    CNI_PATH: '/opt/cni/bin',
    CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=${podName};K8S_POD_INFRA_CONTAINER_ID=${CID};K8S_POD_UID=3f1d`,
  });
  const netconf = (cniVersion: string, extra: Record<string, unknown> = {}): string =>
    JSON.stringify({ cniVersion, name: 'k8s-pod-network', type: 'coil', socket: socketPath, ...extra });

  before(async () => {
    if (isStale()) execFileSync('bash', [join(ROOT, 'hack/build-cni.sh')], { stdio: 'inherit' });
    await server.start();
  });
  after(async () => {
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
  });
  beforeEach(() => {
    handler.calls = [];
    handler.statusError = undefined;
  });

  it('ADD with cniVersion 0.4.0 prints IPs with version "4"/"6"', async () => {
    const r = await runCoil(env('ADD'), netconf('0.4.0'));
    assert.equal(r.code, 0);
    assert.deepEqual(r.json, {
      cniVersion: '0.4.0',
      interfaces: [{ name: 'eth0', sandbox: '/var/run/netns/pod-1' }],
      ips: [
        { version: '4', address: '10.64.0.7/32', interface: 0 },
        { version: '6', address: 'fd02::7/128', interface: 0 },
      ],
    });
  });

  it('ADD with cniVersion 1.0.0 prints IPs without version', async () => {
    const r = await runCoil(env('ADD'), netconf('1.0.0'));
    assert.equal(r.code, 0);
    assert.deepEqual(r.json, { ...RESULT, cniVersion: '1.0.0' });
  });

  it('ADD with cniVersion 1.1.0 prints coild result as is', async () => {
    const r = await runCoil(env('ADD'), netconf('1.1.0'));
    assert.equal(r.code, 0);
    assert.deepEqual(r.json, RESULT);
  });

  it('ADD delivers env, CNI_ARGS and the exact netconf bytes to coild', async () => {
    const conf = netconf('1.1.0');
    await runCoil(env('ADD'), conf);
    const args = handler.calls[0]?.args;
    assert.ok(args);
    assert.equal(args.containerId, CID);
    assert.equal(args.netns, '/var/run/netns/pod-1');
    assert.equal(args.ifname, 'eth0');
    assert.equal(args.path, '/opt/cni/bin');
    assert.deepEqual(args.args, { K8S_POD_NAMESPACE: 'default', K8S_POD_NAME: 'web-0', K8S_POD_INFRA_CONTAINER_ID: CID, K8S_POD_UID: '3f1d' });
    assert.equal(args.stdinData.toString(), conf);
  });

  it('chained ADD sends prevResult ips/interfaces and prints prevResult back', async () => {
    const prevResult = { cniVersion: '1.0.0', interfaces: [{ name: 'veth9' }, { name: 'eth0', sandbox: '/var/run/netns/pod-1' }], ips: [{ address: '10.1.0.9/24', interface: 1 }] };
    const r = await runCoil(env('ADD'), netconf('1.0.0', { prevResult }));
    assert.equal(r.code, 0);
    assert.deepEqual(r.json, prevResult);
    const args = handler.calls[0]?.args;
    assert.deepEqual(args?.ips, ['10.1.0.9']);
    assert.deepEqual(args?.interfaces, { veth9: false, eth0: true });
    assert.equal(args?.args.IS_CHAINED, 'true');
  });

  it('a netconf larger than one HTTP/2 frame (16 KiB) goes through', async () => {
    const ips = Array.from({ length: 800 }, (_, i) => ({ address: `10.2.${i >> 8}.${i & 255}/32`, interface: 0 }));
    const prevResult = { cniVersion: '1.0.0', interfaces: [{ name: 'eth0', sandbox: '/var/run/netns/pod-1' }], ips };
    const conf = netconf('1.0.0', { prevResult });
    assert.ok(conf.length > 16_384);
    const r = await runCoil(env('ADD'), conf);
    assert.equal(r.code, 0);
    assert.equal(handler.calls[0]?.args.stdinData.toString(), conf);
    assert.equal(handler.calls[0]?.args.ips.length, 800);
  });

  it('DEL succeeds with empty output, and a second DEL too', async () => {
    for (let i = 0; i < 2; i++) {
      const r = await runCoil(env('DEL'), netconf('1.0.0'));
      assert.equal(r.code, 0);
      assert.equal(r.stdout, '');
    }
    assert.deepEqual(handler.calls.map((c) => c.verb), ['del', 'del']);
  });

  it('CHECK succeeds with empty output', async () => {
    const r = await runCoil(env('CHECK'), netconf('1.0.0'));
    assert.equal(r.code, 0);
    assert.equal(r.stdout, '');
    assert.equal(handler.calls[0]?.verb, 'check');
  });

  it('VERSION lists 0.3.1 to 1.1.0 without calling coild', async () => {
    const r = await runCoil({ CNI_COMMAND: 'VERSION' }, '{"cniVersion":"1.0.0"}');
    assert.equal(r.code, 0);
    assert.deepEqual(r.json, { cniVersion: '1.1.0', supportedVersions: ['0.3.1', '0.4.0', '1.0.0', '1.1.0'] });
    assert.equal(handler.calls.length, 0);
  });

  it('GC forwards the valid attachments', async () => {
    const conf = netconf('1.1.0', { 'cni.dev/valid-attachments': [{ containerID: CID, ifname: 'eth0' }] });
    const r = await runCoil({ CNI_COMMAND: 'GC', CNI_PATH: '/opt/cni/bin' }, conf);
    assert.equal(r.code, 0);
    assert.deepEqual(handler.calls[0]?.args.validAttachments, [{ containerId: CID, ifname: 'eth0' }]);
  });

  it('STATUS succeeds when coild is ready', async () => {
    const r = await runCoil({ CNI_COMMAND: 'STATUS', CNI_PATH: '/opt/cni/bin' }, netconf('1.1.0'));
    assert.equal(r.code, 0);
    assert.equal(handler.calls[0]?.verb, 'status');
  });

  it('STATUS reports code 50 when coild says the plugin is not available', async () => {
    handler.statusError = new CniError(50, 'no address block yet');
    const r = await runCoil({ CNI_COMMAND: 'STATUS', CNI_PATH: '/opt/cni/bin' }, netconf('1.1.0'));
    assert.equal(r.code, 1);
    assert.deepEqual(r.json, { cniVersion: '1.1.0', code: 50, msg: 'no address block yet' });
  });

  it('STATUS with coild absent is code 50, not 11', async () => {
    const r = await runCoil({ CNI_COMMAND: 'STATUS', CNI_PATH: '/opt/cni/bin' }, netconf('1.1.0', { socket: join(dir, 'missing.sock') }));
    assert.equal(r.code, 1);
    assert.equal(r.json?.code, 50);
  });

  it('a handler CniError with code 3 arrives through the gRPC detail', async () => {
    const r = await runCoil(env('ADD', 'ghost'), netconf('0.4.0'));
    assert.equal(r.code, 1);
    assert.deepEqual(r.json, { cniVersion: '0.4.0', code: 3, msg: 'pod not found', details: 'default/ghost' });
  });

  it('any other handler error is code 999 with its message', async () => {
    const r = await runCoil(env('ADD', 'buggy'), netconf('1.0.0'));
    assert.equal(r.code, 1);
    assert.deepEqual(r.json, { cniVersion: '1.0.0', code: 999, msg: 'boom' });
  });

  it('missing CNI_NETNS on ADD is code 4 and coild is not called', async () => {
    const { CNI_NETNS: _netns, ...rest } = env('ADD');
    const r = await runCoil(rest, netconf('1.0.0'));
    assert.equal(r.code, 1);
    assert.equal(r.json?.code, 4);
    assert.equal(handler.calls.length, 0);
  });

  it('an input error is reported before an unreachable coild', async () => {
    const { CNI_NETNS: _netns, ...rest } = env('ADD');
    const r = await runCoil(rest, netconf('1.0.0', { socket: join(dir, 'missing.sock') }));
    assert.equal(r.code, 1);
    assert.equal(r.json?.code, 4);
    const bad = await runCoil({ ...env('ADD'), CNI_ARGS: 'K8S_POD_NAME' }, netconf('1.0.0', { socket: join(dir, 'missing.sock') }));
    assert.equal(bad.json?.code, 4, bad.stdout);
  });

  it('coild absent (no socket file) is code 11', async () => {
    const r = await runCoil(env('ADD'), netconf('1.0.0', { socket: join(dir, 'missing.sock') }));
    assert.equal(r.code, 1);
    assert.equal(r.json?.code, 11);
  });

  it('a socket path nobody listens on (ECONNREFUSED) is code 11', async () => {
    const dead = join(dir, 'dead.sock');
    writeFileSync(dead, ''); // connect(2) to a non-socket file fails with ECONNREFUSED
    const r = await runCoil(env('DEL'), netconf('1.0.0', { socket: dead }));
    assert.equal(r.code, 1);
    assert.equal(r.json?.code, 11);
  });

  it('reads a netconf that arrives in parts, as a slow writer sends it', async () => {
    const conf = netconf('1.1.0');
    const r = await runCoil(env('ADD'), [conf.slice(0, 10), conf.slice(10, 40), conf.slice(40)], 30);
    assert.equal(r.code, 0);
    assert.deepEqual(r.json, RESULT);
    assert.equal(handler.calls[0]?.args.stdinData.toString(), conf);
  });

  it('coild closing the connection without an answer is code 11', async () => {
    const closing = join(dir, `closing-${io}.sock`);
    const srv = createServer((c) => c.destroy());
    await new Promise<void>((resolve) => srv.listen(closing, resolve));
    try {
      const r = await runCoil(env('ADD'), netconf('1.0.0', { socket: closing }));
      assert.equal(r.code, 1);
      assert.equal(r.json?.code, 11);
      assert.match(String(r.json?.msg), /coild/); // libc: "closed the connection…"; Bun may see the close as a failed connect
    } finally {
      await new Promise((resolve) => srv.close(resolve));
    }
  });

  it('a socket path longer than sockaddr_un holds is a clear error', async () => {
    const long = `/tmp/${'x'.repeat(120)}.sock`;
    const r = await runCoil(env('ADD'), netconf('1.0.0', { socket: long }));
    assert.equal(r.code, 1);
    assert.match(String(r.json?.msg), new RegExp(`cannot reach coild at ${long}`));
  });
});
