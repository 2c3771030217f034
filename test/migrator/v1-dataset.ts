/**
 * A generated Coil v1 dataset (SYNTHETIC) shaped like a long-lived cluster: 20 pools of two
 * subnets each, listed in spec order opposite to etcd key order (10.1xx.128.0/24 before
 * 10.1xx.0.0/25), 200 nodes holding blocks in acquisition order, shuffled free lists, a few blocks
 * of nodes that no longer exist, and 5,000 pod addresses (every 50th in the legacy `ns/pod` form).
 *
 * The expected manifests are written here from the generator's own bookkeeping with string
 * templates, independently of src/migrator, so the suite checks the converter and not itself.
 */
import { prng } from '../support/prng.js';

/** What a generated dataset holds. */
export interface V1Dataset {
  /** `[full key, value]`, prefix included. */
  readonly entries: readonly (readonly [string, string])[];
  /** Nodes that exist in the cluster. */
  readonly nodes: readonly string[];
  /** The exact `dump` output. */
  readonly expectedYaml: string;
  readonly poolNames: readonly string[];
  /** Blocks held by nodes that no longer exist (skipped with a warning). */
  readonly goneBlocks: number;
  /** Reserved AddressBlocks in the output. */
  readonly reservedBlocks: number;
  /** Blocks per pool. */
  readonly blocksPerPool: number;
}

function shuffle<T>(items: T[], rnd: () => number): T[] {
  for (let i = items.length - 1; i > 0; i--) {
    const j = Math.floor(rnd() * (i + 1));
    [items[i], items[j]] = [items[j]!, items[i]!];
  }
  return items;
}

/** Generates the dataset under `prefix` (e.g. `/big/`). */
export function generateV1Dataset(prefix: string, options: { pools?: number; nodes?: number; addresses?: number; seed?: number } = {}): V1Dataset {
  const rnd = prng(options.seed ?? 42);
  const poolCount = options.pools ?? 20;
  const nodes = Array.from({ length: options.nodes ?? 200 }, (_, i) => `node-${String(i).padStart(3, '0')}`);
  const entries: [string, string][] = [];
  const poolNames: string[] = [];
  const held: { pool: string; index: number; cidr: string; node: string }[] = [];
  let goneBlocks = 0;
  for (let p = 0; p < poolCount; p++) {
    const name = `big-${String(p).padStart(2, '0')}`;
    poolNames.push(name);
    const second = 100 + p;
    // Spec order: the /24 (blocks 0–7) was created first, the /25 (blocks 8–11) added later.
    const subnets = [{ net: `10.${second}.128.0`, prefix: 24, blocks: 8, first: 0 }, { net: `10.${second}.0.0`, prefix: 25, blocks: 4, first: 8 }];
    entries.push([`${prefix}pool/${name}`, JSON.stringify({ subnets: subnets.map((s) => `${s.net}/${s.prefix}`), block_size: 5 })]);
    const freeIndex = Math.floor(rnd() * 12);
    for (const s of subnets) {
      entries.push([`${prefix}subnet/${s.net}`, '']);
      const [a, b, c] = s.net.split('.').map(Number) as [number, number, number];
      const free: string[] = [];
      const byNode = new Map<string, string[]>();
      for (const local of shuffle([...Array(s.blocks).keys()], rnd)) {
        const cidr = `${a}.${b}.${c}.${local * 32}/27`;
        const index = s.first + local;
        if (index === freeIndex) {
          free.push(cidr);
          continue;
        }
        // About one block in 48 is held by a node deleted without coil-controller noticing.
        const gone = rnd() < 1 / 48;
        const node = gone ? `gone-${goneBlocks}` : nodes[Math.floor(rnd() * nodes.length)]!;
        byNode.set(node, [...(byNode.get(node) ?? []), cidr]);
        held.push({ pool: name, index, cidr, node });
        if (gone) goneBlocks++;
      }
      const value = { free: free.length ? free : null, nodes: Object.fromEntries(byNode) };
      entries.push([`${prefix}block/${name}/${s.net}`, JSON.stringify(value)]);
    }
  }
  const slots = shuffle(held.flatMap((h) => Array.from({ length: 32 }, (_, offset) => ({ base: h.cidr.split('/')[0]!, offset }))), rnd);
  slots.slice(0, options.addresses ?? 5000).forEach((s, i) => {
    const value = i % 50 === 0
      ? `ns-${i % 7}/legacy-${i}`
      : JSON.stringify({ container_id: i.toString(16).padStart(12, '0'), namespace: `ns-${i % 7}`, pod: `pod-${i}`, created_at: '2020-09-30T02:11:43.520193Z' });
    entries.push([`${prefix}ip/${s.base}/${s.offset}`, value]);
  });

  const reserved = held.filter((h) => !h.node.startsWith('gone-')).sort((x, y) => (x.pool < y.pool ? -1 : x.pool > y.pool ? 1 : x.index - y.index));
  const pools = poolNames.map((name, p) => {
    const indices = reserved.filter((h) => h.pool === name).map((h) => h.index).join(',');
    const annotations = indices ? `  annotations:\n    coil.cybozu.com/v1-reserved-blocks: "${indices}"\n` : '';
    return `---\napiVersion: coil.cybozu.com/v2\nkind: AddressPool\nmetadata:\n${annotations}  finalizers:\n  - coil.cybozu.com\n  name: ${name}\nspec:\n` +
      `  blockSizeBits: 5\n  subnets:\n  - ipv4: 10.${100 + p}.128.0/24\n  - ipv4: 10.${100 + p}.0.0/25\n`;
  });
  const blocks = reserved.map((h) =>
    `---\napiVersion: coil.cybozu.com/v2\nindex: ${h.index}\nipv4: ${h.cidr}\nkind: AddressBlock\nmetadata:\n  finalizers:\n  - coil.cybozu.com\n  labels:\n` +
    `    coil.cybozu.com/node: ${h.node}\n    coil.cybozu.com/pool: ${h.pool}\n    coil.cybozu.com/reserved: "true"\n  name: ${h.pool}-${h.index}-v1\n`);
  return { entries: shuffle(entries, rnd), nodes, expectedYaml: [...blocks, ...pools].join(''), poolNames, goneBlocks, reservedBlocks: reserved.length, blocksPerPool: 12 };
}
