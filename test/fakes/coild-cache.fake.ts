/**
 * FakeCoildCache and FakeBlockClient: just enough of the runtime's Cache and Client for unit tests
 * of NodeIpam and BlockRequester without an API server. Objects are kept per kind; `emit()`
 * delivers an informer event to the handlers, and `put()` can change the store silently, as a
 * lagging or reordered informer would.
 */
import type { KubernetesObject } from '@kubernetes/client-node';
import type { AddressBlock } from '../../src/api/v2/addressblock.js';
import type { BlockRequest } from '../../src/api/v2/blockrequest.js';
import { INDEX_BLOCK_BY_REQUEST, LABEL_NODE, LABEL_POOL, LABEL_REQUEST } from '../../src/api/v2/keys.js';
import type { Cache } from '../../src/runtime/cache.js';
import type { Client } from '../../src/runtime/client.js';
import type { InformerEvent } from '../../src/runtime/informer.js';
import { kindId, type KindDescriptor } from '../../src/runtime/kind.js';
import { blockRequestUidOf } from '../../src/node-agent/ipam/block-request.js';

type Handler = (e: InformerEvent<KubernetesObject>) => void;

/** The Cache methods coild's IPAM uses, over plain maps. */
export class FakeCoildCache {
  private readonly stores = new Map<string, Map<string, KubernetesObject>>();
  private readonly handlers = new Map<string, Set<Handler>>();

  /** This object, typed as the runtime's Cache. */
  asCache(): Cache {
    return this as unknown as Cache;
  }

  /** Stores `obj` without telling anyone (a lagging informer). */
  put(kind: KindDescriptor, obj: KubernetesObject): void {
    this.store(kind).set(obj.metadata!.name!, obj);
  }

  /** Stores or deletes `obj` and tells the handlers. */
  emit(kind: KindDescriptor, type: 'ADDED' | 'MODIFIED' | 'DELETED', obj: KubernetesObject): void {
    if (type === 'DELETED') this.store(kind).delete(obj.metadata!.name!);
    else this.put(kind, obj);
    for (const h of this.handlers.get(kindId(kind)) ?? []) h({ type, object: obj });
  }

  get<T extends KubernetesObject>(kind: KindDescriptor<T>, key: { name: string } | string): T | undefined {
    return this.store(kind).get(typeof key === 'string' ? key : key.name) as T | undefined;
  }

  list<T extends KubernetesObject>(kind: KindDescriptor<T>): T[] {
    return [...this.store(kind).values()] as T[];
  }

  byIndex<T extends KubernetesObject>(kind: KindDescriptor<T>, name: string, value: string): T[] {
    if (name !== INDEX_BLOCK_BY_REQUEST) throw new Error(`no index ${name}`);
    return this.list(kind).filter((o) => blockRequestUidOf(o as unknown as AddressBlock).includes(value));
  }

  onEvent<T extends KubernetesObject>(kind: KindDescriptor<T>, handler: (e: InformerEvent<T>) => void): () => void {
    const set = this.handlers.get(kindId(kind)) ?? new Set();
    this.handlers.set(kindId(kind), set);
    set.add(handler as Handler);
    return () => set.delete(handler as Handler);
  }

  /**
   * Makes `kind`'s informer wait out a backoff (after an outage) until {@link retryNow} cuts it
   * short, which then runs `relist` (e.g. emitting what the server holds by now).
   */
  backOff(kind: KindDescriptor, relist: () => void): void {
    this.backoffs.set(kindId(kind), relist);
  }

  /** The informer of `kind`, as much of it as BlockRequester reads: whether it backs off. */
  informer(kind: KindDescriptor): { readonly backingOff: boolean } {
    return { backingOff: this.backoffs.has(kindId(kind)) };
  }

  /** Kinds whose backoff {@link retryNow} cut short, in order. */
  readonly retried: string[] = [];

  retryNow(kind: KindDescriptor): boolean {
    const relist = this.backoffs.get(kindId(kind));
    if (relist === undefined) return false;
    this.backoffs.delete(kindId(kind));
    this.retried.push(kind.kind);
    relist();
    return true;
  }

  private readonly backoffs = new Map<string, () => void>();

  private store(kind: KindDescriptor): Map<string, KubernetesObject> {
    const id = kindId(kind);
    let s = this.stores.get(id);
    if (!s) this.stores.set(id, (s = new Map()));
    return s;
  }
}

