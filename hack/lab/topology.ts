/**
 * The lab's network: N "nodes", each a network namespace with eth0 on one L2 segment (a bridge
 * in its own namespace), as ../shared/bench/bgp-lab.sh wires them. Nothing is added to the
 * machine's own (root) namespace.
 *
 *   coillab-sw   bridge br0
 *   coillab-nK   eth0 172.31.120.1K/24, forwarding on
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** Prefix of every namespace the lab creates (and `down` removes). */
export const LAB_PREFIX = 'coillab-';
export const SWITCH_NETNS = `${LAB_PREFIX}sw`;
export const UNDERLAY_PREFIX_LEN = 24;

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
export function labNodes(count: number): LabNode[] {
  return Array.from({ length: count }, (_, i) => {
    const name = `${LAB_PREFIX}n${i + 1}`;
    return { name, netns: name, netnsPath: `/run/netns/${name}`, ipv4: `172.31.120.${11 + i}` };
  });
}

/**
 * Creates the switch and the nodes.
 * @throws Error when a lab namespace already exists (run `npm run lab -- down` first).
 */
export async function createTopology(nodes: readonly LabNode[]): Promise<void> {
  const existing = await listLabNetns();
  if (existing.length > 0) throw new Error(`lab namespaces exist (${existing.join(', ')}): run npm run lab -- down`);
  await ip(['netns', 'add', SWITCH_NETNS]);
  await ip(['-n', SWITCH_NETNS, 'link', 'set', 'lo', 'up']);
  await ip(['-n', SWITCH_NETNS, 'link', 'add', 'br0', 'type', 'bridge']);
  await ip(['-n', SWITCH_NETNS, 'link', 'set', 'br0', 'up']);
  for (const [i, node] of nodes.entries()) {
    await ip(['netns', 'add', node.netns]);
    await ip(['-n', node.netns, 'link', 'set', 'lo', 'up']);
    await ip(['link', 'add', `${LAB_PREFIX}e${i}`, 'netns', node.netns, 'type', 'veth', 'peer', 'name', `n${i + 1}`, 'netns', SWITCH_NETNS]);
    await ip(['-n', node.netns, 'link', 'set', `${LAB_PREFIX}e${i}`, 'name', 'eth0']);
    await ip(['-n', node.netns, 'addr', 'add', `${node.ipv4}/${UNDERLAY_PREFIX_LEN}`, 'dev', 'eth0']);
    await ip(['-n', node.netns, 'link', 'set', 'eth0', 'up']);
    await ip(['-n', SWITCH_NETNS, 'link', 'set', `n${i + 1}`, 'master', 'br0', 'up']);
  }
}

/** Names of every namespace the lab made (by prefix). */
export async function listLabNetns(): Promise<string[]> {
  const out = await ip(['netns', 'list']).catch(() => '');
  return out.split('\n').map((l) => l.split(' ')[0]!).filter((n) => n.startsWith(LAB_PREFIX));
}

/** Deletes every lab namespace (their veths and routes go with them). */
export async function destroyTopology(): Promise<void> {
  for (const ns of await listLabNetns()) await ip(['netns', 'del', ns]).catch(() => undefined);
}
