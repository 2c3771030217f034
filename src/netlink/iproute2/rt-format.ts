/**
 * {@link RtRequest}s written as iproute2 `ip -batch` lines, and {@link RtDump}s as `ip -json`
 * commands: the fallback executor's input when no rtnetlink backend is usable, and the oracle of
 * the equivalence tests (the same request applied by `ip` and by rtnetlink must leave the same
 * kernel state; the same dump read both ways must give the same entries). One direction only: requests become
 * text here; no text becomes a request anywhere.
 */
import type { RtDump, RtRequest } from '../rt-request.js';

/** One batch line as argv tokens without the leading `ip`. */
export type RequestLine = string[];

/** The `ip -batch` line meaning `r` (see rt-request.ts). */
export function formatRequest(r: RtRequest): RequestLine {
  switch (r.kind) {
    case 'link-add-veth': {
      const own = [...(r.mtu !== undefined ? ['mtu', String(r.mtu)] : []), ...(r.mac ? ['address', r.mac] : [])];
      const p = r.peer;
      const peer = [...(p.mtu !== undefined ? ['mtu', String(p.mtu)] : []), ...(p.mac ? ['address', p.mac] : []), ...(p.netnsPath ? ['netns', p.netnsPath] : [])];
      return ['link', 'add', r.name, ...own, 'type', 'veth', 'peer', 'name', p.name, ...peer];
    }
    case 'link-set':
      return ['link', 'set', 'dev', r.dev, ...(r.alias !== undefined ? ['alias', r.alias] : []), ...(r.mtu !== undefined ? ['mtu', String(r.mtu)] : []),
        ...(r.up === undefined ? [] : [r.up ? 'up' : 'down']), ...(r.group !== undefined ? ['group', String(r.group)] : []), ...(r.name !== undefined ? ['name', r.name] : [])];
    case 'link-add-external':
      return ['link', 'add', 'name', r.name, 'type', r.family === 4 ? 'ipip' : 'ip6tnl', 'external'];
    case 'fou-port':
      return ['fou', r.verb, 'port', String(r.port), 'ipproto', String(r.ipproto), ...(r.family === 6 ? ['-6'] : [])];
    case 'link-del':
      return r.dev !== undefined ? ['link', 'del', 'dev', r.dev] : ['link', 'del', 'group', String(r.group)];
    case 'link-add-fou': {
      const kind = r.remote.includes(':') ? ['type', 'ip6tnl', 'mode', 'ip6ip6', 'encaplimit', 'none'] : ['type', 'ipip'];
      return ['link', 'add', 'name', r.name, ...(r.mtu !== undefined ? ['mtu', String(r.mtu)] : []), ...kind, 'remote', r.remote, 'local', r.local,
        'ttl', String(r.ttl), 'encap', 'fou', 'encap-sport', r.encapSport === 0 ? 'auto' : String(r.encapSport), 'encap-dport', String(r.encapDport)];
    }
    case 'addr':
      return ['addr', r.verb, r.cidr, 'dev', r.dev, ...(r.scope ? ['scope', r.scope] : []), ...(r.isNoDad ? ['nodad'] : [])];
    case 'route':
      return ['route', r.verb, r.dst, ...(r.via ? ['via', r.via] : []), ...(r.dev !== undefined ? ['dev', r.dev] : []), ...(r.scope ? ['scope', r.scope] : []),
        ...(r.protocol !== undefined ? ['proto', String(r.protocol)] : []), ...(r.prefsrc !== undefined ? ['src', r.prefsrc] : []),
        ...(r.metric !== undefined ? ['metric', String(r.metric)] : []), ...(r.isOnlink ? ['onlink'] : []), ...(r.table !== undefined ? ['table', String(r.table)] : [])];
    case 'rule':
      // The family is the batch's (`ip -6 -batch -`): see IpRunner.apply.
      return ['rule', r.verb, 'prio', String(r.priority), ...(r.iif !== undefined ? ['iif', r.iif] : []), ...(r.dst !== undefined ? ['to', r.dst] : []),
        ...(r.fwmark !== undefined ? ['fwmark', r.fwmask !== undefined ? `${r.fwmark}/${r.fwmask}` : String(r.fwmark)] : []), 'lookup', String(r.table)];
  }
}

/**
 * The family an `ip -batch` of `requests` must be run with: 6 when they hold IPv6 rules (a rule
 * line names no family of its own), else undefined (iproute2's default).
 * @throws TypeError when they hold rules of both families (apply them apart)
 */
export function batchFamily(requests: readonly RtRequest[]): 6 | undefined {
  const families = new Set(requests.flatMap((r) => (r.kind === 'rule' ? [r.family] : [])));
  if (families.size > 1) throw new TypeError('IPv4 and IPv6 rules in one ip batch: apply them apart');
  return families.has(6) ? 6 : undefined;
}

/** The `ip -json` command meaning `d` (see rt-request.ts), and the family flag it needs. */
export function formatDump(d: RtDump): { args: string[]; family?: 4 | 6 } {
  const dev = (name: string | undefined): string[] => (name !== undefined ? ['dev', name] : []);
  switch (d.kind) {
    case 'links':
      return { args: ['-d', 'link', 'show', ...dev(d.dev)] };
    case 'addrs':
      return { args: ['addr', 'show', ...dev(d.dev)] };
    case 'routes':
      return { args: ['route', 'show', ...(d.table !== undefined ? ['table', String(d.table)] : []), ...dev(d.dev)], family: d.family };
    case 'rules':
      return { args: ['rule', 'show'], family: d.family };
    case 'route-get':
      return { args: ['route', 'get', d.address] };
    case 'fou-ports':
      return { args: ['fou', 'show'] };
  }
}
