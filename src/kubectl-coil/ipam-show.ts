/**
 * `kubectl coil ipam show`: per AddressPool its size, blocks and addresses in use;
 * `--show-blocks` every AddressBlock with its node and coild's used/free/cooling counts;
 * `--ip ADDR` the block, node and pod of one address.
 *
 * Addresses in use are counted from Pod IPs (Coil keeps no per-address record in the API); with
 * `--show-blocks` or `--ip`, coild's view of each node adds what only coild knows (addresses
 * cooling, allocations without a Pod).
 */
import { BlockIndex } from '../ipam/block-index.js';
import { poolUsage, type NodeViewFacts, type PodFacts } from '../ipam/ipam-check.js';
import { blockFacts, podFacts, poolFacts } from '../api/v2/ipam-facts.js';
import { canonicalAddress, tryParseAddress } from '../ipam/ip-address.js';
import { ConfigError } from '../runtime/flags.js';
import type { ClusterRead } from './cluster.js';
import type { Output } from './flags.js';
import { formatObject, kubectlTable, isStructured } from './output.js';

/** One pool's line. Sizes are strings: an IPv6 pool exceeds 2^53 addresses. */
export interface PoolLine {
  pool: string;
  subnets: string[];
  blockSizeBits: number;
  size: string;
  maxBlocks: string;
  blocks: number;
  used: number;
  free: string;
  percent: number;
}

/** One block's line. used/free/cooling from coild, `undefined` when its coild did not answer. */
export interface BlockLine {
  block: string;
  pool: string;
  node: string;
  ipv4?: string;
  ipv6?: string;
  podIPs: number;
  used?: number;
  free?: number;
  cooling?: number;
  state: string;
}

/** The owner of one address. */
export interface IpLine {
  address: string;
  block?: string;
  pool?: string;
  node?: string;
  pods: string[];
  /** coild's allocation of it on the block's node, when read. */
  allocation?: { containerId: string; ifname: string; pod?: string };
}

/** Pools, in name order. Used: addresses of the pool's first family held by Pods. */
export function poolLines(read: Pick<ClusterRead, 'pools' | 'blocks' | 'pods'>): PoolLine[] {
  const pools = read.pools.map(poolFacts);
  const usage = poolUsage(pools, read.blocks.map(blockFacts));
  const index = new BlockIndex(read.blocks.map(blockFacts));
  const pods = read.pods.map(podFacts).filter((p): p is PodFacts => p !== undefined);
  const used = new Map<string, number>();
  for (const p of pods) {
    for (const ip of p.ips) {
      for (const b of index.lookup(ip)) {
        const pool = pools.find((x) => x.ref.name === b.pool);
        const first = pool?.subnets[0]?.ipv4 !== undefined ? 4 : 6;
        if (tryParseAddress(ip)?.family === first) used.set(b.pool, (used.get(b.pool) ?? 0) + 1);
      }
    }
  }
  return usage.map((u) => {
    const p = pools.find((x) => x.ref.name === u.pool)!;
    const n = used.get(u.pool) ?? 0;
    return {
      pool: u.pool, subnets: p.subnets.map((s) => [s.ipv4, s.ipv6].filter(Boolean).join(',')), blockSizeBits: p.blockSizeBits,
      size: u.size.toString(), maxBlocks: u.maxBlocks.toString(), blocks: u.blocks, used: n, free: (u.size - BigInt(n)).toString(), percent: u.percent,
    };
  }).sort((a, b) => a.pool.localeCompare(b.pool));
}

/** Blocks, by pool then index. */
export function blockLines(read: Pick<ClusterRead, 'blocks' | 'pods' | 'views'>): BlockLine[] {
  const facts = read.blocks.map(blockFacts);
  const index = new BlockIndex(facts);
  const podIPs = new Map<string, number>();
  for (const p of read.pods.map(podFacts)) {
    for (const ip of p?.ips ?? []) for (const b of index.lookup(ip)) podIPs.set(b.ref.name, (podIPs.get(b.ref.name) ?? 0) + 1);
  }
  const views = new Map<string, NodeViewFacts>((read.views ?? []).map((v) => [v.node, v]));
  return facts.sort((a, b) => a.pool.localeCompare(b.pool) || a.index - b.index).map((b) => {
    const seen = views.get(b.node)?.blocks?.find((x) => x.name === b.ref.name);
    const unreadable = views.get(b.node)?.unreadableBlocks?.some((u) => u.name === b.ref.name);
    const state = b.deletingSinceMs !== undefined ? 'deleting' : unreadable ? 'unreadable' : !views.has(b.node) ? 'coild not read' : seen ? 'ok' : 'not held by coild';
    return {
      block: b.ref.name, pool: b.pool, node: b.node, ...(b.ipv4 && { ipv4: b.ipv4 }), ...(b.ipv6 && { ipv6: b.ipv6 }), podIPs: podIPs.get(b.ref.name) ?? 0,
      ...(seen && { used: seen.used, free: seen.free, cooling: seen.cooling }), state,
    };
  });
}

