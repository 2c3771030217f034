/**
 * OrphanAddresses: addresses wired on this node that no AddressBlock of the node holds — after
 * blocks were lost while their pods run (an uninstall and `kubectl delete addressblocks`, an etcd
 * restored from an older backup, a finalizer removed by hand). The wiring is never touched here;
 * each such address is shown (`GET /ipam`, `coil_coild_orphan_addresses`), reported on its Pod
 * (Warning Event `AddressWithoutBlock`), and its block claimed back from the controller with a
 * BlockRequest annotated `coil.cybozu.com/claim-index` (docs/ipam-recovery.md#claim-back). Once
 * the block is back in the cache, GC registers the address into it under the key's lock
 * (`onBlockBack` asks for a pass at once).
 *
 * The Pods the API server shows are the truth: a claim is made only for an address a live Pod of
 * this node holds in `status.podIPs`; the controller checks the same before granting it.
 *
 * A claim's answer is read by the BlockRequester ({@link BlockRequester.follow}: by name, on its
 * backoff, then deleted); the block itself shows in the node's AddressBlock cache.
 *
 * Every tracked address a live Pod of this node shows stays routed from the other nodes: it is
 * exported alone (/32, /128) in table 119 beside the blocks ({@link exported}) until it is
 * registered into a block or its Pod goes (DEL, GC: {@link forget}); an address of a family the
 * pool no longer has (the other one registered, `registeredIn`) is exported so for as long as its
 * Pod runs (docs/ipam-recovery.md#a-family-the-pool-no-longer-has).
 *
 * Concurrency: single-threaded state; {@link check} is level-triggered (every AddressBlock, Pod or
 * AddressPool event, every claim answer and every note) and idempotent.
 */
import type { V1Pod } from '@kubernetes/client-node';
import type Logger from 'bunyan';
import { addressBlockName, type AddressBlock } from '../../api/v2/addressblock.js';
import type { AddressPool } from '../../api/v2/addresspool.js';
import { ANN_CLAIM_INDEX, LABEL_NODE, LABEL_POOL } from '../../api/v2/keys.js';
import { Kinds } from '../../api/v2/kinds.js';
import { canonicalAddress } from '../../ipam/cidr.js';
import { podAddresses } from '../../ipam/pod-ips.js';
import { PoolLayout, PoolLayoutError } from '../../ipam/pool.js';
import type { Cache } from '../../runtime/cache.js';
import type { Client } from '../../runtime/client.js';
import type { BlockRequester, FollowedAnswer } from './block-request.js';
import { allocationKey, type WiredEntry } from './node-ipam.js';

/** How many retry periods a claim waits after a controller answered it with another block. */
const UNSUPPORTED_BACKOFF = 30;

/**
 * A pod interface found on the host whose address no block of this node holds: all of its
 * addresses, or (with `registeredIn`) those its block does not hold while the other one is
 * registered there (docs/ipam-recovery.md#a-family-the-pool-no-longer-has).
 */
export interface OrphanEntry extends WiredEntry {
  /** The block holding the interface's other address; only this entry's addresses are outside it. */
  readonly registeredIn?: string;
}

/**
 * Where an orphaned address stands:
 * - `no-pod`: no live Pod of this node shows the address (yet): kept wired, looked at again;
 * - `no-pool`: no AddressPool holds it (the pool was deleted, or re-created without its family
 *   or subnet): no block can be claimed for it;
 * - `outside-block`: its interface's other address is registered in a block of this node that
 *   does not hold this one (made without its family): no block can be claimed for it;
 *   (`no-pool` and `outside-block` last while the Pod runs: `kubectl coil ipam check` reports them
 *   as `unclaimable-address`, src/ipam/ipam-check.ts)
 * - `unreadable-block`: the block exists but coild cannot read it (docs/node-state.md#unreadable-blocks);
 * - `claiming`: a claim is in flight; `granted`: the block is back, registration follows;
 * - `refused`: the controller refused the claim (`message` says why); asked again later.
 */
export type OrphanState = 'no-pod' | 'no-pool' | 'outside-block' | 'unreadable-block' | 'claiming' | 'granted' | 'refused';

/** One orphaned address as {@link OrphanAddresses.list} shows it. */
export interface Orphan extends OrphanEntry {
  readonly key: string;
  readonly state: OrphanState;
  readonly message?: string;
  readonly podNamespace?: string;
  readonly podName?: string;
  /** The block claimed back (`<pool>-<index>`). */
  readonly block?: string;
}

