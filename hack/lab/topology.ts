/**
 * The lab's network: N "nodes", each a network namespace with eth0 on one L2 segment (a bridge
 * in its own namespace). Nothing is added to the machine's own (root) namespace, so labs with
 * different prefixes can run side by side with the same addresses.
 *
 *   <prefix>sw   bridge br0; with a router address (the real-node lab), 172.31.120.254 on br0
 *   <prefix>nK   eth0 172.31.120.1K/24 and fd31:120::1K/64; with a router, a default (IPv4) route
 *                through it
 *
 * The router does not forward (a new namespace has ip_forward off), so the default route sends
 * nothing out of the lab: it exists because a node's processes connect to Service ClusterIPs,
 * and the kernel needs a route for the ClusterIP before kube-proxy's DNAT rewrites it.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** Default prefix of every namespace the lab creates (and `down` removes). */
export const LAB_PREFIX = 'coillab-';
export const UNDERLAY_PREFIX_LEN = 24;
/** Address of the lab's router on the switch (real-node lab). */
export const ROUTER_IPV4 = '172.31.120.254';
/** Prefix length of the nodes' IPv6 addresses on the segment. */
export const UNDERLAY_PREFIX_LEN_V6 = 64;

/** Name of the switch namespace of the lab with `prefix`. */
export const switchNetns = (prefix = LAB_PREFIX): string => `${prefix}sw`;

/** One lab node. */
export interface LabNode {
  /** Node (and Kubernetes Node object) name, e.g. `coillab-n1`. */
  readonly name: string;
  /** Its network namespace name (same as `name`). */
  readonly netns: string;
  /** Path of the namespace, for nsenter and CNI_NETNS of node-level processes. */
  readonly netnsPath: string;
  /** Underlay IPv4 address (eth0), also the Node's InternalIP. */
  readonly ipv4: string;
  /**
   * Underlay IPv6 address (eth0, same segment), for BGP sessions that carry IPv6 blocks; absent for
   * a "node" that has none (the stand-in lab's pod-as-node).
   */
  readonly ipv6?: string;
}

/** Runs `ip` with arguments (throws with stderr on failure). */
export async function ip(args: readonly string[]): Promise<string> {
  try {
    return (await run('ip', [...args])).stdout;
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    throw new Error(`ip ${args.join(' ')}: ${e.stderr?.trim() || e.message}`, { cause: err });
  }
}

/** The node list for `count` nodes (pure). */
export function labNodes(count: number, prefix = LAB_PREFIX): LabNode[] {
  return Array.from({ length: count }, (_, i) => {
    const name = `${prefix}n${i + 1}`;
    return { name, netns: name, netnsPath: `/run/netns/${name}`, ipv4: `172.31.120.${11 + i}`, ipv6: `fd31:120::${11 + i}` };
  });
}

/** Options of {@link createTopology}. */
export interface TopologyOptions {
  /** Namespace prefix (default {@link LAB_PREFIX}). */
  readonly prefix?: string;
  /** Give the switch {@link ROUTER_IPV4} and every node a default route through it. */
  readonly router?: boolean;
}

/**
 * Creates the switch and the nodes.
 * @throws Error when a namespace of this prefix already exists (run `npm run lab -- down` first).
 */
export async function createTopology(nodes: readonly LabNode[], options: TopologyOptions = {}): Promise<void> {
  const prefix = options.prefix ?? LAB_PREFIX;
  const sw = switchNetns(prefix);
  const existing = await listLabNetns(prefix);
  if (existing.length > 0) throw new Error(`lab namespaces exist (${existing.join(', ')}): run npm run lab -- down`);
  await ip(['netns', 'add', sw]);
  await ip(['-n', sw, 'link', 'set', 'lo', 'up']);
  await ip(['-n', sw, 'link', 'add', 'br0', 'type', 'bridge']);
  await ip(['-n', sw, 'link', 'set', 'br0', 'up']);
  if (options.router) await ip(['-n', sw, 'addr', 'add', `${ROUTER_IPV4}/${UNDERLAY_PREFIX_LEN}`, 'dev', 'br0']);
  for (const [i, node] of nodes.entries()) {
    await ip(['netns', 'add', node.netns]);
    await ip(['-n', node.netns, 'link', 'set', 'lo', 'up']);
    await ip(['link', 'add', `${prefix}e${i}`, 'netns', node.netns, 'type', 'veth', 'peer', 'name', `n${i + 1}`, 'netns', sw]);
    await ip(['-n', node.netns, 'link', 'set', `${prefix}e${i}`, 'name', 'eth0']);
    await ip(['-n', node.netns, 'addr', 'add', `${node.ipv4}/${UNDERLAY_PREFIX_LEN}`, 'dev', 'eth0']);
    // nodad: usable at once (BIRD binds its BGP sessions to it), not tentative for a second or two.
    if (node.ipv6) await ip(['-n', node.netns, 'addr', 'add', `${node.ipv6}/${UNDERLAY_PREFIX_LEN_V6}`, 'dev', 'eth0', 'nodad']);
    await ip(['-n', node.netns, 'link', 'set', 'eth0', 'up']);
    await ip(['-n', sw, 'link', 'set', `n${i + 1}`, 'master', 'br0', 'up']);
    if (options.router) await ip(['-n', node.netns, 'route', 'add', 'default', 'via', ROUTER_IPV4]);
  }
}

/** Names of every namespace of the lab with `prefix`. */
export async function listLabNetns(prefix = LAB_PREFIX): Promise<string[]> {
  const out = await ip(['netns', 'list']).catch(() => '');
  return out.split('\n').map((l) => l.split(' ')[0]!).filter((n) => n.startsWith(prefix));
}

/** Deletes every namespace of the lab with `prefix` (their veths and routes go with them). */
export async function destroyTopology(prefix = LAB_PREFIX): Promise<void> {
  for (const ns of await listLabNetns(prefix)) await ip(['netns', 'del', ns]).catch(() => undefined);
}
