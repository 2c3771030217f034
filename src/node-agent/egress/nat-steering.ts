/**
 * coild's own choice of NAT pod for each client tunnel: the EndpointSlices of the Egresses this
 * node's client pods use (from the cache), this node's probe of each of their NAT pods
 * (nat-prober.ts), and rendezvous hashing over the NAT pods that may take new flows
 * (nat-pod-choice.ts). When a NAT pod fails its probe, or a slice changes, `onChange` names the
 * Egress, and the egress watcher moves the tunnels whose choice changed.
 *
 * Metrics, per Egress in use on this node: `coil_coild_egress_nat_pods_healthy`,
 * `coil_coild_egress_failovers_total`, `coil_coild_egress_probe_rtt_seconds`
 * (docs/egress-failover.md#metrics).
 * @see docs/egress-failover.md
 */
import type Logger from 'bunyan';
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import { Kinds } from '../../api/v2/kinds.js';
import type { Cache } from '../../runtime/cache.js';
import type { Runnable } from '../../runtime/runnable.js';
import { activeNatPod, chooseNatPod, placeClient, recoverPlacement, takesNewFlows, type NatPodPlacement, type NatPodView } from './nat-pod-choice.js';
import { natEndpointsOf, LABEL_SERVICE_NAME, type NatEndpoint } from './nat-endpoints.js';
import { NatProber, type ProbeHealth } from './nat-prober.js';
import type { EgressRef } from './egress-gateways.js';

/** Constructor options of {@link NatSteering}. */
export interface NatSteeringOptions {
  cache: Cache;
  /** The NAT pods' FoU port (`--egress-port`). */
  port: number;
  logger: Logger;
  registry: Registry;
  /** Called with `<namespace>/<name>` of an Egress whose NAT pods' state changed. */
  onChange: (egress: string) => void;
  /** Probe period, ms (default 100). */
  probeIntervalMs?: number;
  /** Unanswered probes that make a NAT pod down (default: NatProber's, 2). */
  probeFailAfter?: number;
  /** Replaces the prober (tests). */
  prober?: Pick<NatProber, 'setTargets' | 'health' | 'run'>;
  /**
   * This node's name. With it, the NAT pods of every Egress with a shared SNAT address that has
   * a NAT pod on this node are probed too, client or not: this node routes the address when its
   * NAT pod is the active one (snat-routes.ts), and must see the others fail to know that.
   */
  nodeName?: string;
}

/** Buckets of the probe RTT, seconds: 0.25 ms to 0.5 s. */
const RTT_BUCKETS = [0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5];

/** NAT pod choice per client tunnel, from EndpointSlices and probes. */
export class NatSteering implements Runnable {
  private readonly prober: Pick<NatProber, 'setTargets' | 'health' | 'run'>;
  private inUse = new Set<string>();
  /** The Egresses whose NAT pods are probed: those in use, and the shared-address ones hosted here. */
  private probed = new Set<string>();
  /** NAT pod address → the Egress it serves (of the Egresses in use). */
  private owner = new Map<string, string>();
  private readonly healthy: Gauge<'namespace' | 'egress'>;
  private readonly failovers: Counter<'namespace' | 'egress'>;
  private readonly rtt: Histogram<'namespace' | 'egress'>;

  constructor(private readonly o: NatSteeringOptions) {
    this.prober = o.prober ?? new NatProber({
      port: o.port, logger: o.logger, ...(o.probeIntervalMs ? { intervalMs: o.probeIntervalMs } : {}), ...(o.probeFailAfter ? { failAfter: o.probeFailAfter } : {}),
      onHealth: (address, health, previous) => this.onHealth(address, health, previous),
      onRtt: (address, ms) => {
        const e = this.owner.get(address);
        if (e) this.rtt.observe(labelsOf(e), ms / 1000);
      },
    });
    // Computed at scrape time from the slices and the probes, so it never lags either.
    const steering = this;
    this.healthy = new Gauge({
      name: 'coil_coild_egress_nat_pods_healthy', help: 'NAT pods of the Egress that this node may send new flows to: serving, not terminating, answering its probe',
      labelNames: ['namespace', 'egress'], registers: [o.registry],
      collect() {
        this.reset();
        for (const key of steering.probed) this.set(labelsOf(key), steering.views(refOf(key)).filter((v) => takesNewFlows(v) && v.health === 'up').length);
      },
    });
    this.failovers = new Counter({ name: 'coil_coild_egress_failovers_total', help: 'NAT pods of the Egress that stopped answering this node\'s probe while their EndpointSlice still listed them serving (their client tunnels moved)', labelNames: ['namespace', 'egress'], registers: [o.registry] });
    this.rtt = new Histogram({ name: 'coil_coild_egress_probe_rtt_seconds', help: 'Round trip of this node\'s probes through the FoU tunnel to the Egress\'s NAT pods', labelNames: ['namespace', 'egress'], buckets: RTT_BUCKETS, registers: [o.registry] });
  }

  /** The Egresses (`<namespace>/<name>`) this node's client pods use now; only their NAT pods are probed. */
  use(egresses: Iterable<string>): void {
    const next = new Set(egresses);
    this.inUse = next;
    this.retarget();
  }

  /**
   * The NAT pod `client`'s tunnel to `egress` should point at, of `client`'s family; undefined
   * for the ClusterIP. `current` is where it points now (a draining NAT pod keeps its clients).
   */
  natPod(egress: EgressRef, client: string, current?: string): string | undefined {
    return chooseNatPod(client, this.familyViews(egress, client), current);
  }

  private familyViews(egress: EgressRef, client: string): Array<NatPodView & { family: 4 | 6 }> {
    const family = client.includes(':') ? 6 : 4;
    return this.views(egress).filter((v) => v.family === family);
  }