/** Constructor options of {@link OrphanAddresses}. */
export interface OrphanAddressesOptions {
  /** Cache of this node's Pods and AddressBlocks, its Node, and all AddressPools. */
  readonly cache: Cache;
  readonly client: Client;
  /** Reads each claim's answer and deletes the claim once answered. */
  readonly requester: Pick<BlockRequester, 'follow'>;
  readonly nodeName: string;
  readonly logger: Logger;
  /** Names of this node's blocks coild cannot read (NodeIpam.unreadableBlocks). */
  readonly unreadable?: () => Iterable<string>;
  /**
   * Holds an orphaned address for its block to come, and lets it go (NodeIpam.expect/unexpect):
   * the address is registered the moment the block appears, before an ADD could be given it.
   */
  readonly hold?: { expect(entry: OrphanEntry): void; unexpect(key: string): void };
  /** Records the Warning Event on the Pod (once per address). */
  readonly reportOnPod?: (pod: Readonly<V1Pod>, message: string) => void;
  /** A claimed block is in the cache: registration can run now (coild runs a GC pass). */
  readonly onBlockBack?: () => void;
  /** {@link OrphanAddresses.exported} changed: coild syncs table 119 (BlockExport.trigger). */
  readonly onExportChange?: () => void;
  /** A refused or lost claim is asked again after this long. Default 60 000 ms. */
  readonly retryMs?: number;
  /** Clock, ms since the epoch. Default Date.now. */
  readonly now?: () => number;
}

interface Tracked {
  entry: OrphanEntry;
  state: OrphanState;
  message?: string;
  pod?: { namespace: string; name: string };
  block?: string;
  reported: boolean;
}

interface Claim {
  readonly pool: string;
  readonly index: bigint;
  readonly createdAtMs: number;
  name?: string;
  uid?: string;
  /** The controller's answer, once read. */
  answer?: { kind: 'allocated'; block: string } | { kind: 'failed'; message: string };
  answeredAtMs?: number;
  creating: boolean;
}

/** The node's orphaned addresses and the claims for their blocks. */
export class OrphanAddresses {
  private readonly tracked = new Map<string, Tracked>();
  /** Claims by block name: one in flight per block, whatever number of addresses it holds. */
  private readonly claims = new Map<string, Claim>();
  private readonly unsubscribe: (() => void)[] = [];
  private readonly now: () => number;
  private readonly retryMs: number;
  private blockBackPending = false;
  /** {@link exported} as last told to `onExportChange`, joined. */
  private lastExported = '';

  constructor(private readonly o: OrphanAddressesOptions) {
    this.now = o.now ?? Date.now;
    this.retryMs = o.retryMs ?? 60_000;
  }

  /** Follows the cache. Call after it synced. */
  start(): void {
    const recheck = (): void => this.check();
    this.unsubscribe.push(
      this.o.cache.onEvent(Kinds.AddressBlock, recheck),
      this.o.cache.onEvent(Kinds.Pod, recheck),
      // A reinstall re-creates the default pool a little after coild starts.
      this.o.cache.onEvent(Kinds.AddressPool, recheck),
    );
  }

  stop(): void {
    for (const u of this.unsubscribe.splice(0)) u();
  }

  /**
   * Records (or refreshes) an address no block of this node holds, and acts on it. An entry with
   * `registeredIn` (the other address is registered) is not held for a block: none will come.
   */
  note(entry: OrphanEntry): void {
    const key = allocationKey(entry.containerId, entry.ifname);
    const known = this.tracked.get(key);
    if (entry.registeredIn === undefined) this.o.hold?.expect(entry);
    else this.o.hold?.unexpect(key);
    if (known) {
      // Half of it registered since: the Pod is told what is left.
      if (known.entry.registeredIn !== entry.registeredIn) known.reported = false;
      known.entry = entry;
    } else {
      this.tracked.set(key, { entry, state: 'no-pod', reported: false });
      this.o.logger.warn({ key, pool: entry.pool, ipv4: entry.ipv4, ipv6: entry.ipv6, registeredIn: entry.registeredIn },
        entry.registeredIn === undefined
          ? 'address wired on the host that no AddressBlock of this node holds: kept wired, claiming its block back'
          : `address wired on the host that its block ${entry.registeredIn} does not hold: kept wired and exported alone while its Pod runs`);
    }
    this.check();
  }

  /** The key's address is registered again, or its veth is gone (DEL, GC): its routes in table 119 go. */
  forget(key: string): void {
    const known = this.tracked.delete(key);
    this.o.hold?.unexpect(key);
    if (known) this.exportChanged();
  }

