/**
 * Blocks by address, for the IPAM checks (ipam-check.ts) at cluster scale: 100,000 blocks and
 * 150,000 Pod addresses per check (hack/bench/ipam-check.ts). Pure.
 */
import { networkAddress, tryParseCidr } from './cidr.js';
import { tryParseAddress, type IpAddress } from './ip-address.js';

/**
 * Finds blocks by address: blocks grouped by family and prefix length, each group a map from
 * network address to block, so a lookup costs one map access per distinct block size.
 */
/** What a block must have to be indexed: its CIDRs as AddressBlock text. */
export interface IndexedBlock {
  readonly ipv4?: string;
  readonly ipv6?: string;
}

export class BlockIndex<B extends IndexedBlock = IndexedBlock> {
  /** Per family and prefix length; IPv4 networks keyed as numbers (a bigint key costs a hash of its own). */
  private readonly groups: { family: 4 | 6; prefix: number; byNetwork: Map<bigint | number, B> }[] = [];
  /** Blocks whose CIDR does not parse (Coil writes an IPv4-mapped ipv6 as IPv4: issue 25 item 8). */
  readonly unparsed: B[] = [];

  constructor(blocks: readonly B[]) {
    const byId = new Map<string, (typeof this.groups)[number]>();
    for (const b of blocks) {
      for (const text of [b.ipv4, b.ipv6]) {
        if (text === undefined) continue;
        const c = tryParseCidr(text);
        if (!c) {
          this.unparsed.push(b);
          continue;
        }
        const id = `${c.family}/${c.prefix}`;
        let g = byId.get(id);
        if (!g) {
          byId.set(id, (g = { family: c.family, prefix: c.prefix, byNetwork: new Map() }));
          this.groups.push(g);
        }
        g.byNetwork.set(c.family === 4 ? Number(c.base) : c.base, b);
      }
    }
  }

  /** The blocks holding `address` (more than one only when blocks overlap). */
  lookup(address: string): B[] {
    const a = tryParseAddress(address);
    return a ? this.lookupParsed(a) : [];
  }

  /** {@link lookup} of a parsed address. */
  lookupParsed(a: IpAddress): B[] {
    if (a.family === 4) return this.lookupV4(Number(a.value));
    const out: B[] = [];
    for (const g of this.groups) {
      if (g.family !== 6) continue;
      const b = g.byNetwork.get(networkAddress(6, a.value, g.prefix));
      if (b) out.push(b);
    }
    return out;
  }

  /** {@link lookup} of an IPv4 address as a number (0 … 2^32 − 1), without bigints. */
  lookupV4(value: number): B[] {
    const out: B[] = [];
    for (const g of this.groups) {
      if (g.family !== 4) continue;
      const size = 2 ** (32 - g.prefix);
      const b = g.byNetwork.get(value - (value % size));
      if (b) out.push(b);
    }
    return out;
  }
}

/**
 * A canonical dotted quad (no leading zeros, each part ≤ 255, as a Pod's status holds it) as a
 * number; undefined for anything else, which then takes the general parser (Go's rules, and most
 * of the time of a check over 150,000 Pods: hack/bench/ipam-check.ts).
 */
export function parseV4(text: string): number | undefined {
  const m = /^(0|[1-9]\d{0,2})\.(0|[1-9]\d{0,2})\.(0|[1-9]\d{0,2})\.(0|[1-9]\d{0,2})$/.exec(text);
  if (!m) return undefined;
  const [a, b, c, d] = [Number(m[1]), Number(m[2]), Number(m[3]), Number(m[4])];
  if (a > 255 || b > 255 || c > 255 || d > 255) return undefined;
  return ((a * 256 + b) * 256 + c) * 256 + d;
}
