/**
 * The node side of an Egress's shared SNAT address (`spec.snatAddresses`): when the active NAT
 * pod of such an Egress (nat-pod-choice.ts activeNatPod, the same choice every coild makes) runs
 * on this node, the node routes the address to it — `S/32 via <NAT pod> proto <protocol-id>` in
 * the pod table (116), where the pod's own /32 route resolves the gateway — and exports `S/32` in
 * the export table (119) beside the node's blocks, for BIRD to announce. When another NAT pod
 * becomes the active one, this node withdraws both and that pod's node adds them, so the servers'
 * answers to S reach the NAT pod the clients were moved to, which picks their flows up
 * (docs/egress-failover.md#sessions-kept-the-shared-snat-address).
 *
 * The node's own NAT pods of such Egresses, active or not, send packets from S (the probes'
 * answers, and the flows of a pod that just became active), which a strict reverse-path filter
 * drops where S is routed elsewhere: their host veths get `rp_filter` 2 (loose: S must be routable
 * at all), whatever `all` says, since the kernel applies the larger of the two. IPv6 has no such
 * sysctl.
 *
 * Level-triggered: every change of the NAT pods' states (coild's probes, EndpointSlices, Egresses)
 * recomputes the whole set from the cache and syncs the pod table's shared-address routes to it in
 * one batch. A route of the pod table is one of these when it has coil's protocol and a gateway
 * (the pods' own routes have none), so a coild restart finds the routes it made, and removes
 * those of Egresses deleted meanwhile.
 */
import type Logger from 'bunyan';
import { Gauge, type Registry } from 'prom-client';
import { Kinds } from '../../api/v2/kinds.js';
import { canonicalAddress } from '../../ipam/ip-address.js';
import { addressFamily } from '../../netlink/cidr.js';
import type { NetlinkExecutor } from '../../netlink/netlink-executor.js';
import type { IpRunner } from '../../netlink/iproute2/ip-runner.js';
import { readRoutesBothFamilies, type Route } from '../../netlink/route.js';
import { readSysctl, writeSysctl } from '../../netlink/sysctl.js';
import { rt, type RtRequest } from '../../netlink/rt-request.js';
import type { Cache } from '../../runtime/cache.js';
import type { Runnable } from '../../runtime/runnable.js';
import { CoalescingSync } from '../../runtime/coalescing-sync.js';
import type { Egress } from '../../api/v2/egress.js';
import type { EgressRef } from './egress-gateways.js';

/** One shared SNAT address this node routes to its NAT pod. */
export interface SnatRoute {
  /** `<namespace>/<name>` of the Egress. */
  egress: string;
  /** The shared address (plain, canonical). */
  address: string;
  family: 4 | 6;
  /** The active NAT pod's address, on this node (the route's gateway). */
  natPod: string;
}

/** Where an Egress's active NAT pod of a family is (NatSteering.active). */
export type ActiveNatPodOf = (egress: EgressRef, family: 4 | 6) => { address: string; nodeName?: string } | undefined;

/**
 * The shared SNAT addresses `nodeName` routes: each address of each Egress whose active NAT pod
 * of the address's family runs on `nodeName`. Pure. An address two Egresses name (the webhook
 * cannot see across Egresses) is routed for neither: whichever NAT pod got it would break the
 * other Egress's flows, and a route that flips between them breaks both.
 */
export function desiredSnatRoutes(egresses: Iterable<Readonly<Egress>>, activeOf: ActiveNatPodOf, nodeName: string): SnatRoute[] {
  const all: SnatRoute[] = [];
  const count = new Map<string, number>();
  for (const eg of egresses) {
    const ref = { namespace: eg.metadata?.namespace ?? '', name: eg.metadata?.name ?? '' };
    for (const raw of eg.spec?.snatAddresses ?? []) {
      const family = addressFamily(raw);
      if (family === undefined) continue; // the webhook refuses it; another writer may not have
      const address = canonicalAddress(raw);
      count.set(address, (count.get(address) ?? 0) + 1);
      const active = activeOf(ref, family);
      if (active?.nodeName === nodeName) all.push({ egress: `${ref.namespace}/${ref.name}`, address, family, natPod: active.address });
    }
  }
  return all.filter((r) => count.get(r.address) === 1);
}