  /**
   * Host routes to export beside the blocks (table 119, BlockExport's `extra`): `<address>/32`
   * and `<address>/128` of every tracked address a live Pod of this node shows in `status.podIPs`.
   * An address no live Pod shows (`no-pod`) is not exported: the API server does not know it is
   * used, and its block may be another node's by now.
   */
  exported(): string[] {
    const out: string[] = [];
    for (const t of this.tracked.values()) {
      if (t.state === 'no-pod') continue;
      if (t.entry.ipv4 !== undefined) out.push(`${canonicalAddress(t.entry.ipv4)}/32`);
      if (t.entry.ipv6 !== undefined) out.push(`${canonicalAddress(t.entry.ipv6)}/128`);
    }
    return out.sort();
  }

  /** Keys tracked. */
  keys(): string[] {
    return [...this.tracked.keys()];
  }

  /** Every orphaned address, by key. */
  list(): Orphan[] {
    return [...this.tracked.entries()].sort(([a], [b]) => a.localeCompare(b)).map(([key, t]) => ({
      key, ...t.entry, state: t.state, ...(t.message !== undefined && { message: t.message }),
      ...(t.pod && { podNamespace: t.pod.namespace, podName: t.pod.name }), ...(t.block !== undefined && { block: t.block }),
    }));
  }

  /** Re-reads everything and acts: find the Pod, report it, claim the block. */
  check(): void {
    this.checkTracked();
    this.exportChanged();
  }

  private checkTracked(): void {
    if (this.tracked.size === 0) {
      // Nothing left to claim for: forget the claims (one in creation settles on its own).
      for (const [block, c] of this.claims) if (!c.creating) this.claims.delete(block);
      return;
    }
    const unreadable = new Set(this.o.unreadable?.() ?? []);
    const pods = this.o.cache.list(Kinds.Pod).filter((p) => p.spec?.nodeName === this.o.nodeName);
    let back = false;
    for (const t of this.tracked.values()) {
      const addresses = [t.entry.ipv4, t.entry.ipv6].filter((a): a is string => a !== undefined).map(canonicalAddress);
      const pod = pods.find((p) => podAddresses(p).some((ip) => addresses.includes(ip)));
      if (pod === undefined) {
        delete t.pod;
        this.set(t, 'no-pod', `no live Pod of node ${this.o.nodeName} shows ${addresses.join(', ')} in status.podIPs`);
        continue;
      }
      t.pod = { namespace: pod.metadata?.namespace ?? '', name: pod.metadata?.name ?? '' };
      const target = this.blockOf(t.entry.pool, addresses[0]!);
      if (typeof target === 'string') {
        this.set(t, 'no-pool', `${target}: no block can hold it; exported alone while the Pod runs (re-create the Pod to renumber it)`);
        this.report(t, pod, `no AddressPool holds it (${target}); it is exported alone while the Pod runs`);
        continue;
      }
      if (t.entry.registeredIn !== undefined) {
        // The interface's other address is registered in a block that lacks this one: its index is this node's already.
        this.set(t, 'outside-block', `block ${t.entry.registeredIn}, which holds the Pod's other address, does not hold ${addresses.join(', ')}; exported alone while the Pod runs (re-create the Pod to renumber it)`);
        this.report(t, pod, `its block ${t.entry.registeredIn} does not hold it; it is exported alone while the Pod runs`);
        continue;
      }
      t.block = target.block;
      if (unreadable.has(target.block)) {
        this.set(t, 'unreadable-block', `block ${target.block} exists but coild cannot read it`);
        this.report(t, pod, `its block ${target.block} cannot be read`);
        continue;
      }
      this.report(t, pod, `claiming block ${target.block} back for this node`);
      if (this.o.cache.get<AddressBlock>(Kinds.AddressBlock, { name: target.block })) {
        if (t.state !== 'granted') back = true;
        this.set(t, 'granted', `block ${target.block} is back; the address is registered on the next GC pass`);
        continue;
      }
      const claim = this.claims.get(target.block);
      if (claim?.answer?.kind === 'failed') this.set(t, 'refused', claim.answer.message);
      else if (claim?.answer?.kind === 'allocated' && claim.answer.block !== target.block) {
        this.set(t, 'refused', `the controller answered with block ${claim.answer.block}, not ${target.block} (a controller that does not know claims)`);
      } else this.set(t, 'claiming', `claim for block ${target.block} in flight`);
      this.claim(target.pool, target.index, target.block);
    }
    if (back) this.blockBack();
  }

