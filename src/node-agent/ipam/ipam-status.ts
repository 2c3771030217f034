/**
 * `coild ipam-status`: fetches `GET /ipam` from a running coild's health port and prints pools,
 * blocks and allocations as tables — the `coil ipam status` of the issue, kept out of the Bun CNI
 * executable, whose startup budget must not pay for an HTTP client and table formatting.
 */
import { get as httpGet } from 'node:http';
import { get as httpsGet } from 'node:https';
import { formatTable } from '../../runtime/text-table.js';
import type { IpamSnapshot } from './introspection.js';

/** Fixed-width text table, columns two spaces apart; the first row is the header. */
const table = (rows: readonly (readonly string[])[]): string => formatTable(rows, 2);

/** The snapshot as three tables. */
export function formatIpamStatus(s: IpamSnapshot): string {
  const pools = table([
    ['POOL', 'BLOCKS', 'USED', 'FREE', 'COOLING', 'REQUEST'],
    ...s.pools.map((p) => [p.name, String(p.blocks), String(p.used), String(p.free), String(p.cooling), p.requestPending ? 'pending' : '-']),
  ]);
  const blocks = table([
    ['BLOCK', 'POOL', 'IPV4', 'IPV6', 'SIZE', 'USED', 'FREE', 'COOLING', 'STATE'],
    ...s.blocks.map((b) => [
      b.name, b.pool, b.ipv4 ?? '-', b.ipv6 ?? '-', String(b.size), String(b.used), String(b.free), String(b.cooling),
      b.reserved ? 'reserved' : b.releasing ? 'releasing' : b.deleting ? 'deleting' : b.emptySince ? `empty since ${b.emptySince}` : 'in use',
    ]),
  ]);
  const allocs = table([
    ['NAMESPACE', 'POD', 'CONTAINER', 'IFNAME', 'IPV4', 'IPV6', 'BLOCK'],
    ...s.allocations.map((a) => [a.podNamespace ?? '?', a.podName ?? '?', a.containerId.slice(0, 12), a.ifname, a.ipv4 ?? '-', a.ipv6 ?? '-', a.block]),
  ]);
  const unreadable = (s.unreadableBlocks ?? []).length === 0 ? '' : `\n${table([
    ['UNREADABLE BLOCK', 'POOL', 'IPV4', 'IPV6', 'REASON'],
    ...(s.unreadableBlocks ?? []).map((b) => [b.name, b.pool, b.ipv4 ?? '-', b.ipv6 ?? '-', b.reason]),
  ])}\n`;
  const orphans = (s.orphans ?? []).length === 0 ? '' : `\n${table([
    ['ADDRESS WITHOUT BLOCK', 'NAMESPACE', 'POD', 'CONTAINER', 'BLOCK', 'STATE', 'MESSAGE'],
    ...(s.orphans ?? []).map((o) => [[o.ipv4, o.ipv6].filter(Boolean).join(','), o.podNamespace ?? '?', o.podName ?? '?', o.containerId.slice(0, 12), o.block ?? '-', o.state, o.message ?? '']),
  ])}\n`;
  return `node ${s.node} at ${s.time}\n\n${pools}\n\n${blocks}\n\n${allocs}\n${unreadable}${orphans}`;
}

/**
 * Fetches and formats the status of the coild at `url` (e.g. `http://127.0.0.1:9385/ipam`); an
 * `https:` URL is asked with `token` as bearer token, without verifying coild's self-signed
 * certificate (docs/observability.md#access).
 * @throws Error when coild does not answer 200
 */
export async function fetchIpamStatus(url: string, timeoutMs = 5_000, token?: string): Promise<string> {
  const { status, body } = await new Promise<{ status: number; body: string }>((resolve, reject) => {
    const get = url.startsWith('https:') ? httpsGet : httpGet;
    const req = get(url, { timeout: timeoutMs, rejectUnauthorized: false, headers: token ? { authorization: `Bearer ${token}` } : {} }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
    });
    req.on('timeout', () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
    req.on('error', reject);
  });
  if (status !== 200) throw new Error(`${url}: HTTP ${status} ${body.trim()}`);
  return formatIpamStatus(JSON.parse(body) as IpamSnapshot);
}
