/**
 * Benchmark (not a test) of the IPAM controller, run as the real entrypoint
 * (`dist/src/controller/main.js`, a child process) against a real kube-apiserver + etcd:
 *
 * 1. latency from a BlockRequest's create to its `Complete` answer with the AddressBlock visible,
 *    p50/p95 over N requests made one after another (target p50 ≤ 50 ms), and the same for N
 *    requests created at once;
 * 2. controller RSS (VmRSS of the child) once its informer cache holds M AddressBlocks and every
 *    reconciler has processed them (target ≤ 300 MB for 100,000).
 *
 * Usage: node dist/hack/bench/blockrequest-latency.js [-n REQUESTS=200] [-b BLOCKS=100000] [-c CONCURRENCY=50]
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import type { AddressBlock } from '../../src/api/v2/addressblock.js';
import { AddressBlockKind } from '../../src/api/v2/addressblock.js';
import { AddressPoolKind } from '../../src/api/v2/addresspool.js';
import { BlockRequestKind, isAnswered, type BlockRequest } from '../../src/api/v2/blockrequest.js';
import { coilCrds } from '../../src/api/v2/crd.js';
import { FIN_COIL, LABEL_NODE, LABEL_POOL, LABEL_REQUEST } from '../../src/api/v2/keys.js';
import { ApiTransport } from '../../src/runtime/api-transport.js';
import { Client } from '../../src/runtime/client.js';
import { Informer } from '../../src/runtime/informer.js';
import { defineKind, type KindDescriptor } from '../../src/runtime/kind.js';
import { silentLogger } from '../../src/runtime/logging.js';
import { ControlPlane, eventually, freePort, REPO_ROOT } from '../../test/envtest/control-plane.js';

const Pool = defineKind<{ metadata?: { name?: string }; spec: { blockSizeBits: number; subnets: { ipv4?: string }[] } }>(AddressPoolKind);
const Block = AddressBlockKind as KindDescriptor<AddressBlock>;
const Request = BlockRequestKind as KindDescriptor<BlockRequest>;
const Node = defineKind({ group: '', version: 'v1', kind: 'Node', plural: 'nodes', namespaced: false });

/** Nearest-rank percentile of sorted values. */
function pct(sorted: readonly number[], q: number): number {
  return sorted[Math.max(1, Math.ceil(q * sorted.length)) - 1]!;
}

function summary(label: string, ms: number[]): string {
  const s = [...ms].sort((a, b) => a - b);
  return `${label}: n=${s.length} p50=${pct(s, 0.5).toFixed(1)} ms p95=${pct(s, 0.95).toFixed(1)} ms max=${s[s.length - 1]!.toFixed(1)} ms`;
}

async function rssMb(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)![1]) / 1024;
}

/** Runs `fn` over `items` with at most `limit` in flight. */
async function pool<T>(items: readonly T[], limit: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(Array.from({ length: limit }, async () => {
    while (next < items.length) await fn(items[next++]!);
  }));
}

function startController(cp: ControlPlane, metricsPort: number, healthPort: number, nodeOptions = ''): ChildProcess {
  return spawn(process.execPath, [
    ...nodeOptions.split(' ').filter(Boolean),
    join(REPO_ROOT, 'dist/src/controller/main.js'),
    `--kubeconfig=${cp.kubeconfigPath}`,
    `--metrics-addr=127.0.0.1:${metricsPort}`,
    `--health-addr=127.0.0.1:${healthPort}`,
    '--enable-webhooks=false',
    '--leader-election-namespace=default',
    '--log-level=warn',
  ], { stdio: ['ignore', 'ignore', 'inherit'] });
}

async function ready(healthPort: number): Promise<void> {
  await eventually(async () => (await fetch(`http://127.0.0.1:${healthPort}/readyz`)).status === 200, { timeoutMs: 180_000, intervalMs: 200 });
}

/** Watches requests and blocks; resolves each waiter when its request is answered and its block is seen. */
class Answers {
  private readonly answered = new Map<string, string>();
  private readonly blocks = new Set<string>();
  private readonly waiters = new Map<string, () => void>();
  readonly informers: Informer<any>[];

  constructor(cp: ControlPlane, transport: ApiTransport) {
    const reqs = new Informer(Request, transport, cp.kubeConfig, silentLogger());
    const blocks = new Informer(Block, transport, cp.kubeConfig, silentLogger());
    reqs.onEvent((e) => {
      if (e.type !== 'DELETED' && isAnswered(e.object.status)) this.answered.set(e.object.metadata!.name!, e.object.status?.addressBlockName ?? '');
      this.check(e.object.metadata!.name!);
    });
    blocks.onEvent((e) => {
      if (e.type === 'ADDED') this.blocks.add(e.object.metadata!.name!);
      for (const name of this.waiters.keys()) this.check(name);
    });
    this.informers = [reqs, blocks];
  }

  async start(): Promise<void> {
    for (const i of this.informers) i.start();
    await Promise.all(this.informers.map((i) => i.waitForSync()));
  }

  wait(name: string): Promise<void> {
    return new Promise((resolve) => {
      this.waiters.set(name, resolve);
      this.check(name);
    });
  }

