/**
 * The kube-apiserver's own account of its CPU, for the benchmarks (hack/bench/scale.ts): a Go CPU
 * profile taken from its `/debug/pprof/profile` (served while `--profiling` is on, the
 * apiserver's default, to clients allowed the non-resource URL `/debug/pprof/*`: the admin's
 * system:masters here), read with `go tool pprof -top` and summed into a few groups of where the
 * time goes. Needs the Go toolchain for the reading only (/usr/local/go/bin/go or `go` on PATH):
 * without it the profile is kept and a note says so.
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { request } from 'node:https';
import type { KubeConfig } from '@kubernetes/client-node';

/**
 * Groups of the apiserver's work, first match wins, by the leaf function of each sample (`flat`)
 * and, for the groups with entry points (none calling another), the time spent under them (`cum`). Order matters: the watch cache
 * encodes through the serializer, so a serializer leaf counts as encoding, not as the cache.
 */
export const PROFILE_GROUPS: readonly { readonly name: string; readonly leaf: RegExp; readonly under?: RegExp }[] = [
  { name: 'GC and allocation', leaf: /^(gcWriteBarrier|internal\/runtime\/gc\/|runtime\.(gc|mallocgc|scanobject|scanblock|markroot|greyobject|findObject|heapBits|heapSetType|sweep|bgsweep|bgscavenge|mark|memclr|nextFreeFast|(\(\*mspan\))|(\(\*mheap\))|(\(\*mcache\))|(\(\*gcWork\))|wbBuf|bulkBarrier|typePointers|spanOf|pageIndexOf|newobject|makeslice|growslice|tryDeferToSpanScan|scanSpan))/i, under: /^runtime\.gcBgMarkWorker$/ },
  { name: 'JSON encoding/decoding', leaf: /(encoding\/json|sigs\.k8s\.io\/json|json-iterator|modern-go|serializer\/json|runtime\.DefaultUnstructuredConverter|unstructured|strconv\.|unicode\/utf8)/, under: /serializer\/json\.\(\*Serializer\)\.(Encode|doEncode)$/ },
  { name: 'protobuf', leaf: /(protobuf|gogo\/|serializer\/protobuf|^k8s\.io\/(api|apimachinery)\/.*\.(Marshal|MarshalTo|MarshalToSizedBuffer|Unmarshal|Size)$)/ },
  { name: 'watch cache: dispatch and filtering', leaf: /k8s\.io\/apiserver\/pkg\/storage\/cacher|storage\.(SelectionPredicate|Everything)|labels\.|fields\./, under: /cacher\.\(\*Cacher\)\.dispatchEvents$/ },
  { name: 'etcd client (gRPC)', leaf: /(go\.etcd\.io|google\.golang\.org\/grpc|storage\/etcd3)/, under: /etcd3\.\(\*store\)\.(Create|Get|GetList|Delete|GuaranteedUpdate|Count|Stats|ReadinessCheck)$/ },
  { name: 'TLS, HTTP/2 and sockets', leaf: /^(crypto\/|vendor\/golang\.org\/x\/crypto|golang\.org\/x\/crypto|golang\.org\/x\/net\/http2|net\/http|net\.|internal\/poll|internal\/runtime\/syscall|syscall\.|bufio\.|io\.|compress\/|_?p256|nistec)/ },
  { name: 'Go runtime: scheduler, maps, hashing, locks, timers', leaf: /^(runtime\.|sync\.|sync\/atomic|internal\/|maps\.|time\.)/ },
  { name: 'other (handlers, admission, authn/authz, conversion, reflection, metrics, …)', leaf: /./ },
];

/** One function's line of `go tool pprof -top`. */
export interface ProfileLine {
  readonly flatS: number;
  readonly cumS: number;
  readonly name: string;
}

/** The go binary to read profiles with, or undefined. */
export function goBinary(): string | undefined {
  if (existsSync('/usr/local/go/bin/go')) return '/usr/local/go/bin/go';
  for (const dir of (process.env.PATH ?? '').split(':')) if (dir && existsSync(`${dir}/go`)) return `${dir}/go`;
  return undefined;
}

/**
 * TLS options of a direct connection to the apiserver of `kubeConfig` with its current user's
 * client certificate (the admin kubeconfig's embedded, base64 CA, certificate and key).
 */
export function adminTlsOptions(kubeConfig: KubeConfig): { ca?: Buffer; cert?: Buffer; key?: Buffer } {
  const cluster = kubeConfig.getCurrentCluster()!;
  const user = kubeConfig.getCurrentUser()!;
  const b64 = (s: string | undefined) => (s ? Buffer.from(s, 'base64') : undefined);
  const [ca, cert, key] = [b64(cluster.caData), b64(user.certData), b64(user.keyData)];
  return { ...(ca && { ca }), ...(cert && { cert }), ...(key && { key }) };
}

