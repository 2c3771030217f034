/**
 * coil-egress metrics on a prom-client Registry instance (never the global one). Names follow
 * Coil's (docs/compatibility.md#metric-names-and-types), except that the nftables packet/byte
 * series are real counters: Coil exports them as gauges with a `_total` suffix
 * (docs/compatibility.md#metrics-gaps). Here they advance by the difference between two reads of
 * the nft counters; when the rules were re-created (counts went down) the new count is the
 * increment.
 * @see docs/compatibility.md#metric-names-and-types
 */
import { Counter, Gauge, Registry, collectDefaultMetrics } from 'prom-client';
import type { NftCounter } from '../netlink/netfilter/nftables.js';
import type { NatCountersByFamily } from './nat.js';

/** Constant labels of this pod's series. */
export interface EgressMetricLabels {
  /** The Egress's namespace. */
  namespace: string;
  /** The Egress's name. */
  egress: string;
  /** This pod's name (`HOSTNAME`). */
  pod: string;
}

/** One client pod as exported in `coil_egress_client_pod_info`. */
export interface ClientPodInfo {
  namespace: string;
  pod: string;
  podIp: string;
  /** The FoU link serving the address. */
  interface: string;
}

type NatKey = 'masqueradedPackets' | 'masqueradedBytes' | 'invalidPackets' | 'invalidBytes';

/** Every coil-egress metric. Not safe for concurrent `setNat` calls (the collector loop is single). */
export class EgressMetrics {
  readonly registry = new Registry();
  private readonly clientCount: Gauge<'namespace' | 'egress'>;
  private readonly clientInfo: Gauge<'namespace' | 'pod' | 'pod_ip' | 'interface' | 'egress' | 'egress_namespace'>;
  private readonly conntrackCount: Gauge<'namespace' | 'pod' | 'egress'>;
  private readonly conntrackLimit: Gauge<'namespace' | 'pod' | 'egress'>;
  private readonly kernelFeature: Gauge<'feature'>;
  private readonly nat: Record<NatKey, Counter<'namespace' | 'pod' | 'egress' | 'protocol'>>;
  private readonly lastNat = new Map<string, number>();

  constructor(private readonly labels: EgressMetricLabels, opts: { defaultMetrics?: boolean } = {}) {
    const registers = [this.registry];
    this.clientCount = new Gauge({ name: 'coil_egress_client_pod_count', help: 'the number of client pods which use this egress', labelNames: ['namespace', 'egress'], registers });
    this.clientInfo = new Gauge({ name: 'coil_egress_client_pod_info', help: 'information of a client pod which uses this egress', labelNames: ['namespace', 'pod', 'pod_ip', 'interface', 'egress', 'egress_namespace'], registers });
    this.conntrackCount = new Gauge({ name: 'coil_egress_nf_conntrack_entries_count', help: 'the number of entries in the nf_conntrack table', labelNames: ['namespace', 'pod', 'egress'], registers });
    this.conntrackLimit = new Gauge({ name: 'coil_egress_nf_conntrack_entries_limit', help: 'the limit of the nf_conntrack table', labelNames: ['namespace', 'pod', 'egress'], registers });
    this.kernelFeature = new Gauge({ name: 'coil_egress_kernel_feature', help: '1 when the kernel feature is available, 0 when missing (fou, ipip, ip6tnl)', labelNames: ['feature'], registers });
    const counter = (name: string, help: string) => new Counter({ name, help, labelNames: ['namespace', 'pod', 'egress', 'protocol'], registers });
    this.nat = {
      masqueradedPackets: counter('coil_egress_nftables_masqueraded_packets_total', 'packets masqueraded by nftables (first packet of each connection)'),
      masqueradedBytes: counter('coil_egress_nftables_masqueraded_bytes_total', 'bytes masqueraded by nftables (first packet of each connection)'),
      invalidPackets: counter('coil_egress_nftables_invalid_packets_total', 'forwarded packets dropped by nftables as conntrack state invalid'),
      invalidBytes: counter('coil_egress_nftables_invalid_bytes_total', 'forwarded bytes dropped by nftables as conntrack state invalid'),
    };
    this.clientCount.set({ namespace: labels.namespace, egress: labels.egress }, 0);
    if (opts.defaultMetrics ?? true) collectDefaultMetrics({ register: this.registry });
  }

  /** Records the kernel features probed at start. */
  setKernelFeatures(features: Readonly<Record<string, boolean>>): void {
    for (const [feature, ok] of Object.entries(features)) this.kernelFeature.set({ feature }, ok ? 1 : 0);
  }

  /** Replaces the client series: the count of pods and one info series per pod address. */
  setClients(pods: number, infos: readonly ClientPodInfo[]): void {
    this.clientCount.set({ namespace: this.labels.namespace, egress: this.labels.egress }, pods);
    this.clientInfo.reset();
    for (const i of infos) {
      this.clientInfo.set({ namespace: i.namespace, pod: i.pod, pod_ip: i.podIp, interface: i.interface, egress: this.labels.egress, egress_namespace: this.labels.namespace }, 1);
    }
  }

  /** Sets the conntrack gauges. */
  setConntrack(count: number, limit: number): void {
    const l = { namespace: this.labels.namespace, pod: this.labels.pod, egress: this.labels.egress };
    this.conntrackCount.set(l, count);
    this.conntrackLimit.set(l, limit);
  }

  /** Advances the NAT counters to the values read from nftables. */
  setNat(counters: NatCountersByFamily): void {
    for (const family of [4, 6] as const) {
      const c = counters[family];
      if (!c) continue;
      const protocol = family === 4 ? 'ipv4' : 'ipv6';
      this.advance('masqueradedPackets', protocol, c.masqueraded, 'packets');
      this.advance('masqueradedBytes', protocol, c.masqueraded, 'bytes');
      this.advance('invalidPackets', protocol, c.invalid, 'packets');
      this.advance('invalidBytes', protocol, c.invalid, 'bytes');
    }
  }

  private advance(key: NatKey, protocol: string, c: NftCounter, field: keyof NftCounter): void {
    const id = `${key}|${protocol}`;
    const now = c[field];
    const before = this.lastNat.get(id) ?? 0;
    this.lastNat.set(id, now);
    this.nat[key].inc({ namespace: this.labels.namespace, pod: this.labels.pod, egress: this.labels.egress, protocol }, now >= before ? now - before : now);
  }
}