/**
 * Records BlockRequest creations and deletions; `onCreate` plays the controller, which answers
 * with {@link answer} (the status a read by name then finds) and the blocks it puts in the cache.
 */
export class FakeBlockClient {
  readonly created: BlockRequest[] = [];
  /** BlockRequest deletes asked for, with their UID precondition. */
  readonly requestsDeleted: Array<{ name: string; uid?: string }> = [];
  private seq = 0;

  constructor(private readonly onCreate: (br: BlockRequest) => void = () => undefined) {}

  asClient(): Client {
    return this as unknown as Client;
  }

  /** Objects only the API server knows (the cache has not seen them yet), by `<kind>/<name>`. */
  readonly apiOnly = new Map<string, KubernetesObject>();

  /** Reads by name (GET) of BlockRequests, by name. */
  readonly reads: string[] = [];
  /** Reads by name (GET) of AddressBlocks, by name. */
  readonly blockReads: string[] = [];
  /** When set, a read of an AddressBlock rejects with it (the API server unreachable). */
  blockReadError: Error | undefined;
  /** Lists of BlockRequests asked for, with their label selector. */
  readonly lists: string[] = [];

  /** Uncached reads find what {@link apiOnly} holds (created BlockRequests included), else nothing. */
  async get<T extends KubernetesObject>(kind: KindDescriptor<T>, key: { name: string }): Promise<T | undefined> {
    if (kind.kind === 'BlockRequest') this.reads.push(key.name);
    if (kind.kind === 'AddressBlock') {
      this.blockReads.push(key.name);
      if (this.blockReadError) throw this.blockReadError;
    }
    const found = this.apiOnly.get(`${kind.kind}/${key.name}`) as T | undefined;
    return found && structuredClone(found);
  }

  /** BlockRequests the server holds whose labels match `labelSelector` (`k=v[,k=v]`). */
  async list<T extends KubernetesObject>(kind: KindDescriptor<T>, opts: { labelSelector?: string } = {}): Promise<T[]> {
    if (kind.kind === 'BlockRequest') this.lists.push(opts.labelSelector ?? '');
    const want = (opts.labelSelector ?? '').split(',').filter(Boolean).map((kv) => kv.split('='));
    return [...this.apiOnly.entries()].filter(([k]) => k.startsWith(`${kind.kind}/`)).map(([, o]) => o)
      .filter((o) => want.every(([k, v]) => o.metadata?.labels?.[k!] === v)).map((o) => structuredClone(o) as T);
  }

  async create<T extends KubernetesObject>(_kind: KindDescriptor<T>, obj: T): Promise<T> {
    const br = structuredClone(obj) as unknown as BlockRequest;
    const n = ++this.seq;
    br.metadata = { ...br.metadata, name: `${br.metadata?.generateName ?? 'req-'}${n}`, uid: `uid-${n}` };
    this.created.push(br);
    this.apiOnly.set(`BlockRequest/${br.metadata.name}`, structuredClone(br));
    this.onCreate(br);
    return br as unknown as T;
  }

  /** The controller writes `status` on the request (a read by name sees it from now on). */
  answer(br: BlockRequest, status: object): void {
    const stored = this.apiOnly.get(`BlockRequest/${br.metadata!.name!}`) as BlockRequest | undefined;
    if (stored?.metadata?.uid === br.metadata?.uid) this.apiOnly.set(`BlockRequest/${br.metadata!.name!}`, { ...stored!, status } as KubernetesObject);
  }

  async delete(kind: KindDescriptor, key: { name: string }, opts: { uid?: string } = {}): Promise<boolean> {
    this.requestsDeleted.push({ name: key.name, ...(opts.uid !== undefined && { uid: opts.uid }) });
    const id = `${kind.kind}/${key.name}`;
    const stored = this.apiOnly.get(id);
    if (stored === undefined) return false;
    if (opts.uid === undefined || stored.metadata?.uid === opts.uid) this.apiOnly.delete(id);
    return true;
  }
}

/** An AddressBlock of `pool` for `node`, answering request `uid` when given. */
export function fakeBlock(pool: string, index: number, ipv4: string, o: { node?: string; uid?: string; reserved?: boolean } = {}): AddressBlock {
  return {
    metadata: {
      name: `${pool}-${index}`,
      labels: { [LABEL_POOL]: pool, [LABEL_NODE]: o.node ?? 'n1', ...(o.uid && { [LABEL_REQUEST]: o.uid }), ...(o.reserved && { 'coil.cybozu.com/reserved': 'true' }) },
    },
    index,
    ipv4,
  };
}