/**
 * Takes a CPU profile of `seconds` from the apiserver of `kubeConfig` (admin credentials) and
 * writes it to `file`.
 * @throws on a network error or a status other than 200 (e.g. 403 without access, 404 with `--profiling=false`)
 */
export function takeCpuProfile(kubeConfig: KubeConfig, seconds: number, file: string): Promise<void> {
  const url = new URL(`/debug/pprof/profile?seconds=${Math.max(1, Math.round(seconds))}`, kubeConfig.getCurrentCluster()!.server);
  return new Promise((resolve, reject) => {
    const req = request(url, { ...adminTlsOptions(kubeConfig), timeout: (seconds + 60) * 1000 }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('error', reject);
      res.on('end', () => {
        const body = Buffer.concat(chunks);
        if (res.statusCode !== 200) reject(new Error(`GET ${url.pathname}${url.search}: ${res.statusCode} ${body.toString('utf8').slice(0, 200)}`));
        else writeFile(file, body).then(resolve, reject);
      });
    });
    req.on('timeout', () => req.destroy(new Error(`GET ${url.pathname}: no answer in ${seconds + 60} s`)));
    req.on('error', reject);
    req.end();
  });
}

/** Every function of the profile (`go tool pprof -top`, all nodes), with the profile's total sample time. */
export function readProfile(go: string, file: string): Promise<{ totalS: number; lines: ProfileLine[] }> {
  return new Promise((resolve, reject) => {
    execFile(go, ['tool', 'pprof', '-top', '-nodecount=1000000', file], { maxBuffer: 64 * 1024 * 1024 }, (err, stdout, stderr) => {
      if (err) return reject(new Error(`go tool pprof: ${err.message} ${stderr.slice(0, 300)}`));
      // "Duration: 10.01s, Total samples = 3.20s (31.97%)"
      const total = /Total samples = ([\d.]+)(ms|s)/.exec(stdout);
      const seconds = (v: string, unit: string) => Number(v) / (unit === 'ms' ? 1000 : unit === 'us' || unit === 'µs' ? 1e6 : unit === 'min' ? 1 / 60 : 1);
      const lines: ProfileLine[] = [];
      // "     0.50s 15.62% 15.62%      0.80s 25.00%  runtime.mallocgc"
      // "         0     0%     0%      270ms 36.99%  net/http.HandlerFunc.ServeHTTP (partial-inline)"
      for (const m of stdout.matchAll(/^\s*([\d.]+)(ms|s|us|µs|min)?\s+[\d.]+%\s+[\d.]+%\s+([\d.]+)(ms|s|us|µs|min)?\s+[\d.]+%\s+(.+)$/gm)) {
        lines.push({ flatS: seconds(m[1]!, m[2] ?? 's'), cumS: seconds(m[3]!, m[4] ?? 's'), name: m[5]!.replace(/\s*\((partial-)?inline\)$/, '').trim() });
      }
      resolve({ totalS: total ? seconds(total[1]!, total[2]!) : lines.reduce((a, l) => a + l.flatS, 0), lines });
    });
  });
}

/**
 * The profile summed by {@link PROFILE_GROUPS}: per group the share of the samples whose leaf is
 * its (`flat`) and, where the group has an entry point, the share spent under it (`cum`, which
 * overlaps other groups: the watch cache's dispatch includes its encoding).
 */
export function groupProfile(p: { totalS: number; lines: readonly ProfileLine[] }): { name: string; flatS: number; flatPct: number; cumPct?: number; top: string[] }[] {
  const out = PROFILE_GROUPS.map((g) => ({ name: g.name, flatS: 0, flatPct: 0, cumPct: undefined as number | undefined, top: [] as string[] }));
  for (const l of p.lines) {
    const i = PROFILE_GROUPS.findIndex((g) => g.leaf.test(l.name));
    const g = out[i]!;
    g.flatS += l.flatS;
    if (g.top.length < 3 && l.flatS > 0) g.top.push(`${shortName(l.name)} ${pct(l.flatS, p.totalS)}`);
  }
  for (const [i, g] of PROFILE_GROUPS.entries()) {
    if (!g.under) continue;
    // The entry points of one group do not call each other: their times add up.
    const cum = p.lines.filter((l) => g.under!.test(l.name)).reduce((a, l) => a + l.cumS, 0);
    out[i]!.cumPct = (100 * cum) / (p.totalS || 1);
  }
  for (const g of out) g.flatPct = (100 * g.flatS) / (p.totalS || 1);
  return out.filter((g) => g.flatS > 0 || (g.cumPct ?? 0) > 0);
}

function pct(v: number, total: number): string {
  return `${((100 * v) / (total || 1)).toFixed(1)}%`;
}

/** `k8s.io/apiserver/pkg/storage/cacher.(*Cacher).dispatchEvent` → `cacher.(*Cacher).dispatchEvent`. */
function shortName(name: string): string {
  return name.replace(/^.*\//, '');
}
