/**
 * Benchmark (not a test) of the IPAM controller, run as a child process against a real
 * kube-apiserver + etcd:
 *
 * 1. latency from a BlockRequest's create to its `Complete` answer with the AddressBlock visible,
 *    p50/p95 over N requests made one after another (target p50 ≤ 50 ms), and the same for N
 *    requests created at once; plus the idle controller's RSS;
 * 2. controller RSS (VmRSS of the child) once its informer cache holds M AddressBlocks and every
 *    reconciler has processed them (target ≤ 300 MB for 100,000), then through a full relist
 *    (kube-apiserver restarted behind a compacted etcd, so the watch answers 410 Gone), with the
 *    peak (VmHWM). Measured twice: as shipped — started through hack/image/entrypoint.sh, i.e. with
 *    the node flags and environment the image gives coil-controller — and as bare `node main.js`;
 *    the last line (`SUMMARY`) sums both up with the idle RSS and the cost per block.
 *
 * The M blocks are written straight into etcd (seconds; copies of one block created through the
 * API, so they carry what the apiserver stores: uid, managedFields, ownerReference…), or with
 * `--load=api` created one by one through the API (many minutes for 100,000).
 *
 * Usage: node dist/hack/bench/blockrequest-latency.js [-n REQUESTS=200] [-b BLOCKS=100000]
 *          [--load=etcd|api] [-c API_CONCURRENCY=50] [--relist=true|false]
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtemp, readFile, rm, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import type { AddressBlock } from '../../src/api/v2/addressblock.js';
import { addressBlockName } from '../../src/api/v2/addressblock.js';
import { isAnswered } from '../../src/api/v2/blockrequest.js';
import { coilCrds } from '../../src/api/v2/crd.js';
import { API_VERSION, FIN_COIL, LABEL_NODE, LABEL_POOL, LABEL_REQUEST } from '../../src/api/v2/keys.js';
import { ApiTransport } from '../../src/runtime/api-transport.js';
import { Client } from '../../src/runtime/client.js';
import { Informer } from '../../src/runtime/informer.js';
import { Kinds } from '../../src/api/v2/kinds.js';
import { collectionPath } from '../../src/runtime/kind.js';
import { silentLogger } from '../../src/runtime/logging.js';
import { ControlPlane, eventually, freePort, REPO_ROOT } from '../../test/envtest/control-plane.js';
import { EtcdKv, storageKey } from './etcd-kv.js';
import { runBench } from './bench-flags.js';
import { defineFlags, type FlagValues } from '../../src/runtime/flag-table.js';


/** Nearest-rank percentile of sorted values. */
function pct(sorted: readonly number[], q: number): number {
  return sorted[Math.max(1, Math.ceil(q * sorted.length)) - 1]!;
}

function summary(label: string, ms: number[]): string {
  const s = [...ms].sort((a, b) => a - b);
  return `${label}: n=${s.length} p50=${pct(s, 0.5).toFixed(1)} ms p95=${pct(s, 0.95).toFixed(1)} ms max=${s[s.length - 1]!.toFixed(1)} ms`;
}

/** VmRSS (now) and VmHWM (the peak since start) of `pid`, in MB. */
async function memMb(pid: number): Promise<{ rss: number; peak: number }> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  const kb = (field: string): number => Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(status)![1]);
  return { rss: kb('VmRSS') / 1024, peak: kb('VmHWM') / 1024 };
}

/** Runs `fn` over `items` with at most `limit` in flight. */
async function pool<T>(items: readonly T[], limit: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(Array.from({ length: limit }, async () => {
    while (next < items.length) await fn(items[next++]!);
  }));
}

/** How a controller is started: through the image's entrypoint script, or bare node with no flags. */
type Launch = 'shipped' | 'no flags';

/** The environment of a controller child: ours, minus anything that would change node or malloc. */
function cleanEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, NODE_ENV: 'production' };
  for (const k of Object.keys(env)) if (k === 'NODE_OPTIONS' || k.startsWith('MALLOC_')) delete env[k];
  return env;
}

/**
 * Starts the controller. `shipped` runs hack/image/entrypoint.sh under the name coil-controller
 * (a symlink in `binDir`), so it gets exactly the node flags and environment the image gives it;
 * `no flags` runs `node dist/src/controller/main.js`.
 */