  /**
   * Where `client`'s tunnel to `egress` should point and which NAT pods it drains from
   * (docs/egress-failover.md#draining), given where it points now and what it drains from now.
   * With `shared` (the Egress has a shared SNAT address of the client's family) the tunnel goes
   * to the Egress's active NAT pod ({@link active}) and drains from none: the flows of the NAT pod
   * it left are picked up by the active one, which the address is routed to.
   */
  placement(egress: EgressRef, client: string, current: string | undefined, draining: readonly string[], shared = false): NatPodPlacement {
    if (shared) {
      const natPod = activeNatPod(`${egress.namespace}/${egress.name}`, this.familyViews(egress, client));
      return { natPod, draining: [] };
    }
    return placeClient(client, this.familyViews(egress, client), current, draining);
  }

  /**
   * The active NAT pod of a shared-address Egress in `family` (nat-pod-choice.ts activeNatPod),
   * with the Node it runs on when its slice names it; undefined when none serves.
   */
  active(egress: EgressRef, family: 4 | 6): { address: string; nodeName?: string } | undefined {
    const views = this.views(egress).filter((v) => v.family === family);
    const address = activeNatPod(`${egress.namespace}/${egress.name}`, views);
    const nodeName = views.find((v) => v.address === address)?.nodeName;
    return address === undefined ? undefined : { address, ...(nodeName ? { nodeName } : {}) };
  }

  /** After a coild restart: where the tunnel pointed and what it drained from, from its peer links' remotes. */
  recover(egress: EgressRef, client: string, inKernel: readonly string[]): { current: string | undefined; draining: string[] } {
    return recoverPlacement(this.familyViews(egress, client), inKernel);
  }

  /** Probes until aborted, following EndpointSlice changes of the Egresses in use. */
  async run(signal: AbortSignal): Promise<void> {
    const off = this.o.cache.onEvent(Kinds.EndpointSlice, (e) => {
      const ns = e.object.metadata?.namespace ?? '';
      const name = e.object.metadata?.labels?.[LABEL_SERVICE_NAME] ?? '';
      const key = `${ns}/${name}`;
      const was = this.probed.has(key);
      // A slice can make this node the host of a shared-address Egress's NAT pod: re-derived first.
      if (was || this.o.nodeName) this.retarget();
      if (was || this.probed.has(key)) this.o.onChange(key);
    });
    // An Egress given (or stripped of) a shared address changes which Egresses are probed here.
    const offEgress = this.o.nodeName ? this.o.cache.onEvent(Kinds.Egress, (e) => {
      const key = `${e.object.metadata?.namespace ?? ''}/${e.object.metadata?.name ?? ''}`;
      const was = this.probed.has(key);
      this.retarget();
      if (was || this.probed.has(key)) this.o.onChange(key);
    }) : () => undefined;
    try {
      this.retarget();
      await this.prober.run(signal);
    } finally {
      off();
      offEgress();
    }
  }

  private endpoints(egress: EgressRef): NatEndpoint[] {
    return natEndpointsOf(egress.name, this.o.cache.list(Kinds.EndpointSlice, { namespace: egress.namespace }));
  }

  private views(egress: EgressRef): Array<NatPodView & { family: 4 | 6; nodeName?: string }> {
    return this.endpoints(egress).map((e) => ({
      address: e.address, family: e.family, serving: e.serving, terminating: e.terminating, health: this.prober.health(e.address),
      ...(e.nodeName ? { nodeName: e.nodeName } : {}),
    }));
  }

  /** The Egresses with a shared SNAT address that have a NAT pod on this node (none without `nodeName`). */
  hostedShared(): string[] {
    const node = this.o.nodeName;
    if (!node) return [];
    return this.o.cache.list(Kinds.Egress)
      .filter((eg) => (eg.spec?.snatAddresses ?? []).length > 0)
      .map((eg) => ({ namespace: eg.metadata?.namespace ?? '', name: eg.metadata?.name ?? '' }))
      .filter((ref) => this.endpoints(ref).some((e) => e.nodeName === node))
      .map((ref) => `${ref.namespace}/${ref.name}`);
  }

  /** The addresses of this node's NAT pods of Egresses with a shared SNAT address (snat-routes.ts loosens their veths' rp_filter). */
  hostedSharedNatPods(): string[] {
    return this.hostedShared().flatMap((key) => this.endpoints(refOf(key)).filter((e) => e.nodeName === this.o.nodeName).map((e) => e.address));
  }

  /** Probes the NAT pods of the Egresses in use and of the shared-address ones hosted here. */
  private retarget(): void {
    this.probed = new Set([...this.inUse, ...this.hostedShared()]);
    const owner = new Map<string, string>();
    for (const key of this.probed) for (const e of this.endpoints(refOf(key))) owner.set(e.address, key);
    this.owner = owner;
    this.prober.setTargets(owner.keys());
  }

  private onHealth(address: string, health: ProbeHealth, previous: ProbeHealth): void {
    const key = this.owner.get(address);
    if (!key) return;
    if (health === 'down' && previous !== 'down' && this.endpoints(refOf(key)).some((e) => e.address === address && e.serving)) {
      this.failovers.inc(labelsOf(key));
      this.o.logger.warn({ egress: key, natPod: address }, 'NAT pod stopped answering; moving its client tunnels');
    }
    this.o.onChange(key);
  }
}

function refOf(key: string): EgressRef {
  const i = key.indexOf('/');
  return { namespace: key.slice(0, i), name: key.slice(i + 1) };
}

function labelsOf(key: string): { namespace: string; egress: string } {
  const r = refOf(key);
  return { namespace: r.namespace, egress: r.name };
}
