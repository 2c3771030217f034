/**
 * The Coil v1 data in etcd, parsed: pools, per-subnet block assignments and per-pod address
 * keys. Keys arrive relative to the etcd prefix (`pool/default`, not `/coil/pool/default`).
 *
 * Pure: no I/O. Nothing is thrown for bad data; every key that cannot be read becomes a
 * {@link Problem} naming it, so one malformed value never hides the rest of the report.
 *
 * @see docs/migration-from-coil-v1.md#keys, docs/migration-from-coil-v1.md#values
 */

/** One v1 pool (`pool/<name>`). `subnets` in v1 order (creation, then `add-subnet`), as written. */
export interface V1Pool {
  readonly name: string;
  readonly subnets: readonly string[];
  /** v1 `block_size`: a block holds 2^blockSize addresses. */
  readonly blockSize: number;
}

/** One `block/<pool>/<subnet-net-ip>` value: which blocks of that subnet each node holds. */
export interface V1BlockAssignment {
  /** The key, relative to the prefix, for messages. */
  readonly key: string;
  readonly pool: string;
  /** Network address of the subnet, without prefix length (docs/migration-from-coil-v1.md#keys). */
  readonly subnetAddress: string;
  /** Block CIDRs not held by anyone; `null` in etcd reads as empty. */
  readonly free: readonly string[];
  /** Node name → block CIDRs it holds, in acquisition order. */
  readonly nodes: ReadonlyMap<string, readonly string[]>;
}

/** One allocated pod address (`ip/<block-net-ip>/<offset>`), in either value format. */
export interface V1Address {
  readonly key: string;
  readonly blockAddress: string;
  /** Decimal, 0-based offset in the block; offset 0 is a real pod address. */
  readonly offset: number;
  readonly namespace: string;
  readonly pod: string;
  /** True for the pre-v1.1.0 `ns/pod` text value (no container ID, no time). */
  readonly legacy: boolean;
}

/**
 * Something wrong in the input. `error` stops the conversion (the YAML would be wrong or
 * rejected); `warning` is reported and the item is skipped or merely noted.
 */
export interface Problem {
  readonly severity: 'error' | 'warning';
  /** What the problem is about: an etcd key (relative to the prefix), a pool or a block. */
  readonly subject: string;
  readonly message: string;
}

/** Everything read from one v1 etcd prefix. Maps keep etcd key order (lexicographic). */
export interface V1Data {
  readonly pools: ReadonlyMap<string, V1Pool>;
  readonly blocks: readonly V1BlockAssignment[];
  readonly addresses: readonly V1Address[];
  readonly problems: readonly Problem[];
}

/** One etcd key/value, the key relative to the prefix. */
export interface V1Entry {
  readonly key: string;
  readonly value: string;
}

/**
 * Parses every key under the prefix. Unknown key kinds and unreadable values become problems;
 * `subnet/` markers are accepted and ignored (v1's "network address taken" guard, not needed).
 * Malformed `ip/` values are warnings only: the conversion never needs them
 * (docs/migration-from-coil-v1.md#per-pod-addresses-are-not-carried-over).
 * @see docs/migration-from-coil-v1.md#keys, docs/migration-from-coil-v1.md#values
 */
export function parseV1Entries(entries: readonly V1Entry[]): V1Data {
  const pools = new Map<string, V1Pool>();
  const blocks: V1BlockAssignment[] = [];
  const addresses: V1Address[] = [];
  const problems: Problem[] = [];
  const error = (subject: string, message: string): void => void problems.push({ severity: 'error', subject, message });
  const sorted = [...entries].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  for (const { key, value } of sorted) {
    const parts = key.split('/');
    const kind = parts[0];
    if (kind === 'pool' && parts.length === 2 && parts[1]) {
      const pool = parsePool(parts[1], value);
      if (typeof pool === 'string') error(key, pool);
      else pools.set(pool.name, pool);
    } else if (kind === 'subnet' && parts.length === 2) {
      continue;
    } else if (kind === 'block' && parts.length === 3 && parts[1] && parts[2]) {
      const block = parseBlock(key, parts[1], parts[2], value);
      if (typeof block === 'string') error(key, block);
      else blocks.push(block);
    } else if (kind === 'ip' && parts.length === 3 && parts[1] && parts[2]) {
      const address = parseAddressValue(key, parts[1], parts[2], value);
      if (typeof address === 'string') problems.push({ severity: 'warning', subject: key, message: address });
      else addresses.push(address);
    } else {
      problems.push({ severity: 'warning', subject: key, message: 'not a Coil v1 key (expected pool/, subnet/, block/ or ip/); ignored' });
    }
  }
  return { pools, blocks, addresses, problems };
}

