/**
 * Benchmark instrument (never in the image): preloaded into a program on the Bun runtime
 * (`BUN_BE_BUN=1 coil --preload dist/hack/bench/memory-probe.js <script>`), it writes where that
 * process's memory is, by cause, to `$COIL_MEMORY_PROBE_OUT.<n>.json`: once as it loads (before
 * the program's first line: the runtime's floor) and on every SIGUSR2 (hack/bench/memory-breakdown.ts
 * sends them).
 *
 * A report holds, from the kernel: /proc/self/smaps summed by kind — the runtime executable's
 * pages (file-backed, shared with every process running it), other files, anonymous executable
 * pages (JavaScriptCore's JIT code), and the rest of the anonymous pages (JSC's heap, mimalloc,
 * stacks); and from the runtime: `bun:jsc` heapStats (JS heap size and capacity, extra memory
 * such as ArrayBuffers and strings held outside the heap, object counts by type), memoryUsage and
 * `process.memoryUsage()` as found, then the heap's figures and object counts again after a full
 * GC (`Bun.gc(true)`: what is live). The GC is the probe's: the program itself is left as it was
 * (the kernel's figures are read first).
 */
import { createRequire } from 'node:module';
import { readFileSync, writeFileSync } from 'node:fs';

/** The parts of `bun:jsc` read here. */
interface Jsc {
  heapStats(): { heapSize: number; heapCapacity: number; extraMemorySize: number; objectCount: number; protectedObjectCount: number; objectTypeCounts: Record<string, number>; protectedObjectTypeCounts: Record<string, number> };
  memoryUsage(): { current: number; peak: number; currentCommit: number; peakCommit: number; pageFaults: number };
  /** JSC's "GCDebugging" heap snapshot: nodes, edges, and the roots with the reason each is one. */
  generateHeapSnapshotForDebugging(): unknown;
}

/** smaps of this process summed by kind, KiB. Pure over the smaps text. */
export function smapsByKind(smaps: string, executable: string): Record<string, { rss: number; anon: number; maps: number }> {
  const out: Record<string, { rss: number; anon: number; maps: number }> = {};
  let kind = '';
  for (const line of smaps.split('\n')) {
    const head = /^[0-9a-f]+-[0-9a-f]+ (\S+) \S+ \S+ \S+\s*(.*)$/.exec(line);
    if (head) {
      const [perms, name] = [head[1]!, head[2] ?? ''];
      kind = name === executable ? 'runtime executable (file)'
        : name.startsWith('/') ? 'other files'
          : name === '[stack]' ? 'main stack'
            : name === '[heap]' ? 'brk heap (glibc malloc)'
              : name.startsWith('[') ? name
                : perms.includes('x') ? 'anonymous executable (JIT code)' : 'anonymous (JS heap, mimalloc, thread stacks)';
      out[kind] ??= { rss: 0, anon: 0, maps: 0 };
      out[kind]!.maps++;
      continue;
    }
    const kv = /^(Rss|Anonymous):\s+(\d+) kB/.exec(line);
    if (kv && out[kind]) out[kind]![kv[1] === 'Rss' ? 'rss' : 'anon'] += Number(kv[2]);
  }
  return out;
}

const out = process.env.COIL_MEMORY_PROBE_OUT;
/** Bun's heap snapshot, "Inspector" format: `nodes` is [id, size, class index, flags] per object. */
interface HeapSnapshot { nodes: number[]; nodeClassNames: string[] }
const bun = (globalThis as { Bun?: { gc?: (full: boolean) => void; generateHeapSnapshot?: () => HeapSnapshot } }).Bun;

/** Bytes and counts of a heap snapshot's objects by class, largest first. Pure. */
export function bytesByClass(s: HeapSnapshot): [string, { bytes: number; count: number }][] {
  const by = new Map<string, { bytes: number; count: number }>();
  for (let i = 0; i + 3 < s.nodes.length; i += 4) {
    const name = s.nodeClassNames[s.nodes[i + 2]!] ?? '?';
    const e = by.get(name) ?? { bytes: 0, count: 0 };
    e.bytes += s.nodes[i + 1]!;
    e.count++;
    by.set(name, e);
  }
  return [...by].sort((a, b) => b[1].bytes - a[1].bytes);
}
if (out && bun) {
  const jsc = createRequire(import.meta.url)('bun:jsc') as Jsc;
  let n = 0;
  const afterGc = (): unknown => {
    // Three full collections: one leaves objects that only the next finds unreachable (finalizers,
    // weak maps), and a first reading after idle came out ≈ 3.6 MB above the next one.
    for (let i = 0; i < 3; i++) bun.gc?.(true);
    const h = jsc.heapStats();
    return {
      heap: { heapSize: h.heapSize, heapCapacity: h.heapCapacity, extraMemorySize: h.extraMemorySize, objectCount: h.objectCount },
      objectTypes: Object.fromEntries(Object.entries(h.objectTypeCounts).sort((a, b) => b[1] - a[1]).slice(0, 40)),
      // The snapshot's object sizes by class (the JS heap's bytes; the snapshot's own garbage is
      // made after the figures above were read).
      bytesByClass: bun.generateHeapSnapshot ? Object.fromEntries(bytesByClass(bun.generateHeapSnapshot()).slice(0, 40)) : undefined,
    };
  };
  const report = (why: string): void => {
    const status = readFileSync('/proc/self/status', 'utf8');
    const kb = (k: string): number => Number(new RegExp(`^${k}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN);
    const h = jsc.heapStats();
    const types = Object.entries(h.objectTypeCounts).sort((a, b) => b[1] - a[1]);
    writeFileSync(`${out}.${n++}.json`, JSON.stringify({
      why, at: new Date().toISOString(), vmRssKb: kb('VmRSS'), vmHwmKb: kb('VmHWM'), rssAnonKb: kb('RssAnon'), rssFileKb: kb('RssFile'),
      smaps: smapsByKind(readFileSync('/proc/self/smaps', 'utf8'), process.execPath),
      heap: { heapSize: h.heapSize, heapCapacity: h.heapCapacity, extraMemorySize: h.extraMemorySize, objectCount: h.objectCount, protectedObjectCount: h.protectedObjectCount },
      objectTypes: Object.fromEntries(types.slice(0, 40)),
      jscMemory: jsc.memoryUsage(),
      process: process.memoryUsage(),
      afterGc: afterGc(),
    }));
  };
  report('preload: the runtime and this probe, before the program');
  // With COIL_MEMORY_PROBE_SNAPSHOT=1 each report also writes the whole heap snapshot (after the
  // report's GCs), for finding what holds objects that grow (hack/bench/memory-breakdown.ts --snapshots).
  if (process.env.COIL_MEMORY_PROBE_SNAPSHOT === '1') {
    process.on('SIGUSR2', () => writeFileSync(`${out}.${n - 1}.heapsnapshot`, JSON.stringify(jsc.generateHeapSnapshotForDebugging())));
  }
  process.on('SIGUSR2', () => report('SIGUSR2'));
}