/** `S/32` or `S/128`. */
export function hostCidr(address: string, family: 4 | 6): string {
  return `${address}/${family === 4 ? 32 : 128}`;
}

/** Constructor options of {@link SnatRouter}. */
export interface SnatRouterOptions {
  /** coild's cache (Egresses). */
  cache: Cache;
  /** The active NAT pods (NatSteering.active). */
  activeOf: ActiveNatPodOf;
  /** This node's NAT pods of shared-address Egresses (NatSteering.hostedSharedNatPods). */
  hostedNatPods: () => readonly string[];
  /** Runs `sysctl` for {@link hostNetns}; coild's own netns is written through /proc directly. */
  ip: IpRunner;
  nodeName: string;
  /** Executor of the route reads and writes (rtnetlink, iproute2 as the fallback). */
  kernel: NetlinkExecutor;
  /** netns file standing in for the host netns (tests); default coild's own. */
  hostNetns?: string;
  /**
   * The table of the routes to pods, where the NAT pod's /32 resolves the gateway: `--pod-table-id`
   * (116), or the main table (254) without coil's IPAM, where another CNI routes its pods.
   */
  podTableId: number;
  /** `--protocol-id` (30). */
  protocolId: number;
  logger: Logger;
  registry: Registry;
  /** Called after a sync changed which addresses this node routes (coild re-syncs the export table). */
  onExportChange: () => void;
  /** Full resync period, ms (default 60 s): heals a route someone else removed. */
  resyncPeriodMs?: number;
}

/** Routes and exports the shared SNAT addresses whose active NAT pod runs on this node. */
export class SnatRouter implements Runnable {
  private routed: SnatRoute[] = [];
  /** Host veths whose rp_filter is loosened, by ifindex (a re-created veth of the same name is new). */
  private readonly loosened = new Map<string, number>();
  private readonly loop = new CoalescingSync({
    sync: () => this.syncOnce(),
    onError: (err) => this.o.logger.error({ err }, 'shared SNAT address routes sync failed'),
  });
  private readonly gauge: Gauge<'namespace' | 'egress' | 'address'>;

  constructor(private readonly o: SnatRouterOptions) {
    const router = this;
    this.gauge = new Gauge({
      name: 'coil_coild_egress_snat_routed', help: 'Shared SNAT addresses of Egresses this node routes to their active NAT pod and exports (1 per address)',
      labelNames: ['namespace', 'egress', 'address'], registers: [o.registry],
      collect() {
        this.reset();
        for (const r of router.routed) {
          const [namespace = '', egress = ''] = r.egress.split('/');
          this.set({ namespace, egress, address: r.address }, 1);
        }
      },
    });
  }

  /** The routing table of the shared addresses' routes (the pods' table). */
  get table(): number {
    return this.o.podTableId;
  }

  /** The shared addresses this node routes now, as last synced. */
  routes(): readonly SnatRoute[] {
    return this.routed;
  }

  /** The host CIDRs (`S/32`, `S/128`) routed now: coild adds them to the export table. */
  exported(): string[] {
    return this.routed.map((r) => hostCidr(r.address, r.family));
  }

  /** Syncs now and on every {@link trigger} until aborted (routes stay after: the NAT pod still runs). */
  async run(signal: AbortSignal): Promise<void> {
    const timer = setInterval(() => this.trigger(), this.o.resyncPeriodMs ?? 60_000);
    timer.unref();
    try {
      await this.sync();
      if (!signal.aborted) await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
    } finally {
      clearInterval(timer);
      if (signal.aborted) await this.loop.stop();
      else await this.loop.idle();
    }
  }

  /** Requests a sync soon; errors are logged and the next change or the resync retries. */
  trigger(): void {
    this.loop.trigger();
  }

  /**
   * Makes the pod table's shared-address routes equal the desired set, in one batch, then tells
   * the export table when the set changed.
   * @throws NetlinkError when the kernel refuses
   */
  async sync(): Promise<void> {
    await this.loop.sync();
  }