  private check(name: string): void {
    const block = this.answered.get(name);
    const w = this.waiters.get(name);
    if (w && block !== undefined && (block === '' || this.blocks.has(block))) {
      this.waiters.delete(name);
      w();
    }
  }
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { n: { type: 'string', short: 'n', default: '200' }, b: { type: 'string', short: 'b', default: '100000' }, c: { type: 'string', short: 'c', default: '50' } } });
  const n = Number(values.n);
  const blocks = Number(values.b);
  const concurrency = Number(values.c);
  const cp = await ControlPlane.start({ crds: coilCrds() });
  const transport = new ApiTransport(cp.kubeConfig);
  const client = new Client(transport, 'bench');
  const [metricsPort, healthPort] = [await freePort(), await freePort()];
  let ctl = startController(cp, metricsPort, healthPort);
  try {
    await client.create(Node, { metadata: { name: 'bench-node' } });
    await client.create(Pool, { metadata: { name: 'lat' }, spec: { blockSizeBits: 5, subnets: [{ ipv4: '10.0.0.0/12' }] } });
    await ready(healthPort);
    if (n > 0) await latency(cp, transport, client, n);
    console.log(`controller RSS after the latency runs (${n > 0 ? 2 * n + 10 : 0} blocks): ${(await rssMb(ctl.pid!)).toFixed(0)} MB, ${await heapMb(metricsPort)}`);
    if (blocks > 0) await rss(cp, client, blocks, concurrency, () => ctl, (c) => (ctl = c), metricsPort, healthPort);
  } finally {
    ctl.kill('SIGTERM');
    await cp.stop();
  }
}

/** JS heap in use and allocated, from the controller's own `nodejs_heap_size_*_bytes` metrics. */
async function heapMb(metricsPort: number): Promise<string> {
  const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
  const v = (name: string): string => (Number(new RegExp(`^${name} (\\S+)`, 'm').exec(text)?.[1] ?? NaN) / 2 ** 20).toFixed(0);
  return `JS heap used ${v('nodejs_heap_size_used_bytes')} MB of ${v('nodejs_heap_size_total_bytes')} MB`;
}

async function latency(cp: ControlPlane, transport: ApiTransport, client: Client, n: number): Promise<void> {
    const answers = new Answers(cp, transport);
    await answers.start();
    const timed = async (name: string): Promise<number> => {
      const t0 = performance.now();
      const done = answers.wait(name);
      await client.create(Request, { metadata: { name }, spec: { nodeName: 'bench-node', poolName: 'lat' } });
      await done;
      return performance.now() - t0;
    };
    for (let i = 0; i < 10; i++) await timed(`warm-${i}`);
    const sequential: number[] = [];
    for (let i = 0; i < n; i++) sequential.push(await timed(`seq-${i}`));
    console.log(summary(`BlockRequest create → Complete + AddressBlock, one at a time`, sequential));
    const burst = await Promise.all(Array.from({ length: n }, (_, i) => timed(`burst-${i}`)));
    console.log(summary(`BlockRequest create → Complete + AddressBlock, ${n} at once`, burst));
    for (const i of answers.informers) await i.stop();
}

/** Part 2: RSS with many AddressBlocks, created directly through the API, then a fresh controller. */
async function rss(cp: ControlPlane, client: Client, blocks: number, concurrency: number, current: () => ChildProcess, replace: (c: ChildProcess) => void, metricsPort: number, healthPort: number): Promise<void> {
    let ctl = current();
    ctl.kill('SIGTERM');
    await new Promise((r) => ctl.once('exit', r));
    const nodes = 100;
    for (let i = 0; i < nodes; i++) await client.create(Node, { metadata: { name: `rss-node-${i}` } });
    await client.create(Pool, { metadata: { name: 'rss' }, spec: { blockSizeBits: 5, subnets: [{ ipv4: '11.0.0.0/8' }] } });
    const t0 = performance.now();
    await pool(Array.from({ length: blocks }, (_, i) => i), concurrency, async (i) => {
      await client.create(Block, {
        metadata: { name: `rss-${i}`, labels: { [LABEL_POOL]: 'rss', [LABEL_NODE]: `rss-node-${i % nodes}`, [LABEL_REQUEST]: `00000000-0000-0000-0000-${String(i).padStart(12, '0')}` }, finalizers: [FIN_COIL] },
        index: i,
        ipv4: `11.${(i >> 11) & 255}.${(i >> 3) & 255}.${(i & 7) * 32}/27`,
      });
    });
    console.log(`created ${blocks} AddressBlocks in ${((performance.now() - t0) / 1000).toFixed(1)} s (concurrency ${concurrency})`);
    // As shipped, then with the old-space cap a Pod memory limit would imply: V8 grows its heap
    // lazily, so the uncapped RSS says more about headroom than about what the cache needs.
    for (const nodeOptions of ['', '--max-old-space-size=224']) {
      ctl = startController(cp, metricsPort, healthPort, nodeOptions);
      replace(ctl);
      const s0 = performance.now();
      await ready(healthPort);
      // Wait until the pool's status counts every block: all reconcilers have been through the cache.
      await eventually(async () => (await client.get(Pool, { name: 'rss' }) as { status?: { allocatedBlocks?: number } } | undefined)?.status?.allocatedBlocks === blocks, { timeoutMs: 600_000, intervalMs: 500 });
      const label = nodeOptions || 'default heap';
      console.log(`[${label}] controller synced ${blocks} blocks in ${((performance.now() - s0) / 1000).toFixed(1)} s`);
      let peak = 0;
      for (let i = 0; i < 20; i++) {
        peak = Math.max(peak, await rssMb(ctl.pid!));
        await new Promise((r) => setTimeout(r, 500));
      }
      console.log(`[${label}] controller RSS with ${blocks} AddressBlocks cached: ${(await rssMb(ctl.pid!)).toFixed(0)} MB (peak over 10 s ${peak.toFixed(0)} MB), ${await heapMb(metricsPort)}`);
      ctl.kill('SIGTERM');
      await new Promise((r) => ctl.once('exit', r));
    }
}

await main();