/** @throws ConfigError when `text` is not an IP address */
export function ipLine(read: Pick<ClusterRead, 'blocks' | 'pods' | 'views'>, text: string): IpLine {
  if (!tryParseAddress(text)) throw new ConfigError(`--ip: ${JSON.stringify(text)} is not an IP address`);
  const address = canonicalAddress(text);
  const [b] = new BlockIndex(read.blocks.map(blockFacts)).lookup(address);
  const pods = read.pods.map(podFacts).filter((p): p is PodFacts => p?.ips.includes(address) ?? false);
  const alloc = b && read.views?.find((v) => v.node === b.node)?.allocations.find((a) => [a.ipv4, a.ipv6].some((x) => x !== undefined && canonicalAddress(x) === address));
  return {
    address, ...(b && { block: b.ref.name, pool: b.pool, node: b.node }), pods: pods.map((p) => `${p.ref.namespace}/${p.ref.name}`),
    ...(alloc && { allocation: { containerId: alloc.containerId, ifname: alloc.ifname, ...(alloc.podName && { pod: `${alloc.podNamespace}/${alloc.podName}` }) } }),
  };
}

/** What `ipam show` prints. */
export function formatShow(read: ClusterRead, o: { output: Output; showBlocks: boolean; ip?: string | undefined }): string {
  if (o.ip !== undefined) {
    const l = ipLine(read, o.ip);
    if (isStructured(o.output)) return formatObject(l, o.output);
    const head = ['ADDRESS', 'BLOCK', 'POOL', 'NODE', 'POD', ...(o.output === 'wide' ? ['CONTAINER', 'IFNAME'] : [])];
    const row = [l.address, l.block ?? '<none>', l.pool ?? '<none>', l.node ?? '<none>', l.pods.join(',') || (l.allocation?.pod ? `${l.allocation.pod} (coild only)` : '<none>'),
      ...(o.output === 'wide' ? [l.allocation?.containerId.slice(0, 12) ?? '-', l.allocation?.ifname ?? '-'] : [])];
    return kubectlTable([head, row]);
  }
  const pools = poolLines(read);
  const blocks = o.showBlocks ? blockLines(read) : undefined;
  if (isStructured(o.output)) return formatObject({ pools, ...(blocks && { blocks }), ...(read.unreachable?.length && { coildUnreachable: read.unreachable }) }, o.output);
  const wide = o.output === 'wide';
  let text = kubectlTable([
    ['POOL', ...(wide ? ['SUBNETS', 'BLOCK-SIZE'] : []), 'SIZE', 'BLOCKS', 'MAX-BLOCKS', 'BLOCKS-%', 'USED', 'FREE'],
    ...pools.map((p) => [p.pool, ...(wide ? [p.subnets.join(' '), String(2 ** p.blockSizeBits)] : []), p.size, String(p.blocks), p.maxBlocks, p.percent.toFixed(1), String(p.used), p.free]),
  ]);
  if (blocks) {
    const n = (v: number | undefined): string => (v === undefined ? '?' : String(v));
    text += '\n' + kubectlTable([
      ['BLOCK', 'POOL', 'NODE', 'IPV4', ...(wide ? ['IPV6', 'POD-IPS'] : []), 'USED', 'FREE', 'COOLING', 'STATE'],
      ...blocks.map((b) => [b.block, b.pool, b.node, b.ipv4 ?? '-', ...(wide ? [b.ipv6 ?? '-', String(b.podIPs)] : []), n(b.used), n(b.free), n(b.cooling), b.state]),
    ]);
    for (const u of read.unreachable ?? []) text += `warning: coild of node ${u.node} not read: ${u.reason}\n`;
  }
  return text;
}
