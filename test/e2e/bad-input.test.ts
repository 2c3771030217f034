/**
 * The bad-input corpus (issue 8), in the stand-in lab (hack/lab/stand-in-lab.ts): malformed CNI environments and netconfs (fuzzed) through the
 * real `coil` executable, garbage and oversized gRPC messages on coild's socket, annotations
 * naming absent pools, and oversized objects. Each must get a clear error; nothing may crash
 * or leak. The table of what was tried and how it was answered is printed.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import fc from 'fast-check';
import { LAB_DIR, StandInLab as Lab } from '../../hack/lab/stand-in-lab.js';
import { REPO_ROOT } from '../envtest/control-plane.js';
import { kubectl } from '../envtest/tools.js';
import { prerequisite } from '../support/prerequisite.js';

const isRoot = process.getuid?.() === 0;
const COIL = join(REPO_ROOT, 'dist/bin/coil');

interface Outcome { exitCode: number | null; signal: NodeJS.Signals | null; stdout: string; ms: number }

function runCoil(env: Record<string, string>, stdin: Buffer | string): Promise<Outcome> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const child = spawn(COIL, [], { env, timeout: 20_000 });
    let stdout = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c));
    child.on('error', reject);
    child.on('close', (exitCode, signal) => resolve({ exitCode, signal, stdout, ms: performance.now() - t0 }));
    child.stdin.on('error', () => undefined);
    child.stdin.end(stdin);
  });
}

/** Every answer must be a CNI result (exit 0) or a CNI error object (exit 1), never a crash. */
function assertCniAnswer(o: Outcome, what: string): number | 'ok' {
  assert.equal(o.signal, null, `${what}: killed by ${o.signal}`);
  assert.ok(o.exitCode === 0 || o.exitCode === 1, `${what}: exit ${o.exitCode}`);
  // Success of DEL, CHECK, GC and STATUS prints nothing (CNI spec); ADD prints a result.
  if (o.exitCode === 0) return o.stdout === '' ? 'ok' : (JSON.parse(o.stdout), 'ok');
  const body = JSON.parse(o.stdout) as { code?: number; msg?: string };
  assert.equal(typeof body.code, 'number', `${what}: error has a code: ${o.stdout}`);
  assert.ok(typeof body.msg === 'string' && body.msg.length > 0, `${what}: error has a message`);
  return body.code!;
}

