/**
 * Coil v1 data → Coil v2 objects: one AddressPool per v1 pool and one reserved AddressBlock per
 * block a still-existing node holds. Pure: the caller reads etcd and lists Nodes.
 *
 * Decisions (each against the original's quirks, docs/migration-from-coil-v1.md#its-quirks):
 * - Every object carries the finalizer `coil.cybozu.com`, as if the webhooks and the controller had
 *   made it. On a pool it is what the mutating webhook adds; on a block it is what the controller's
 *   GC (src/reconcilers/addressblock-gc.ts) requires before it releases the blocks of a vanished
 *   node, and what coild and `replace` remove before deleting.
 * - No ownerReference to the pool: its UID does not exist before the YAML is applied. The
 *   controller counts a pool's blocks, and holds the pool's finalizer, by the `coil.cybozu.com/pool`
 *   label (pool-manager.ts, addresspool.ts), so those work without it. What is lost is the
 *   "owned block created/deleted → re-sync the pool" trigger (addresspool.ts `owns`). Both ends make
 *   up for it: each pool carries {@link ANN_V1_RESERVED}, whose change on apply re-syncs a pool that
 *   already exists, and `replace` rewrites it after releasing blocks.
 * - Output order is sorted (blocks by pool, then index; pools by name) so runs can be diffed, and
 *   the reserved blocks come BEFORE the pools (see {@link manifests}).
 *
 * @see docs/migration-from-coil-v1.md#from-v1-to-v2, docs/migration-from-coil-v1.md#edge-cases,
 *   docs/migration-from-coil-v1.md#the-test-data-set
 */
import { addressBlockName, type AddressBlock } from '../api/v2/addressblock.js';
import type { AddressPool } from '../api/v2/addresspool.js';
import { findPoolOverlaps, validateAddressPoolSpec } from '../api/v2/addresspool-validation.js';
import { formatFieldError } from '../api/v2/field-error.js';
import { API_VERSION, DEFAULT_POOL, FIN_COIL, LABEL_NODE, LABEL_POOL, LABEL_RESERVED } from '../api/v2/keys.js';
import { formatCidr, tryParseCidr } from '../ipam/cidr.js';
import { PoolLayout } from '../ipam/pool.js';
import type { Problem, V1Data, V1Pool } from './v1-model.js';

/**
 * Pool annotation (ours) listing the indices of its reserved v1 blocks, e.g. `"0,1,2,4"`. Besides
 * informing, its value changes whenever the reserved set does, so applying `data.yaml` over an
 * existing pool is a pool update that makes a running controller re-read the pool's blocks.
 */
export const ANN_V1_RESERVED = 'coil.cybozu.com/v1-reserved-blocks';

/** The v2 objects of one v1 data set, plus everything worth telling the operator. */
export interface Conversion {
  /** Sorted by name. */
  readonly pools: readonly AddressPool[];
  /** Sorted by pool name, then index. */
  readonly blocks: readonly AddressBlock[];
  /**
   * Non-default pool names: the namespaces to annotate with `coil.cybozu.com/pool`
   * (docs/migration-from-coil-v1.md#pools-named-after-namespaces-become-annotations).
   */
  readonly namespacePools: readonly string[];
  /** Parse problems of the input followed by conversion problems; any `error` means "do not apply". */
  readonly problems: readonly Problem[];
}

/** A DNS-1123 subdomain, what an AddressPool name must be (Kubernetes API conventions, "Names"). */
export function isDns1123Subdomain(name: string): boolean {
  return name.length <= 253 && /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/.test(name);
}

/**
 * A valid label value (node names become the `coil.cybozu.com/node` label;
 * docs/migration-from-coil-v1.md#node-names-as-label-values).
 */
export function isLabelValue(value: string): boolean {
  return value.length <= 63 && /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/.test(value);
}

/**
 * Converts parsed v1 data. Blocks of nodes not in `existingNodes` are skipped with a warning (the
 * v2 GC would delete them anyway, docs/migration-from-coil-v1.md#blocks-of-nodes-that-are-gone);
 * blocks of a pool with no `pool/` key likewise (as the original did). Errors: invalid pool name, a
 * subnet that is not canonical IPv4, a spec v2 rejects, overlapping pools, a block key for a subnet
 * not in its pool, a block in no subnet of its pool or of the wrong size, a block held twice, a
 * node name that cannot be a label value. Never throws.
 * @param existingNodes names of the Nodes in the cluster now
 */