  /**
   * Loosens the reverse-path filter of this node's shared-address NAT pods' host veths (IPv4),
   * once per veth (by ifindex: a re-created veth of the same name starts with the default again).
   */
  private async loosenReversePath(routes: readonly Route[]): Promise<void> {
    const target = this.o.hostNetns !== undefined ? { netns: this.o.hostNetns } : {};
    const devs = this.o.hostedNatPods().filter((a) => addressFamily(a) === 4).flatMap((a) => vethOf(routes, canonicalAddress(a)) ?? []);
    for (const dev of this.loosened.keys()) if (!devs.includes(dev)) this.loosened.delete(dev);
    for (const dev of devs) {
      const [link] = await this.o.kernel.dump<{ ifindex: number }>({ kind: 'links', dev }, { netns: this.o.hostNetns }).catch(() => []);
      if (link === undefined || this.loosened.get(dev) === link.ifindex) continue;
      const key = `net.ipv4.conf.${dev}.rp_filter`;
      if (await readSysctl(this.o.ip, key, target) !== LOOSE_RP_FILTER) {
        await writeSysctl(this.o.ip, key, LOOSE_RP_FILTER, target);
        this.o.logger.info({ veth: dev }, 'reverse-path filter of a shared-address NAT pod loosened (its packets come from the shared address)');
      }
      this.loosened.set(dev, link.ifindex);
    }
  }

  private async syncOnce(): Promise<void> {
    const want = desiredSnatRoutes(this.o.cache.list(Kinds.Egress), this.o.activeOf, this.o.nodeName);
    const table = this.o.podTableId;
    const routes = await readRoutesBothFamilies(this.o.kernel, { netns: this.o.hostNetns, table });
    const have = routes.filter((r) => r.protocol === String(this.o.protocolId) && r.gateway !== undefined && isHostDst(r.dst));
    const lines: RtRequest[] = [];
    for (const r of have) {
      const dst = r.dst.split('/')[0]!;
      const w = want.find((x) => x.address === canonicalAddress(dst));
      if (w && canonicalAddress(r.gateway!) === w.natPod) continue;
      if (!w) lines.push(rt.routeDel({ dst: hostCidr(canonicalAddress(dst), r.dst.includes(':') ? 6 : 4), table }));
    }
    for (const w of want) {
      const cur = have.find((r) => canonicalAddress(r.dst.split('/')[0]!) === w.address);
      if (cur && canonicalAddress(cur.gateway!) === w.natPod) continue;
      lines.push(rt.routeReplace({ dst: hostCidr(w.address, w.family), via: w.natPod, table, protocol: this.o.protocolId }));
    }
    if (lines.length > 0) await this.o.kernel.apply(lines, { netns: this.o.hostNetns });
    const before = this.exported().sort().join(',');
    const moved = lines.length > 0;
    this.routed = want;
    if (moved) this.o.logger.info({ routes: want.map((r) => `${r.egress} ${r.address} via ${r.natPod}`) }, 'shared SNAT address routes synced');
    if (this.exported().sort().join(',') !== before) this.o.onExportChange();
    // After the routes: a failover's move must not wait for it (a new NAT pod's veth is loosened
    // by the sync its slice's change triggers, long before it can become the active one).
    await this.loosenReversePath(routes).catch((err: unknown) => this.o.logger.error({ err }, 'loosening the reverse-path filter of a shared-address NAT pod failed; the next sync retries'));
  }
}

/** rp_filter's value that lets a NAT pod's packets from S in: loose. */
const LOOSE_RP_FILTER = '2';

/** A pod's host veth as the pod table routes it (`<pod IP> dev <veth>`, no gateway). */
function vethOf(routes: readonly Route[], podIp: string): string | undefined {
  return routes.find((r) => r.gateway === undefined && r.dev !== undefined && isHostDst(r.dst) && canonicalAddress(r.dst.split('/')[0]!) === podIp)?.dev;
}

/** A host route's `dst` as ip prints it: a bare address, or with /32 or /128 (not `default`). */
function isHostDst(dst: string): boolean {
  const [address = '', len] = dst.split('/');
  return addressFamily(address) !== undefined && (len === undefined || len === '32' || len === '128');
}