describe('bad input corpus (e2e)', { skip: prerequisite(isRoot ? undefined : 'the lab needs root (network namespaces)') }, () => {
  let lab: Lab;
  let socket: string;
  const table: { input: string; answer: string }[] = [];

  before(async () => {
    lab = await Lab.up({ nodes: 1 });
    socket = join(LAB_DIR, lab.nodes[0]!.name, 'coild.sock');
    await lab.addPod(lab.nodes[0]!, 'witness');
  });
  after(async () => {
    console.log('bad input                                            | answer');
    for (const row of table) console.log(`${row.input.padEnd(52)} | ${row.answer}`);
    await lab?.stop();
  });

  const baseEnv = (over: Record<string, string | undefined> = {}): Record<string, string> => {
    const env: Record<string, string | undefined> = {
      PATH: process.env.PATH, CNI_COMMAND: 'ADD', CNI_CONTAINERID: 'c'.repeat(64), CNI_NETNS: '/run/netns/coillab-witness',
      CNI_IFNAME: 'eth1', CNI_PATH: '/opt/cni/bin', CNI_ARGS: 'IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=witness', ...over,
    };
    return Object.fromEntries(Object.entries(env).filter((e): e is [string, string] => e[1] !== undefined));
  };
  const netconf = (over: Record<string, unknown> = {}) => JSON.stringify({ cniVersion: '1.0.0', name: 'k8s-pod-network', type: 'coil', socket, ...over });

  test('named malformed environments and netconfs get their CNI error codes', async () => {
    const cases: [string, Record<string, string | undefined>, string, number][] = [
      ['missing CNI_NETNS on ADD', { CNI_NETNS: undefined }, netconf(), 4],
      ['missing CNI_CONTAINERID', { CNI_CONTAINERID: undefined }, netconf(), 4],
      ['unknown CNI_COMMAND', { CNI_COMMAND: 'EXPLODE' }, netconf(), 4],
      ['garbage on stdin', {}, 'not json {', 6],
      ['empty stdin', {}, '', 6],
      ['unknown cniVersion', {}, netconf({ cniVersion: '9.9.9' }), 1],
      ['CNI_ARGS without =', { CNI_ARGS: 'K8S_POD_NAME' }, netconf(), 4],
      ['pod that does not exist', { CNI_ARGS: 'K8S_POD_NAMESPACE=default;K8S_POD_NAME=ghost' }, netconf(), 3],
      ['socket path that does not exist', {}, netconf({ socket: '/nonexistent/coild.sock' }), 11],
    ];
    // No CNI_COMMAND at all is a human at a shell (Go skel): the about text on stderr, exit 0.
    const human = await runCoil(baseEnv({ CNI_COMMAND: undefined }), netconf());
    assert.equal(human.exitCode, 0);
    assert.equal(human.stdout, '');
    table.push({ input: 'missing CNI_COMMAND', answer: 'about text on stderr, exit 0 (as skel)' });
    for (const [name, env, stdin, code] of cases) {
      const answer = assertCniAnswer(await runCoil(baseEnv(env), stdin), name);
      table.push({ input: name, answer: String(answer) });
      assert.equal(answer, code, name);
    }
  });

  test('300 fuzzed CNI invocations never crash, hang or leak', async () => {
    const codes = new Map<string, number>();
    await fc.assert(
      fc.asyncProperty(
        fc.record({
          command: fc.constantFrom('ADD', 'DEL', 'CHECK', 'VERSION', 'GC', 'STATUS', 'add', '', 'ADD\u0000'),
          containerId: fc.oneof(fc.constant('f'.repeat(64)), fc.string({ maxLength: 300 })),
          ifname: fc.oneof(fc.constant('eth1'), fc.string({ maxLength: 40 })),
          args: fc.oneof(fc.constant('K8S_POD_NAMESPACE=default;K8S_POD_NAME=witness'), fc.string({ maxLength: 200 })),
          stdin: fc.oneof(
            fc.string({ maxLength: 500 }),
            fc.jsonValue().map((v) => JSON.stringify(v)),
            fc.record({ cniVersion: fc.constantFrom('0.3.1', '0.4.0', '1.0.0', '1.1.0', '2.0', ''), prevResult: fc.jsonValue() }).map((o) => netconf(o)),
            fc.uint8Array({ maxLength: 300 }).map((a) => Buffer.from(a).toString('latin1')),
          ),
        }),
        async (c) => {
          const env = baseEnv({ CNI_COMMAND: c.command.replace(/\u0000/g, ''), CNI_CONTAINERID: c.containerId.replace(/\u0000/g, ''), CNI_IFNAME: c.ifname.replace(/\u0000/g, ''), CNI_ARGS: c.args.replace(/\u0000/g, '') });
          const o = await runCoil(env, c.stdin);
          if ((c.command === 'VERSION' || c.command === '') && o.exitCode === 0) return;
          const answer = assertCniAnswer(o, JSON.stringify(c).slice(0, 200));
          codes.set(String(answer), (codes.get(String(answer)) ?? 0) + 1);
        },
      ),
      { numRuns: 300, seed: 4242 },
    );
    table.push({ input: '300 fuzzed invocations (codes: count)', answer: [...codes].map(([k, v]) => `${k}:${v}`).join(' ') });
    assert.deepEqual(await lab.check(), [], 'nothing leaked: no stray allocation or veth');
    const view = await lab.view();
    assert.equal(view.nodes[0]!.allocations?.length, 1, 'only the witness pod holds an address');
  });

  test('garbage and oversized gRPC messages on the socket are refused and coild keeps serving', async () => {
    const raw = { path: '/pkg.cnirpc.CNI/Add', requestStream: false, responseStream: false, requestSerialize: (b: Buffer) => b, requestDeserialize: (b: Buffer) => b, responseSerialize: (b: Buffer) => b, responseDeserialize: (b: Buffer) => b };
    const Client = grpc.makeGenericClientConstructor({ Add: raw }, 'CNI');
    const client = new Client(`unix://${socket}`, grpc.credentials.createInsecure(), { 'grpc.max_send_message_length': 64 << 20 }) as unknown as {
      Add(req: Buffer, cb: (err: grpc.ServiceError | null) => void): void; close(): void;
    };
    const call = (payload: Buffer) => new Promise<grpc.ServiceError | null>((resolve) => client.Add(payload, (err) => resolve(err)));
    const wrongType = Buffer.from([0x0a, 0x05, 0xff, 0xff, 0xff, 0xff, 0x0f]); // field 1 (string) with invalid UTF-8 / truncated
    for (const [name, payload] of [
      ['random bytes (1 KiB)', randomBytes(1024)],
      ['field 1 with a wrong wire type', Buffer.from([0x08, 0x96, 0x01])],
      ['truncated length-delimited field', wrongType],
      ['an empty CNIArgs', Buffer.alloc(0)],
      ['a 16 MiB container_id', Buffer.concat([Buffer.from([0x0a, 0x80, 0x80, 0x80, 0x08]), Buffer.alloc(16 << 20, 0x61)])],
    ] as [string, Buffer][]) {
      const err = await call(payload);
      assert.ok(err, `${name} is refused`);
      table.push({ input: `gRPC Add: ${name}`, answer: `${grpc.status[err.code]}: ${err.details.slice(0, 60)}` });
    }
    client.close();
    const ok = await lab.addPod(lab.nodes[0]!, 'after-garbage');
    assert.equal(ok.ips.length, 1, 'coild still serves ADD');
    await lab.deletePod('after-garbage');
  });

  test('a namespace naming an absent pool gets a CNI error naming the pool, and nothing leaks', async () => {
    await kubectl(lab.cp.kubeconfigPath, ['create', 'namespace', 'nopool']);
    await kubectl(lab.cp.kubeconfigPath, ['annotate', 'namespace', 'nopool', 'coil.cybozu.com/pool=absent']);
    await assert.rejects(lab.addPod(lab.nodes[0]!, 'orphan', 'nopool'), /absent/);
    table.push({ input: 'namespace annotated with an absent pool', answer: 'CNI error naming "absent"' });
    const brs = await kubectl(lab.cp.kubeconfigPath, ['get', 'blockrequests', '-o', 'name']);
    assert.doesNotMatch(brs, /absent/, 'no BlockRequest for the absent pool piles up');
    assert.deepEqual(await lab.check(), []);
  });

  test('an oversized AddressPool is rejected with a message and the controller stays up', async () => {
    // ~2 MiB of subnets: past etcd's 1.5 MiB request limit, so the write must fail cleanly
    // after the webhook has parsed and validated it.
    const subnets = Array.from({ length: 65_000 }, (_, i) => ({ ipv4: `10.${Math.floor(i / 256)}.${i % 256}.0/24` }));
    const err = await kubectl(lab.cp.kubeconfigPath, ['create', '-f', '-'], JSON.stringify({
      apiVersion: 'coil.cybozu.com/v2', kind: 'AddressPool', metadata: { name: 'huge' }, spec: { blockSizeBits: 5, subnets },
    })).then(() => 'accepted', (e: Error) => e.message);
    table.push({ input: 'AddressPool with 65,000 subnets (~2 MiB)', answer: err.split('\n').filter((l) => !l.startsWith('Warning:')).join(' ').slice(0, 80) });
    assert.notEqual(err, 'accepted');
    const health = await fetch(`http://127.0.0.1:${lab.controllerPorts[0]!.health}/healthz`);
    assert.equal(health.status, 200, 'the controller is alive');
    if (err === 'accepted') await kubectl(lab.cp.kubeconfigPath, ['delete', 'addresspool', 'huge']);
  });
});
