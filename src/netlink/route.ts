/** `ip route`: batch-line builders and reads. */
import type { BatchLine, RunTarget } from './iproute2/ip-runner.js';
import { NetlinkError } from './netlink-error.js';
import type { RtReader } from './rt-request.js';

/**
 * A route (RTM_NEWROUTE), the fields coil reads, named as `ip -json route show` / `route get` print
 * them so iproute2 serves as the oracle of the route dump.
 */
export interface Route {
  /** `default`, `10.0.0.0/24`, or a bare address for a host route (`10.0.0.5`, `fd00::5`). */
  dst: string;
  dev?: string;
  gateway?: string;
  /** Numeric protocols print as strings (`"30"`); well-known ones by name (`"kernel"`). */
  protocol?: string;
  scope?: string;
  table?: string;
  type?: string;
  prefsrc?: string;
  /** RTA_PRIORITY; IPv6 routes always have one (1024 unless set). */
  metric?: number;
  /** rtm_flags by name (`onlink`, `linkdown`, ...), as ip prints them: always present, often empty. */
  flags?: string[];
}

/** Route protocols by number (iproute2's built-in names, lib/rt_names.c; others print as numbers). */
export const ROUTE_PROTOCOLS: Readonly<Record<number, string>> = {
  0: 'unspec', 1: 'redirect', 2: 'kernel', 3: 'boot', 4: 'static', 8: 'gated', 9: 'ra', 10: 'mrt', 11: 'zebra', 12: 'bird',
  13: 'dnrouted', 14: 'xorp', 15: 'ntk', 16: 'dhcp', 18: 'keepalived', 42: 'babel', 99: 'openr', 186: 'bgp', 187: 'isis',
  188: 'ospf', 189: 'rip', 192: 'eigrp',
};

/**
 * The number of a route's `protocol` as {@link Route} holds it (a name of {@link ROUTE_PROTOCOLS}
 * or a number in text). @returns undefined for a name ip would not print
 */
export function routeProtocolNumber(protocol: string): number | undefined {
  if (/^\d+$/.test(protocol)) return Number(protocol);
  const hit = Object.entries(ROUTE_PROTOCOLS).find(([, name]) => name === protocol);
  return hit === undefined ? undefined : Number(hit[0]);
}

/** Options of {@link route.add}, {@link route.replace} and {@link route.del}. */
export interface RouteOptions {
  /** Destination CIDR string (`10.0.0.5/32`, `fd00::/64`) or `default` (IPv4 only; use `::/0`). */
  dst: string;
  dev?: string;
  /** Gateway address (not CIDR). */
  via?: string;
  /** Routing table id; undefined = main. */
  table?: number;
  /** Route protocol (author) id, e.g. coil's 30. */
  protocol?: number;
  scope?: 'link' | 'host' | 'global';
}

function routeArgs(verb: 'add' | 'replace' | 'del', o: RouteOptions): BatchLine {
  return ['route', verb, o.dst, ...(o.via ? ['via', o.via] : []), ...(o.dev ? ['dev', o.dev] : []),
    ...(o.scope ? ['scope', o.scope] : []), ...(o.protocol !== undefined ? ['proto', String(o.protocol)] : []),
    ...(o.table !== undefined ? ['table', String(o.table)] : [])];
}

/**
 * Builders of `ip route` batch lines. The family follows from `dst`, because `ip -batch` lines
 * cannot carry `-6` (use `::/0`, not `default`, for an IPv6 default route).
 */
export const route = {
  /** `route add …`: fails with EEXIST when the route is there. */
  add: (o: RouteOptions): BatchLine => routeArgs('add', o),
  /** `route replace …`: idempotent add. */
  replace: (o: RouteOptions): BatchLine => routeArgs('replace', o),
  /** `route del …`: fails with ESRCH when the route is missing. */
  del: (o: RouteOptions): BatchLine => routeArgs('del', o),
} as const;

/**
 * Reads one family's routes of table `table` (default main), as `ip -<family> -json route show
 * [table T] [dev D]` prints them: an rtnetlink dump through a NetlinkExecutor, or that command
 * through an IpRunner.
 * @throws NetlinkError; a table never created reads as `[]`
 */
export function readRoutes(kernel: RtReader, target: Pick<RunTarget, 'netns'> & { family: 4 | 6; table?: number; dev?: string }): Promise<Route[]> {
  const { table, dev, family, netns } = target;
  return kernel.dump<Route>({ kind: 'routes', family, ...(table !== undefined ? { table } : {}), ...(dev ? { dev } : {}) }, { netns });
}

/** Reads both families' routes of `table` (two reads, in parallel). */
export async function readRoutesBothFamilies(kernel: RtReader, target: Pick<RunTarget, 'netns'> & { table?: number; dev?: string }): Promise<Route[]> {
  const [v4, v6] = await Promise.all([readRoutes(kernel, { ...target, family: 4 }), readRoutes(kernel, { ...target, family: 6 })]);
  return [...v4, ...v6];
}

/**
 * The route the kernel would use for `address`, as `ip -json route get <address>` prints it: an
 * RTM_GETROUTE through a NetlinkExecutor, or that command through an IpRunner.
 * @returns undefined when the destination is unreachable (no route)
 * @throws NetlinkError on any other failure
 */
export async function routeGet(kernel: RtReader, address: string, target: Pick<RunTarget, 'netns'> = {}): Promise<Route | undefined> {
  try {
    const routes = await kernel.dump<Route>({ kind: 'route-get', address }, { netns: target.netns });
    return routes[0];
  } catch (err) {
    if (err instanceof NetlinkError && /unreachable/i.test(err.stderr)) return undefined;
    throw err;
  }
}