export function convertV1(data: V1Data, existingNodes: ReadonlySet<string>): Conversion {
  const problems: Problem[] = [...data.problems];
  const error = (subject: string, message: string): void => void problems.push({ severity: 'error', subject, message });
  const warn = (subject: string, message: string): void => void problems.push({ severity: 'warning', subject, message });

  const pools: AddressPool[] = [];
  const layouts = new Map<string, PoolLayout>();
  for (const v1 of [...data.pools.values()].sort((a, b) => compare(a.name, b.name))) {
    const pool = convertPool(v1, (m) => error(`pool/${v1.name}`, m));
    if (pool === undefined) continue;
    pools.push(pool);
    layouts.set(v1.name, PoolLayout.fromSpec(pool.spec));
  }
  for (const pool of pools) {
    const others = pools.map((p) => ({ name: p.metadata!.name!, spec: p.spec }));
    // Report each overlapping pair once, from the pool that sorts first.
    const later = others.filter((o) => compare(o.name, pool.metadata!.name!) > 0);
    for (const e of findPoolOverlaps(pool.metadata!.name!, pool.spec, later)) error(`pool/${pool.metadata!.name}`, formatFieldError(e));
  }

  const blocks: AddressBlock[] = [];
  const seen = new Map<string, string>();
  for (const assignment of data.blocks) {
    const v1 = data.pools.get(assignment.pool);
    if (v1 === undefined) {
      warn(assignment.key, `pool ${JSON.stringify(assignment.pool)} has no pool/ key; its blocks are skipped`);
      continue;
    }
    const layout = layouts.get(v1.name);
    if (layout === undefined) continue; // the pool itself is already reported
    if (!v1.subnets.some((s) => s.split('/')[0] === assignment.subnetAddress)) {
      error(assignment.key, `subnet ${assignment.subnetAddress} is not a subnet of pool ${v1.name} (${v1.subnets.join(', ')})`);
      continue;
    }
    for (const [node, cidrs] of assignment.nodes) {
      for (const cidr of cidrs) {
        const subject = `${assignment.key} nodes[${node}] ${cidr}`;
        const index = blockIndex(layout, cidr);
        if (index === undefined) {
          error(subject, `not a /${32 - v1.blockSize} block inside a subnet of pool ${v1.name}`);
          continue;
        }
        const holder = seen.get(formatKey(v1.name, index));
        if (holder !== undefined) {
          error(subject, `block is also held by node ${holder}`);
          continue;
        }
        seen.set(formatKey(v1.name, index), node);
        if (!existingNodes.has(node)) {
          warn(subject, `node ${node} no longer exists; block skipped (its addresses become allocatable in v2)`);
          continue;
        }
        if (!isLabelValue(node)) {
          error(subject, `node name ${JSON.stringify(node)} cannot be a label value`);
          continue;
        }
        blocks.push(reservedBlock(v1.name, index, cidr, node));
      }
    }
  }
  blocks.sort((a, b) => compare(a.metadata!.labels![LABEL_POOL]!, b.metadata!.labels![LABEL_POOL]!) || a.index - b.index);
  for (const pool of pools) {
    const indices = blocks.filter((b) => b.metadata!.labels![LABEL_POOL] === pool.metadata!.name).map((b) => b.index);
    if (indices.length > 0) pool.metadata!.annotations = { [ANN_V1_RESERVED]: indices.join(',') };
  }
  reportUnreservedAddresses(data, blocks, warn);
  const namespacePools = pools.map((p) => p.metadata!.name!).filter((n) => n !== DEFAULT_POOL);
  return { pools, blocks, namespacePools, problems };
}

/**
 * The objects in output order: every reserved AddressBlock, then every AddressPool. The original
 * printed pools first; that is unsafe when `data.yaml` is applied while the v2 controller already
 * runs: the controller builds a pool's taken indices when it reconciles the pool, and a block
 * without an ownerReference created after that does not make it re-sync, so the block's index could
 * be handed out again (it happened while writing test/migrator/dump.test.ts). With blocks first, the pool's first
 * reconcile already finds them in the cache; a pool that already exists is re-synced by the change
 * of its {@link ANN_V1_RESERVED} annotation. (Applying before the controller starts, the documented
 * procedure, is safe in either order.)
 * @see docs/migration-from-coil-v1.md#the-procedure (steps 4–6),
 *   docs/migration-from-coil-v1.md#its-quirks
 */
export function manifests(c: Conversion): (AddressBlock | AddressPool)[] {
  return [...c.blocks, ...c.pools];
}