/** `{"subnets":[…],"block_size":n}` → pool, or the reason it is malformed. */
function parsePool(name: string, value: string): V1Pool | string {
  const v = parseJsonObject(value);
  if (typeof v === 'string') return v;
  const { subnets, block_size: blockSize } = v;
  if (!Array.isArray(subnets) || subnets.length === 0 || !subnets.every((s) => typeof s === 'string')) {
    return `malformed pool value: "subnets" must be a non-empty array of CIDR strings: ${clip(value)}`;
  }
  if (typeof blockSize !== 'number' || !Number.isInteger(blockSize) || blockSize < 0) {
    return `malformed pool value: "block_size" must be a non-negative integer: ${clip(value)}`;
  }
  return { name, subnets: subnets as string[], blockSize };
}

/** `{"free":[…]|null,"nodes":{node:[…]}}` → assignment, or the reason it is malformed. */
function parseBlock(key: string, pool: string, subnetAddress: string, value: string): V1BlockAssignment | string {
  const v = parseJsonObject(value);
  if (typeof v === 'string') return v;
  const free = v.free ?? [];
  if (!isStringArray(free)) return `malformed block value: "free" must be null or an array of CIDR strings: ${clip(value)}`;
  const nodesValue = v.nodes ?? {};
  if (typeof nodesValue !== 'object' || Array.isArray(nodesValue) || nodesValue === null) {
    return `malformed block value: "nodes" must be an object of node name → CIDR strings: ${clip(value)}`;
  }
  const nodes = new Map<string, readonly string[]>();
  for (const [node, list] of Object.entries(nodesValue)) {
    if (!isStringArray(list)) return `malformed block value: nodes[${JSON.stringify(node)}] must be an array of CIDR strings: ${clip(value)}`;
    nodes.set(node, list);
  }
  return { key, pool, subnetAddress, free, nodes };
}

/**
 * Reads an `ip/` value: JSON `{container_id, namespace, pod, created_at}` since v1.1.0, or the
 * text `ns/pod` before (docs/migration-from-coil-v1.md#address-values).
 */
function parseAddressValue(key: string, blockAddress: string, offsetText: string, value: string): V1Address | string {
  if (!/^(0|[1-9][0-9]*)$/.test(offsetText)) return `malformed ip key: offset ${JSON.stringify(offsetText)} is not a decimal number`;
  const offset = Number(offsetText);
  if (value.trimStart().startsWith('{')) {
    const v = parseJsonObject(value);
    if (typeof v === 'string') return v;
    if (typeof v.namespace !== 'string' || typeof v.pod !== 'string' || !v.namespace || !v.pod) {
      return `malformed ip value: "namespace" and "pod" must be non-empty strings: ${clip(value)}`;
    }
    return { key, blockAddress, offset, namespace: v.namespace, pod: v.pod, legacy: false };
  }
  const m = /^([^/\s]+)\/([^/\s]+)$/.exec(value);
  if (!m) return `malformed ip value: neither JSON nor the legacy "namespace/pod" text: ${clip(value)}`;
  return { key, blockAddress, offset, namespace: m[1]!, pod: m[2]!, legacy: true };
}

function parseJsonObject(value: string): Record<string, unknown> | string {
  let v: unknown;
  try {
    v = JSON.parse(value);
  } catch (e) {
    return `malformed value: not JSON (${(e as Error).message}): ${clip(value)}`;
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return `malformed value: not a JSON object: ${clip(value)}`;
  return v as Record<string, unknown>;
}

function isStringArray(v: unknown): v is string[] {
  return Array.isArray(v) && v.every((s) => typeof s === 'string');
}

/** Keeps messages readable when a value is huge or binary. */
function clip(value: string): string {
  const text = JSON.stringify(value.length > 120 ? `${value.slice(0, 120)}…` : value);
  return text;
}