function startController(cp: ControlPlane, launch: Launch, binDir: string, ports: { metrics: number; health: number }, extra: string[] = []): ChildProcess {
  const args = [
    `--kubeconfig=${cp.kubeconfigPath}`,
    `--metrics-addr=127.0.0.1:${ports.metrics}`,
    `--health-addr=127.0.0.1:${ports.health}`,
    '--secure-endpoints=false',
    '--enable-webhooks=false',
    '--log-level=error',
    ...extra,
  ];
  const env = cleanEnv();
  const stdio = ['ignore', 'ignore', 'inherit'] as const;
  if (launch === 'no flags') return spawn(process.execPath, [join(REPO_ROOT, 'dist/src/controller/main.js'), ...args], { env, stdio: [...stdio] });
  // The script execs `node` from PATH: ours. Its exec keeps the pid, so /proc/<pid> is the controller.
  return spawn(join(binDir, 'coil-controller'), args, { env: { ...env, COIL_ROOT: REPO_ROOT, PATH: `${dirname(process.execPath)}:${env.PATH ?? ''}` }, stdio: [...stdio] });
}

async function ready(healthPort: number): Promise<void> {
  await eventually(async () => (await fetch(`http://127.0.0.1:${healthPort}/readyz`)).status === 200, { timeoutMs: 180_000, intervalMs: 200 });
}

async function stopController(ctl: ChildProcess): Promise<void> {
  if (ctl.exitCode !== null || ctl.signalCode !== null) return;
  ctl.kill('SIGTERM');
  await new Promise((r) => ctl.once('exit', r));
}

/** Watches requests and blocks; resolves each waiter when its request is answered and its block is seen. */
class Answers {
  private readonly answered = new Map<string, string>();
  private readonly blocks = new Set<string>();
  private readonly waiters = new Map<string, () => void>();
  readonly informers: Informer<any>[];

