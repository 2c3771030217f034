/**
 * API request accounting for the scale benchmark (hack/bench/scale.ts), from both ends:
 * - the client side: an {@link ApiTransport} that counts every call it sends by verb and resource
 *   (the verbs of the apiserver's `apiserver_request_total`: LIST, WATCH, GET, CREATE, UPDATE,
 *   PATCH, DELETE), so the simulated nodes' own cost is known apart from everything else;
 * - the server side: `apiserver_request_total` and the open watches
 *   (`apiserver_longrunning_requests{verb="WATCH"}`) from the apiserver's /metrics.
 */
import { ApiTransport, type ApiRequest } from '../../src/runtime/api-transport.js';
import type { ControlPlane } from '../../test/envtest/control-plane.js';

/** `VERB resource[/subresource]` → count. */
export type Counts = Map<string, number>;

/**
 * The verb and resource of a REST call as the apiserver names them (pure).
 * @example callKey('GET', '/apis/coil.cybozu.com/v2/addressblocks', { watch: true }) === 'WATCH addressblocks'
 */
export function callKey(method: string, path: string, query: ApiRequest['query'] = {}): string {
  const segs = path.split('?')[0]!.split('/').filter(Boolean);
  // /api/v1/... or /apis/<group>/<version>/...
  const rest = segs[0] === 'api' ? segs.slice(2) : segs.slice(3);
  if (rest[0] === 'namespaces' && rest.length >= 3) rest.splice(0, 2);
  const [resource = '?', name, sub] = rest;
  const collection = name === undefined;
  let verb: string;
  if (method === 'GET') verb = query?.watch ? 'WATCH' : collection ? 'LIST' : 'GET';
  else verb = { POST: 'CREATE', PUT: 'UPDATE', PATCH: 'PATCH', DELETE: collection ? 'DELETECOLLECTION' : 'DELETE' }[method] ?? method;
  return `${verb} ${resource}${sub ? `/${sub}` : ''}`;
}

/** Adds one to `key` of `counts`. */
function bump(counts: Counts, key: string, by = 1): void {
  counts.set(key, (counts.get(key) ?? 0) + by);
}

/** An ApiTransport counting its calls into a shared {@link Counts} (one per fleet of nodes). */
export class CountingTransport extends ApiTransport {
  constructor(kubeConfig: ConstructorParameters<typeof ApiTransport>[0], private readonly counts: Counts) {
    super(kubeConfig);
  }

  override request<T>(req: ApiRequest): Promise<T> {
    bump(this.counts, callKey(req.method, req.path, req.query));
    return super.request(req);
  }

  override watch(...args: Parameters<ApiTransport['watch']>): Promise<void> {
    bump(this.counts, callKey('GET', args[0].path, { ...args[0].query, watch: true }));
    return super.watch(...args);
  }
}

/** `after − before`, per key, leaving out zeros. */
export function diff(after: Counts, before: Counts): Counts {
  const out: Counts = new Map();
  for (const [k, v] of after) if (v - (before.get(k) ?? 0) !== 0) out.set(k, v - (before.get(k) ?? 0));
  return out;
}

/** Sum of the values of `counts` whose key matches `re`. */
export function total(counts: Counts, re: RegExp = /./): number {
  let n = 0;
  for (const [k, v] of counts) if (re.test(k)) n += v;
  return n;
}

/** What the apiserver's /metrics says: requests by `VERB resource[/sub]`, and watches open. */
export interface ServerCounts {
  readonly requests: Counts;
  readonly watches: number;
  /**
   * `apiserver_terminated_watchers_total` by resource: watchers the apiserver's watch cache closed
   * because they did not take their events in time (each one re-watches, or relists after a 410).
   */
  readonly terminated: Counts;
  /** `apiserver_request_duration_seconds` buckets: `VERB resource[/sub]` → upper bound (s) → cumulative count. */
  readonly durations: Map<string, Map<number, number>>;
}

/**
 * The `q` quantile (s) of the request durations between two scrapes, over the keys matching `re`,
 * as the upper bound of the bucket holding it (Prometheus' buckets: coarse above 1 s). NaN when none.
 */
export function durationQuantile(after: ServerCounts, before: ServerCounts, re: RegExp, q: number): number {
  const sum = new Map<number, number>();
  for (const [key, buckets] of after.durations) {
    if (!re.test(key)) continue;
    const prev = before.durations.get(key);
    for (const [le, n] of buckets) sum.set(le, (sum.get(le) ?? 0) + n - (prev?.get(le) ?? 0));
  }
  const les = [...sum.keys()].sort((a, b) => a - b);
  const count = sum.get(Infinity) ?? 0;
  if (count === 0) return NaN;
  for (const le of les) if (sum.get(le)! >= q * count) return le;
  return Infinity;
}

/** Scrapes the apiserver's /metrics (admin credentials). */
export async function serverCounts(cp: ControlPlane): Promise<ServerCounts> {
  const res = await cp.request('GET', '/metrics');
  if (res.status !== 200) throw new Error(`apiserver /metrics: ${res.status}`);
  const requests: Counts = new Map();
  const durations = new Map<string, Map<number, number>>();
  const terminated: Counts = new Map();
  let watches = 0;
  const labelsOf = (text: string) => Object.fromEntries([...text.matchAll(/(\w+)="([^"]*)"/g)].map((x) => [x[1]!, x[2]!]));
  for (const line of res.body.split('\n')) {
    if (line.startsWith('apiserver_terminated_watchers_total{')) {
      const m = /resource="([^"]*)"\} (\S+)$/.exec(line);
      if (m) bump(terminated, m[1]!, Number(m[2]));
      continue;
    }
    if (line.startsWith('apiserver_request_duration_seconds_bucket{')) {
      const m = /^apiserver_request_duration_seconds_bucket\{(.*)\} (\S+)$/.exec(line);
      if (!m) continue;
      const l = labelsOf(m[1]!);
      const key = `${l.verb} ${l.resource}${l.subresource ? `/${l.subresource}` : ''}`;
      const le = l.le === '+Inf' ? Infinity : Number(l.le);
      const b = durations.get(key) ?? new Map<number, number>();
      b.set(le, (b.get(le) ?? 0) + Number(m[2]));
      durations.set(key, b);
      continue;
    }
    if (line.startsWith('apiserver_request_total{')) {
      const m = /^apiserver_request_total\{(.*)\} (\S+)$/.exec(line);
      if (!m) continue;
      const labels = Object.fromEntries([...m[1]!.matchAll(/(\w+)="([^"]*)"/g)].map((x) => [x[1], x[2]]));
      bump(requests, `${labels.verb} ${labels.resource}${labels.subresource ? `/${labels.subresource}` : ''}`, Number(m[2]));
    } else if (line.startsWith('apiserver_longrunning_requests{') && line.includes('verb="WATCH"')) {
      watches += Number(line.slice(line.lastIndexOf(' ') + 1));
    }
  }
  return { requests, watches, terminated, durations };
}

/** `counts` as `VERB resource n/s` lines, busiest first, those above `minPerSec`. */
export function rateLines(counts: Counts, seconds: number, minPerSec = 0.05, perNode?: number): string[] {
  return [...counts].sort((a, b) => b[1] - a[1])
    .filter(([, v]) => v / seconds >= minPerSec)
    .map(([k, v]) => `${k.padEnd(36)} ${(v / seconds).toFixed(2).padStart(9)}/s${perNode ? `  ${(v / seconds / perNode).toFixed(4).padStart(8)}/s per node` : ''}`);
}
