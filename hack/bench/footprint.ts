/**
 * Benchmark (not a test): the memory of coil's long-lived programs on one node, as an admin pays it.
 *
 * - coild on a netns node against the real control plane and IPAM controller (test/netns/node-lab.ts),
 *   idle after start, then after 1,000 pod ADDs and as many DELs through the real `coil` executable
 *   (env + netconf on stdin, as containerd runs it) with up to 110 pods live (kubelet's default
 *   maxPods): RSS and peak RSS (VmHWM) of coild and of every process it started (its helpers).
 * - coil-egress in an egress pod netns, with 100 client pods naming its Egress (Pod objects with
 *   the opt-in annotation and pod IPs) in the API; on Bun (its bundle, as the image should run it)
 *   unless `-r node`. On a kernel with FoU it lists and watches those pods (the figure waits for its
 *   initial sync); this machine's kernel has none, so here it stays unready and starts neither its
 *   FoU server nor its client watch. The FoU VM runs the real thing:
 *   `hack/fou-vm.sh -- node dist/hack/bench/footprint.js -n 0` (its row says which was measured).
 * - coil-controller idle (the lab's IPAM controller, no webhooks).
 *
 * Each figure is read from /proc/<pid>/status (VmRSS, VmHWM) and /proc/<pid>/smaps_rollup (the
 * anonymous part, Anonymous), after 3 s without calls. The pod churn: ADD new pods until 110 are
 * live, then DEL a random live pod and ADD a new one, until 1,000 ADDs have run, then DEL the rest;
 * `-p` calls run at once (kubelet runs sandboxes of different pods in parallel). Every pod gets its
 * own netns (deleted after its DEL, as a runtime does).
 *
 * Usage (root, after `npm run build && bash hack/build-cni.sh`):
 *   node dist/hack/bench/footprint.js [-n ADDS=1000] [-l LIVE=110] [-p PARALLEL=4] [-e CLIENTS=100] [-c 'EXTRA COILD FLAGS'] [-r EGRESS_RUNTIME=bun|node] [-s]
 *   -s also prints each process's largest mappings (smaps), e.g. the runtime's binary vs its heaps
 * Output: a markdown table (MB = MiB), the load average and the wall time of the churn.
 */
import { readFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { coilEgressCommand, NodeLab, labSkipReason, type LabNode, type LabPod } from '../../test/netns/node-lab.js';
import { REPO_ROOT, freePort } from '../../test/envtest/control-plane.js';
import { ManagedProcess, waitFor } from '../../test/envtest/process.js';
import { unixToTcp } from '../lab/relay.js';
import { Kinds } from '../../src/api/v2/kinds.js';
import { defineFlags, type FlagValues } from '../../src/runtime/flag-table.js';
import { runBench } from './bench-flags.js';

const NODE = join(REPO_ROOT, 'node_modules/.bin/node');

/** Memory of one process, MiB. */
interface Mem { pid: number; comm: string; rssMb: number; hwmMb: number; anonMb: number }

async function memOf(pid: number): Promise<Mem | undefined> {
  try {
    const status = await readFile(`/proc/${pid}/status`, 'utf8');
    const rollup = await readFile(`/proc/${pid}/smaps_rollup`, 'utf8');
    const kb = (text: string, key: string): number => Number(new RegExp(`^${key}:\\s+(\\d+)`, 'm').exec(text)?.[1] ?? NaN);
    const comm = (await readFile(`/proc/${pid}/comm`, 'utf8')).trim();
    return { pid, comm, rssMb: kb(status, 'VmRSS') / 1024, hwmMb: kb(status, 'VmHWM') / 1024, anonMb: kb(rollup, 'Anonymous') / 1024 };
  } catch {
    return undefined; // exited meanwhile
  }
}

/**
 * The mappings of `pid` that hold most of its RSS, from /proc/<pid>/smaps: one line per backing
 * file (or [heap], [anon], …) with its RSS and anonymous MiB — where the memory goes.
 */
async function topMappings(pid: number, n = 8): Promise<string> {
  const text = await readFile(`/proc/${pid}/smaps`, 'utf8').catch(() => '');
  const by = new Map<string, { rss: number; anon: number; count: number }>();
  let name = '';
  for (const line of text.split('\n')) {
    const head = /^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \S+\s*(.*)$/.exec(line);
    if (head) { name = head[1] || '[anon]'; continue; }
    const kv = /^(Rss|Anonymous):\s+(\d+) kB/.exec(line);
    if (!kv) continue;
    const e = by.get(name) ?? { rss: 0, anon: 0, count: 0 };
    if (kv[1] === 'Rss') { e.rss += Number(kv[2]); e.count++; } else e.anon += Number(kv[2]);
    by.set(name, e);
  }
  return [...by].sort((a, b) => b[1].rss - a[1].rss).slice(0, n)
    .map(([k, e]) => `  ${(e.rss / 1024).toFixed(1).padStart(7)} MB rss ${(e.anon / 1024).toFixed(1).padStart(7)} MB anon ${String(e.count).padStart(5)} maps  ${k}`).join('\n');
}

/** `pid` and every live descendant (children of children too), from /proc/<pid>/stat. */
async function tree(root: number): Promise<number[]> {
  const parent = new Map<number, number>();
  for (const name of await readdir('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const stat = await readFile(`/proc/${name}/stat`, 'utf8').catch(() => '');
    // pid (comm) state ppid …; comm may hold spaces and parentheses: split after the last ')'.
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    if (stat) parent.set(Number(name), ppid);
  }
  const out = [root];
  for (let i = 0; i < out.length; i++) for (const [pid, pp] of parent) if (pp === out[i]) out.push(pid);
  return out;
}

/** Memory rows of `root`'s process tree; the first row is `root`. */
async function treeMem(root: number): Promise<Mem[]> {
  const rows = await Promise.all((await tree(root)).map(memOf));
  return rows.filter((r): r is Mem => r !== undefined);
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Churns pods on `node`: ADD until `live` are up, then DEL one and ADD one, `adds` ADDs in all. */
async function churn(lab: NodeLab, node: LabNode, o: { adds: number; live: number; parallel: number }): Promise<{ adds: number; dels: number; ms: number }> {
  const up: LabPod[] = [];
  let started = 0;
  let dels = 0;
  const t0 = performance.now();
  const del = async (pod: LabPod): Promise<void> => {
    const r = await lab.runCoil(node, 'DEL', pod);
    if (r.code !== 0) throw new Error(`DEL ${pod.name} failed: ${r.stdout}\n${await lab.logs()}`);
    dels++;
    await lab.dropPod(pod);
  };
  const worker = async (): Promise<void> => {
    while (started < o.adds) {
      const i = started++;
      if (up.length >= o.live) await del(up.splice(Math.floor(Math.random() * up.length), 1)[0]!);
      const pod = await lab.createPod(node, 'bench', `pod-${i}`);
      const r = await lab.runCoil(node, 'ADD', pod);
      if (r.code !== 0) throw new Error(`ADD ${pod.name} failed: ${r.stdout}\n${await lab.logs()}`);
      up.push(pod);
    }
  };
  await Promise.all(Array.from({ length: o.parallel }, worker));
  while (up.length > 0) await Promise.all(up.splice(0, o.parallel).map(del));
  return { adds: started, dels, ms: performance.now() - t0 };
}

/** Starts coil-egress in its own netns with `clients` client pods; returns its process. */
async function startEgress(lab: NodeLab, clients: number, runtime: 'bun' | 'node'): Promise<{ proc: ManagedProcess; watch: string; stopRelay: () => Promise<void> }> {
  await lab.createNamespace('internet');
  await lab.createNamespace('app');
  for (let i = 0; i < clients; i++) {
    const name = `client-${i}`;
    await lab.admin.create(Kinds.Pod, {
      metadata: { namespace: 'app', name, annotations: { 'egress.coil.cybozu.com/internet': 'nat' } },
      spec: { nodeName: 'elsewhere', containers: [{ name: 'c', image: 'pause' }] },
    });
    const ip = `10.64.${i >> 8}.${i & 255}`;
    await lab.admin.patchStatus(Kinds.Pod, { namespace: 'app', name }, { phase: 'Running', podIP: ip, podIPs: [{ ip }] });
  }
  const ns = await lab.netnsOf('egress');
  await lab.ip.batch([['link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'eth1'], ['addr', 'add', '198.51.100.1/24', 'dev', 'eth0'], ['link', 'set', 'dev', 'eth0', 'up'], ['link', 'set', 'dev', 'eth1', 'up']], { netns: ns.path });
  // The apiserver listens on the root netns's loopback; the egress netns reaches it as a pod
  // would reach its Service, here through a relay over a UNIX socket (hack/lab/relay.ts), on the
  // same port inside the netns, so the lab's kubeconfig and certificate hold unchanged.
  const sock = join(lab.dir, 'apiserver-egress.sock');
  const rootSide = await unixToTcp(sock, '127.0.0.1', lab.cp.apiPort);
  const relay = await ManagedProcess.start({
    name: 'egress-apiserver-relay', command: 'ip', logFile: join(lab.dir, 'egress-relay.log'),
    args: ['netns', 'exec', ns.name, NODE, join(REPO_ROOT, 'dist/hack/lab/relay.js'), 'tcp-to-unix', `127.0.0.1:${lab.cp.apiPort}`, sock],
  });
  await waitFor('egress apiserver relay', async () => /relay /.test(await relay.logTail(5)), { process: relay, timeoutMs: 20_000 });
  const [metrics, health] = [await freePort(), await freePort()];
  const program = coilEgressCommand(runtime);
  const proc = await ManagedProcess.start({
    name: 'coil-egress', command: 'ip', logFile: join(lab.dir, 'coil-egress.log'),
    env: { ...process.env, COIL_POD_NAMESPACE: 'internet', COIL_EGRESS_NAME: 'nat', COIL_POD_ADDRESSES: '198.51.100.1', HOSTNAME: 'nat-0', ...program.env },
    args: ['netns', 'exec', ns.name, ...program.argv, '--kubeconfig', lab.cp.kubeconfigPath,
      `--metrics-addr=:${metrics}`, `--health-addr=:${health}`, '--secure-endpoints=false', '--backend=nftables'],
  });
  // Its ports live in the netns; its log says when the client pods are listed.
  await waitFor('coil-egress started', async () => /coil-egress started/.test(await proc.logTail(200)), { process: proc, timeoutMs: 30_000 });
  // With FoU (the FoU VM: hack/fou-vm.sh) it then lists and watches its client pods; without, it
  // stays unready and starts no watch. The label says which was measured.
  const stopRelay = async (): Promise<void> => {
    await relay.stop({ graceMs: 2_000 });
    rootSide.close();
  };
  if (/the kernel lacks/.test(await proc.logTail(200))) return { proc, watch: 'no FoU here: no client watch', stopRelay };
  let synced = '';
  await waitFor('coil-egress client sync', async () => {
    synced = /"clients":(\d+),"pods":(\d+)[^\n]*initial client sync done/.exec(await proc.logTail(400))?.[1] ?? '';
    return synced !== '';
  }, { process: proc, timeoutMs: 60_000 });
  return { proc, watch: `client watch active, ${synced} clients synced`, stopRelay };
}

function table(rows: [string, Mem[]][]): string {
  const f = (x: number): string => x.toFixed(1);
  const lines = ['| program | state | process | pid | RSS MB | VmHWM MB | anon MB |', '|---|---|---|---|---|---|---|'];
  for (const [label, mems] of rows) {
    const [program, state] = label.split(' / ');
    for (const m of mems) lines.push(`| ${program} | ${state} | ${m.comm} | ${m.pid} | ${f(m.rssMb)} | ${f(m.hwmMb)} | ${f(m.anonMb)} |`);
    if (mems.length > 1) {
      const sum = (k: 'rssMb' | 'hwmMb' | 'anonMb'): string => f(mems.reduce((s, m) => s + m[k], 0));
      lines.push(`| ${program} | ${state} | **all ${mems.length}** | | **${sum('rssMb')}** | ${sum('hwmMb')} | ${sum('anonMb')} |`);
    }
  }
  return lines.join('\n');
}

const FLAGS = defineFlags('footprint', {
  n: { kind: 'int', default: 1000, help: 'ADDs of the churn' },
  l: { kind: 'int', default: 110, min: 1, help: 'live pods at most during the churn' },
  p: { kind: 'int', default: 4, min: 1, help: 'ADDs and DELs at once' },
  e: { kind: 'int', default: 100, help: 'egress client pods' },
  c: { kind: 'string', default: '', help: 'extra coild flags, space-separated' },
  r: { kind: 'enum', values: ['bun', 'node'], default: 'bun', help: "coil-egress's runtime" },
  s: { kind: 'bool', default: false, help: 'also print the largest mappings of each process' },
});

async function main(values: FlagValues<typeof FLAGS.specs>): Promise<void> {
  const skip = labSkipReason();
  if (skip) throw new Error(skip);
  const lab = await NodeLab.start();
  const rows: [string, Mem[]][] = [];
  // Each figure as soon as it is read, so a later failure loses nothing.
  const note = (label: string, mems: Mem[]): void => {
    rows.push([label, mems]);
    process.stderr.write(`${table([[label, mems]])}\n`);
    if (values.s) for (const m of mems) void topMappings(m.pid).then((t) => process.stderr.write(`${label}, ${m.comm} ${m.pid}, largest mappings:\n${t}\n`));
  };
  try {
    await lab.createPool('default', { subnets: [{ ipv4: '10.100.0.0/16' }], blockSizeBits: 5 });
    await lab.createNamespace('bench');
    const node = await lab.addNode('footprint-node', '10.250.0.9');
    await lab.startCoild(node, values.c.split(' ').filter(Boolean));
    // One ADD/DEL first: coild starts its helpers on first use, so "idle" shows them too.
    const first = await lab.createPod(node, 'bench', 'first');
    if ((await lab.runCoil(node, 'ADD', first)).code !== 0 || (await lab.runCoil(node, 'DEL', first)).code !== 0) throw new Error(`first ADD/DEL failed\n${await lab.logs()}`);
    await lab.dropPod(first);
    await sleep(3_000);
    note('coild / idle (after 1 ADD+DEL)', await treeMem(node.coild!.pid!));
    const c = await churn(lab, node, { adds: Number(values.n), live: Number(values.l), parallel: Number(values.p) });
    await sleep(3_000);
    note(`coild / after ${c.adds} ADD + ${c.dels} DEL`, await treeMem(node.coild!.pid!));
    note('coil-controller / idle', await treeMem(lab.controllerPid!));
    const { proc: egress, watch, stopRelay } = await startEgress(lab, Number(values.e), values.r === 'node' ? 'node' : 'bun');
    await sleep(3_000);
    // `ip netns exec` execs the program: the pid is coil-egress itself.
    note(`coil-egress / ${values.e} client pods, on ${values.r}, ${watch}`, await treeMem(egress.pid!));
    await egress.stop({ graceMs: 3_000 });
    await stopRelay();
    const load = (await readFile('/proc/loadavg', 'utf8')).trim();
    process.stdout.write(`### footprint, ${new Date().toISOString()}, loadavg ${load}\n`
      + `churn: ${c.adds} ADD + ${c.dels} DEL, ≤ ${values.l} live, ${values.p} at once, ${(c.ms / 1000).toFixed(1)} s\n\n${table(rows)}\n`);
  } finally {
    await lab.stop();
  }
}

await runBench(FLAGS, main);