/** v1 pool → AddressPool (blockSizeBits = block_size; subnets in v1 order as `{ipv4}`), or undefined after reporting. */
function convertPool(v1: V1Pool, error: (message: string) => void): AddressPool | undefined {
  if (!isDns1123Subdomain(v1.name)) {
    error(`pool name ${JSON.stringify(v1.name)} is not a valid Kubernetes name (DNS-1123 subdomain); such a pool matches no namespace, so it was unused in v1: delete it from etcd or rename it`);
    return undefined;
  }
  let ok = true;
  for (const subnet of v1.subnets) {
    const cidr = tryParseCidr(subnet);
    if (cidr === undefined || cidr.family !== 4) {
      error(`subnet ${JSON.stringify(subnet)} is not an IPv4 CIDR (v1 never supported IPv6 arithmetic; docs/migration-from-coil-v1.md, "IPv6 in v1")`);
      ok = false;
    } else if (formatCidr(cidr) !== subnet) {
      error(`subnet ${JSON.stringify(subnet)} is not in canonical network form (expected ${formatCidr(cidr)})`);
      ok = false;
    }
  }
  if (!ok) return undefined;
  const spec = { blockSizeBits: v1.blockSize, subnets: v1.subnets.map((ipv4) => ({ ipv4 })) };
  const invalid = validateAddressPoolSpec(spec);
  if (invalid.length > 0) {
    for (const e of invalid) error(`v2 would reject the pool: ${formatFieldError(e)}`);
    return undefined;
  }
  return { apiVersion: API_VERSION, kind: 'AddressPool', metadata: { name: v1.name, finalizers: [FIN_COIL] }, spec };
}

/**
 * Warns, once per block, about v1 pod addresses that will not be covered by a reserved block (the
 * block's node is gone, or the block is on a free list): v2 may hand those addresses out again,
 * which is safe only if the pods are gone
 * (docs/migration-from-coil-v1.md#blocks-of-nodes-that-are-gone). The `ip/` data is used for
 * nothing else.
 */
function reportUnreservedAddresses(data: V1Data, reserved: readonly AddressBlock[], warn: (subject: string, message: string) => void): void {
  const covered = new Set(reserved.map((b) => b.ipv4!.split('/')[0]!));
  const holders = new Map<string, string>();
  for (const a of data.blocks) for (const [node, cidrs] of a.nodes) for (const c of cidrs) holders.set(c.split('/')[0]!, `${a.key} nodes[${node}] ${c}`);
  const byBlock = new Map<string, string[]>();
  for (const a of data.addresses) {
    if (covered.has(a.blockAddress)) continue;
    byBlock.set(a.blockAddress, [...(byBlock.get(a.blockAddress) ?? []), `${a.namespace}/${a.pod}`]);
  }
  for (const [blockAddress, pods] of [...byBlock].sort(([x], [y]) => compare(x, y))) {
    const where = holders.get(blockAddress) ?? `ip/${blockAddress}/`;
    const sample = pods.slice(0, 3).join(', ') + (pods.length > 3 ? ', …' : '');
    const why = holders.has(blockAddress) ? 'is not reserved' : 'is held by no node';
    warn(where, `the block ${why}, yet ${pods.length} v1 address(es) in it are recorded (${sample}): v2 may hand them out again; make sure those pods are gone`);
  }
}

/** Index of `cidr` in the pool as the controller counts (PoolLayout), or undefined when it is not exactly one block. */
function blockIndex(layout: PoolLayout, cidr: string): number | undefined {
  const parsed = tryParseCidr(cidr);
  if (parsed === undefined || parsed.family !== 4 || formatCidr(parsed) !== cidr) return undefined;
  const index = layout.indexOfBlock({ ipv4: cidr });
  return index === undefined ? undefined : Number(index);
}

/**
 * The reserved AddressBlock `<pool>-<index>-v1`
 * (docs/migration-from-coil-v1.md#node-held-blocks-become-reserved-addressblocks).
 */
function reservedBlock(pool: string, index: number, ipv4: string, node: string): AddressBlock {
  return {
    apiVersion: API_VERSION,
    kind: 'AddressBlock',
    metadata: {
      name: `${addressBlockName(pool, index)}-v1`,
      labels: { [LABEL_NODE]: node, [LABEL_POOL]: pool, [LABEL_RESERVED]: 'true' },
      finalizers: [FIN_COIL],
    },
    index,
    ipv4,
  };
}

function formatKey(pool: string, index: number): string {
  return `${pool}\u0000${index}`;
}

/** Code-point order, independent of the locale, so output is byte-identical everywhere. */
function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