  constructor(cp: ControlPlane, transport: ApiTransport) {
    const reqs = new Informer(Kinds.BlockRequest, transport, silentLogger());
    const blocks = new Informer(Kinds.AddressBlock, transport, silentLogger());
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

const FLAGS = defineFlags('blockrequest-latency', {
  n: { kind: 'int', default: 200, min: 1, help: 'BlockRequests timed' },
  b: { kind: 'int', default: 100_000, help: 'AddressBlocks loaded before timing' },
  c: { kind: 'int', default: 50, min: 1, help: 'concurrent creates with --load=api' },
  load: { kind: 'enum', values: ['etcd', 'api'], default: 'etcd', help: 'how the blocks are loaded: straight into etcd, or through the API' },
  relist: { kind: 'bool', default: true, help: 'also time a relist of the blocks' },
});

async function main(values: FlagValues<typeof FLAGS.specs>): Promise<void> {
  const n = Number(values.n);
  const blocks = Number(values.b);
  const binDir = await mkdtemp(join(tmpdir(), 'coil-bench-'));
  await symlink(join(REPO_ROOT, 'hack/image/entrypoint.sh'), join(binDir, 'coil-controller'));
  const cp = await ControlPlane.start({ crds: coilCrds() });
  const transport = new ApiTransport(cp.kubeConfig);
  const client = new Client(transport, 'bench');
  const ports = { metrics: await freePort(), health: await freePort() };
  let ctl = startController(cp, 'shipped', binDir, ports, ['--leader-election-namespace=default']);
  try {
    await client.create(Kinds.Node, { metadata: { name: 'bench-node' } });
    await client.create(Kinds.AddressPool, { metadata: { name: 'lat' }, spec: { blockSizeBits: 5, subnets: [{ ipv4: '10.0.0.0/12' }] } });
    await ready(ports.health);
    await new Promise((r) => setTimeout(r, 2000));
    const idle = (await memMb(ctl.pid!)).rss;
    console.log(`[shipped] idle controller RSS (1 pool, no blocks): ${idle.toFixed(0)} MB, ${await heapMb(ports.metrics)}`);
    if (n > 0) {
      await latency(cp, transport, client, n);
      console.log(`[shipped] controller RSS after the latency runs (${2 * n + 10} blocks): ${(await memMb(ctl.pid!)).rss.toFixed(0)} MB, ${await heapMb(ports.metrics)}`);
    }
    await stopController(ctl);
    if (blocks > 0) {
      const kv = new EtcdKv(cp.etcdEndpoint);
      await loadBlocks(transport, client, kv, blocks, values.load, Number(values.c));
      const figures = new Map<Launch, Figures>();
      for (const launch of ['shipped', 'no flags'] as const) {
        ctl = startController(cp, launch, binDir, ports, ['--enable-egress=false', '--leader-elect=false']);
        figures.set(launch, await measure(cp, kv, ctl, launch, blocks, ports, values.relist));
        await stopController(ctl);
      }
      const line = (l: Launch): string => {
        const f = figures.get(l)!;
        return `${l}: ${f.steady.toFixed(0)} MB${f.afterRelist === undefined ? '' : ` (${f.afterRelist.toFixed(0)} MB after the relist)`}, peak ${f.peak.toFixed(0)} MB`;
      };
      const perBlockKb = ((figures.get('shipped')!.steady - idle) * 1024) / blocks;
      console.log(`SUMMARY controller RSS with ${blocks} AddressBlocks — ${line('shipped')}; ${line('no flags')}; idle (shipped) ${idle.toFixed(0)} MB, so ${perBlockKb.toFixed(2)} KB per block`);
    }
  } finally {
    await stopController(ctl);
    await cp.stop();
    await rm(binDir, { recursive: true, force: true });
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
    await client.create(Kinds.BlockRequest, { metadata: { name }, spec: { nodeName: 'bench-node', poolName: 'lat' } });
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

const RSS_POOL = 'rss';
const RSS_NODES = 100;

/** Block `i` of the RSS pool as the BlockRequest reconciler would create it (minus server fields). */
function rssBlock(i: number, poolUid: string): AddressBlock {
  return {
    apiVersion: API_VERSION,
    kind: 'AddressBlock',
    metadata: {
      name: addressBlockName(RSS_POOL, i),
      labels: { [LABEL_POOL]: RSS_POOL, [LABEL_NODE]: `rss-node-${i % RSS_NODES}`, [LABEL_REQUEST]: randomUUID() },
      finalizers: [FIN_COIL],
      ownerReferences: [{ apiVersion: API_VERSION, kind: 'AddressPool', name: RSS_POOL, uid: poolUid, controller: true, blockOwnerDeletion: true }],
    },
    index: i,
    ipv4: `11.${(i >> 11) & 255}.${(i >> 3) & 255}.${(i & 7) * 32}/27`,
  };
}

/** How many AddressBlocks the API lists. */
async function countBlocks(transport: ApiTransport): Promise<number> {
  const page = await transport.request<{ items: unknown[]; metadata: { remainingItemCount?: number } }>({ method: 'GET', path: collectionPath(Kinds.AddressBlock), query: { limit: 1 } });
  return page.items.length + (page.metadata.remainingItemCount ?? 0);
}

/**
 * Creates 100 Nodes, pool `rss` (11.0.0.0/8 in /27 blocks) and `blocks` AddressBlocks of it:
 * block 0 through the API; the others either through the API too, or (`etcd`) as copies of block
 * 0's stored form — same managedFields, ownerReference, finalizer, creation time — each with its
 * own name, uid, node and request labels, index and CIDR, written straight into etcd.
 */
async function loadBlocks(transport: ApiTransport, client: Client, kv: EtcdKv, blocks: number, how: 'etcd' | 'api', concurrency: number): Promise<void> {
  for (let i = 0; i < RSS_NODES; i++) await client.create(Kinds.Node, { metadata: { name: `rss-node-${i}` } });
  const rssPool = await client.create(Kinds.AddressPool, { metadata: { name: RSS_POOL }, spec: { blockSizeBits: 5, subnets: [{ ipv4: '11.0.0.0/8' }] } });
  const poolUid = rssPool.metadata!.uid!;
  const before = await countBlocks(transport);
  const t0 = performance.now();
  await client.create(Kinds.AddressBlock, rssBlock(0, poolUid));
  if (how === 'api') {
    await pool(Array.from({ length: blocks - 1 }, (_, i) => i + 1), concurrency, async (i) => void (await client.create(Kinds.AddressBlock, rssBlock(i, poolUid))));
  } else {
    const stored = JSON.parse((await kv.get(storageKey(Kinds.AddressBlock, addressBlockName(RSS_POOL, 0))))!.toString()) as AddressBlock;
    function* entries(): Generator<[string, string]> {
      for (let i = 1; i < blocks; i++) {
        const want = rssBlock(i, poolUid);
        const copy = { ...stored, metadata: { ...stored.metadata, name: want.metadata!.name, uid: randomUUID(), labels: want.metadata!.labels }, index: want.index, ipv4: want.ipv4 };
        yield [storageKey(Kinds.AddressBlock, copy.metadata.name!), JSON.stringify(copy)];
      }
    }
    await kv.putMany(entries());
  }
  // The apiserver takes a while to take 100,000 etcd events into its watch cache; until then a
  // list may answer 504 "Too large resource version". Count with one small page (no selector:
  // with one the apiserver leaves out remainingItemCount).
  await eventually(async () => (await countBlocks(transport)) === before + blocks, { timeoutMs: 300_000, intervalMs: 1000 });
  // One full paged list, as an informer does, so the first controller measured does not pay
  // for a cold apiserver (its first list of 100,000 objects is much slower than later ones).
  // Retried: while the watch cache still catches up, a page may answer 504 as above.
  await eventually(async () => {
    let cont: string | undefined;
    do {
      const page: { metadata: { continue?: string } } = await transport.request({ method: 'GET', path: collectionPath(Kinds.AddressBlock), query: { limit: 500, continue: cont } });
      cont = page.metadata.continue || undefined;
    } while (cont);
    return true;
  }, { timeoutMs: 300_000, intervalMs: 1000 });
  console.log(`created ${blocks} AddressBlocks in ${((performance.now() - t0) / 1000).toFixed(1)} s (${how === 'api' ? `through the API, concurrency ${concurrency}` : 'straight into etcd'})`);
}

/**
 * Measures one controller (started with `--enable-egress=false --leader-elect=false` while the
 * cluster holds `blocks` blocks of pool `rss`): RSS once its `coil_controller_allocated_blocks`
 * counts every block (all reconcilers have been through the cache) and 10 s later; with `relist`,
 * stops kube-apiserver, deletes one block in etcd behind its back, compacts, starts it again —
 * the controller's watch resumes
 * with an old resourceVersion, gets 410 Gone and lists all blocks again; only that relist can
 * notice the deletion, so the count dropping by one proves it — and measures again; then puts the
 * block back. Peak is the kernel's VmHWM over the whole run.
 */
async function measure(cp: ControlPlane, kv: EtcdKv, ctl: ChildProcess, label: Launch, blocks: number, ports: { metrics: number; health: number }, relist: boolean): Promise<Figures> {
  // This process's own count (the pool's status may still hold the previous controller's).
  const counted = (want: number) => eventually(async () => (await allocatedBlocks(ports.metrics, RSS_POOL)) === want, { timeoutMs: 600_000, intervalMs: 500 });
  const settle = async (): Promise<number> => {
    let peak = 0;
    for (let i = 0; i < 20; i++) {
      peak = Math.max(peak, (await memMb(ctl.pid!)).rss);
      await new Promise((r) => setTimeout(r, 500));
    }
    return peak;
  };
  const t0 = performance.now();
  await ready(ports.health);
  const tReady = performance.now() - t0;
  await counted(blocks);
  const tSynced = performance.now() - t0;
  const atSync = (await memMb(ctl.pid!)).rss;
  const peak10 = await settle();
  const steady = (await memMb(ctl.pid!)).rss;
  console.log(`[${label}] ready in ${(tReady / 1000).toFixed(1)} s, ${blocks} blocks counted in ${(tSynced / 1000).toFixed(1)} s; RSS ${atSync.toFixed(0)} MB then, ${steady.toFixed(0)} MB 10 s later (max ${peak10.toFixed(0)} MB); ${await heapMb(ports.metrics)}`);
  let afterRelist: number | undefined;
  if (relist) {
    const victim = storageKey(Kinds.AddressBlock, addressBlockName(RSS_POOL, blocks - 1));
    const r0 = performance.now();
    await cp.stopApiServer();
    const saved = (await kv.get(victim))!;
    await kv.delete(victim);
    await kv.compact();
    await cp.startApiServer();
    await counted(blocks - 1);
    const tRelist = performance.now() - r0;
    await settle();
    afterRelist = (await memMb(ctl.pid!)).rss;
    console.log(`[${label}] relisted after a kube-apiserver restart (410 Gone) in ${(tRelist / 1000).toFixed(1)} s; RSS ${afterRelist.toFixed(0)} MB 10 s later; ${await heapMb(ports.metrics)}`);
    await kv.put(victim, saved);
    await counted(blocks);
  }
  const { rss, peak } = await memMb(ctl.pid!);
  console.log(`[${label}] RSS with ${blocks} AddressBlocks cached: ${rss.toFixed(0)} MB, peak (VmHWM) ${peak.toFixed(0)} MB`);
  return { steady, afterRelist, peak };
}

/** RSS figures of one controller run, MB. */
interface Figures {
  /** 10 s after the controller counted every block. */
  readonly steady: number;
  /** 10 s after the relist, when one was forced. */
  readonly afterRelist?: number;
  /** VmHWM at the end: the most the process ever held. */
  readonly peak: number;
}

/** `coil_controller_allocated_blocks{pool}` as the controller itself reports it. */
async function allocatedBlocks(metricsPort: number, pool: string): Promise<number | undefined> {
  const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
  const m = new RegExp(`^coil_controller_allocated_blocks\\{pool="${pool}"\\} (\\S+)$`, 'm').exec(text);
  return m ? Number(m[1]) : undefined;
}

await runBench(FLAGS, main);