  /** The block holding `address`: from the alias's pool first, else any pool. */
  private blockOf(poolName: string, address: string): { pool: string; index: bigint; block: string } | string {
    const pools = this.o.cache.list<AddressPool>(Kinds.AddressPool);
    const ordered = [...pools.filter((p) => p.metadata?.name === poolName), ...pools.filter((p) => p.metadata?.name !== poolName)];
    for (const p of ordered) {
      let index: bigint | undefined;
      try {
        index = PoolLayout.fromSpec(p.spec).indexOfAddress(address);
      } catch (e) {
        if (e instanceof PoolLayoutError) continue;
        throw e;
      }
      if (index !== undefined && !p.metadata?.deletionTimestamp) {
        const name = p.metadata!.name!;
        return { pool: name, index, block: addressBlockName(name, index) };
      }
    }
    return pools.some((p) => p.metadata?.name === poolName) ? `pool ${poolName} does not hold ${address}` : `pool ${poolName} does not exist`;
  }

  /** Tells `onExportChange` when {@link exported} differs from what it was last told. */
  private exportChanged(): void {
    const now = this.exported().join(' ');
    if (now === this.lastExported) return;
    this.lastExported = now;
    this.o.onExportChange?.();
  }

  private set(t: Tracked, state: OrphanState, message: string): void {
    t.state = state;
    t.message = message;
  }

  private report(t: Tracked, pod: Readonly<V1Pod>, what: string): void {
    if (t.reported) return;
    t.reported = true;
    const addresses = [t.entry.ipv4, t.entry.ipv6].filter(Boolean).join(', ');
    this.o.reportOnPod?.(pod, `coild on ${this.o.nodeName} found ${addresses} wired for this Pod but no AddressBlock of the node holds it; the Pod keeps its network, and ${what}`);
  }

  /** Creates the claim for `block` unless one is in flight, or the last one was answered less than `retryMs` ago. */
  private claim(pool: string, index: bigint, block: string): void {
    const known = this.claims.get(block);
    const nowMs = this.now();
    if (known) {
      if (known.creating || known.answer === undefined && nowMs - known.createdAtMs < this.retryMs) return;
      // Answered with another block: a controller that does not know claims (Coil's) gave the
      // node an extra block, which coild releases once empty; ask such a controller rarely.
      const unknown = known.answer?.kind === 'allocated' && known.answer.block !== block;
      if (known.answeredAtMs !== undefined && nowMs - known.answeredAtMs < this.retryMs * (unknown ? UNSUPPORTED_BACKOFF : 1)) return;
    }
    const c: Claim = { pool, index, createdAtMs: nowMs, creating: true };
    this.claims.set(block, c);
    const node = this.o.cache.get(Kinds.Node, { name: this.o.nodeName });
    const ownerReferences = node?.metadata?.uid ? [{ apiVersion: 'v1', kind: 'Node', name: this.o.nodeName, uid: node.metadata.uid }] : undefined;
    this.o.client.create(Kinds.BlockRequest, {
      metadata: {
        generateName: `claim-${pool}-${this.o.nodeName}-`,
        labels: { [LABEL_NODE]: this.o.nodeName, [LABEL_POOL]: pool },
        annotations: { [ANN_CLAIM_INDEX]: String(index) },
        ...(ownerReferences && { ownerReferences }),
      },
      spec: { nodeName: this.o.nodeName, poolName: pool },
    }).then((br) => {
      c.name = br.metadata?.name;
      c.uid = br.metadata?.uid;
      this.o.logger.info({ block, request: c.name }, 'claiming a block back: live Pods of this node hold its addresses');
      if (c.name !== undefined && c.uid !== undefined) this.o.requester.follow(c.name, c.uid, (answer) => this.answered(c, answer));
    }, (err: unknown) => {
      this.o.logger.error({ err, block }, 'cannot create the BlockRequest claiming a block back; asking again later');
      c.answer = { kind: 'failed', message: `cannot create the claim: ${err instanceof Error ? err.message : String(err)}` };
      c.answeredAtMs = this.now();
    }).finally(() => {
      c.creating = false;
      this.check();
    });
  }

  /** A claim's answer (the requester read it); `lost` (deleted unanswered) leaves it to be asked again after `retryMs`. */
  private answered(c: Claim, answer: FollowedAnswer): void {
    if (answer.kind === 'lost') return;
    c.answer = answer.kind === 'allocated' ? { kind: 'allocated', block: answer.addressBlockName } : { kind: 'failed', message: `${answer.reason}: ${answer.message}` };
    c.answeredAtMs = this.now();
    if (c.answer.kind === 'failed') this.o.logger.warn({ request: c.name, answer: c.answer.message }, 'claim back refused; asking again later');
    this.check();
  }

  /** Asks for registration once per burst of events. */
  private blockBack(): void {
    if (this.blockBackPending) return;
    this.blockBackPending = true;
    setImmediate(() => {
      this.blockBackPending = false;
      this.o.onBlockBack?.();
    });
  }
}
