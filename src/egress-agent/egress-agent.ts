/**
 * coil-egress wired together: kernel feature check, NAT rules, FoU receive side and return rule,
 * the client watcher, the metrics collector, and the HTTP endpoints (`/metrics`, `/healthz`,
 * `/readyz` with the checks `kernel`, `nat` and `pod-sync`).
 *
 * A kernel without FoU or IPIP does not crash the pod: it logs one clear error, exports
 * `coil_egress_kernel_feature{feature} 0`, and stays unready with the reason in `/readyz`, so the
 * Service never sends it traffic and `kubectl describe pod` shows why.
 * @see docs/compatibility.md#coil-egress-flags, docs/compatibility.md#the-nat-pod,
 *   docs/compatibility.md#metric-names-and-types
 */
import type { KubeConfig } from '@kubernetes/client-node';
import type Logger from 'bunyan';
import { addressFamily } from '../netlink/cidr.js';
import { probeFeatures, type KernelFeatures } from '../netlink/features.js';
import { IpRunner } from '../netlink/iproute2/ip-runner.js';
import { NetlinkExecutor } from '../netlink/netlink-executor.js';
import type { RtApplier, RtReader } from '../netlink/rt-request.js';
import { InProcessRtnetlink, isBun } from '../netlink/socket/rtnetlink-inprocess.js';
import { readSysctl } from '../netlink/sysctl.js';
import { ApiTransport } from '../runtime/api-transport.js';
import { HttpEndpoints } from '../runtime/http-servers.js';
import { RequestAuthorizer } from '../runtime/http-auth.js';
import { Client } from '../runtime/client.js';
import { endpointSecurity } from '../runtime/secure-serving.js';
import { selfSignedCert } from '../runtime/self-signed-cert.js';
import { RunnableSupervisor } from '../runtime/runnable.js';
import { ClientPodSource } from './client-pod-source.js';
import { ClientWatcher } from './client-watcher.js';
import type { EgressConfig } from './config.js';
import { NatDrain, type DrainOutcome } from './drain.js';
import { EgressMetrics } from './egress-metrics.js';
import { FouServer } from './fou-server.js';
import type { NatBackend } from './nat.js';
import { IptablesNat } from './nat-iptables.js';
import { NftablesNat } from './nat-nftables.js';

/** Constructor options of {@link EgressAgent}. */
export interface EgressAgentOptions {
  config: EgressConfig;
  kubeConfig: KubeConfig;
  log: Logger;
  /** Runs the programs (nft, iptables, conntrack, modprobe, sysctl). Default: a new IpRunner. */
  ip?: IpRunner;
  /**
   * Applies the tunnels' typed requests and reads (FoU ports, peer links, routes, the return
   * rule). Default: a NetlinkExecutor over coil-egress's own rtnetlink and genetlink socket when it
   * runs on Bun (the image), else over `ip`.
   */
  kernel?: RtApplier & RtReader;
}

/**
 * Features a family's tunnels need; missing ones are reported, not thrown.
 * @returns a sentence naming what is missing, or undefined
 */
export function missingKernelFeatures(f: KernelFeatures, families: ReadonlyArray<4 | 6>): string | undefined {
  const missing = [...(f.fou ? [] : ['fou']), ...(families.includes(4) && !f.ipip ? ['ipip'] : []), ...(families.includes(6) && !f.ip6tnl ? ['ip6tnl'] : [])];
  return missing.length === 0 ? undefined : `the kernel lacks ${missing.join(', ')}: FoU egress tunnels cannot be set up on this node (load the fou/ipip/ip6_tunnel modules or use a kernel with CONFIG_NET_FOU, CONFIG_NET_IPIP, CONFIG_IPV6_TUNNEL)`;
}

/**
 * The readiness check `pod-sync`: why the client tunnels are not in the kernel yet, or undefined
 * once the watcher synced its first complete list. (It read `watcher?.notReadyReason() ?? …`, which
 * turned a synced watcher's undefined into "not started": no NAT pod on a FoU kernel ever turned
 * ready; found running the real coil-egress in the failover bench, docs/egress-failover.md.)
 */
export function podSyncProblem(watcher: Pick<ClientWatcher, 'notReadyReason'> | undefined): string | undefined {
  return watcher === undefined ? 'client watcher not started' : watcher.notReadyReason();
}

/** The coil-egress process. */
export class EgressAgent {
  readonly metrics: EgressMetrics;
  /** Bound ports after start (useful with port 0). */
  readonly ports: { metrics?: number; health?: number } = {};
  private readonly endpoints: HttpEndpoints;
  /** The one API connection: the client watch and the endpoints' reviews. */
  private readonly transport: ApiTransport;
  private readonly ip: IpRunner;
  private readonly nat: NatBackend;
  private readonly server: FouServer;
  private supervisor: RunnableSupervisor | undefined;
  private collector: NodeJS.Timeout | undefined;
  private kernelProblem: string | undefined = 'kernel features not probed yet';
  private natProblem: string | undefined = 'NAT rules not installed yet';
  private watcher: ClientWatcher | undefined;

  constructor(private readonly o: EgressAgentOptions) {
    const c = o.config;
    this.ip = o.ip ?? new IpRunner();
    this.metrics = new EgressMetrics({ namespace: c.namespace, egress: c.egressName, pod: c.podName });
    this.transport = new ApiTransport(o.kubeConfig, { http2: c.apiHttp2 });
    this.endpoints = new HttpEndpoints(this.metrics.registry, endpointSecurity(c.secureEndpoints, () => ({
      authorizer: new RequestAuthorizer({ client: new Client(this.transport, 'coil-egress') }),
      tls: selfSignedCert([c.podName, ...c.podAddresses]),
    })));
    const natOptions = { ip: this.ip, podAddresses: c.podAddresses, outInterface: c.outInterface, snatAddresses: c.snatAddresses };
    this.nat = c.backend === 'iptables' ? new IptablesNat(natOptions) : new NftablesNat(natOptions);
    const kernel = o.kernel ?? new NetlinkExecutor({ ip: this.ip, ...(isBun ? { rtnetlink: new InProcessRtnetlink() } : {}) });
    this.server = new FouServer({ ip: this.ip, kernel, podAddresses: c.podAddresses, port: c.fouPort, isSourcePortAuto: c.isSourcePortAuto, outInterface: c.outInterface });
  }


  /**
   * Serves the endpoints, installs NAT, and — when the kernel can — the tunnels and the watcher.
   * @throws Error when a port is taken or the pod addresses are unusable
   */
  async start(): Promise<void> {
    const c = this.o.config;
    const log = this.o.log;
    if (!c.podAddresses.some((a) => addressFamily(a) !== undefined)) throw new Error(`COIL_POD_ADDRESSES holds no IP address: ${c.podAddresses.join(',')}`);
    this.endpoints.healthChecks.set('ping', () => undefined);
    this.endpoints.readyChecks.set('kernel', () => this.kernelProblem);
    this.endpoints.readyChecks.set('nat', () => this.natProblem);
    this.endpoints.readyChecks.set('pod-sync', () => podSyncProblem(this.watcher));
    if (c.metricsAddr) this.ports.metrics = await this.endpoints.listen(c.metricsAddr, { metrics: true, probes: same(c.metricsAddr, c.healthAddr) });
    if (c.healthAddr && !same(c.metricsAddr, c.healthAddr)) this.ports.health = await this.endpoints.listen(c.healthAddr, { probes: true });

    const features = await probeFeatures(this.ip);
    this.metrics.setKernelFeatures({ fou: features.fou, ipip: features.ipip, ip6tnl: features.ip6tnl });
    this.kernelProblem = missingKernelFeatures(features, this.server.families());
    if (this.kernelProblem) log.error({ features }, this.kernelProblem);

    await this.nat.init();
    this.natProblem = undefined;
    log.info({ backend: c.backend, outInterface: c.outInterface, snatAddresses: c.snatAddresses }, c.snatAddresses.length > 0
      ? `NAT rules installed: client flows SNAT to the shared address${c.snatAddresses.length > 1 ? 'es' : ''} ${c.snatAddresses.join(', ')}`
      : 'NAT rules installed');
    const unusedSnat = c.snatAddresses.filter((a) => !c.podAddresses.some((p) => addressFamily(p) === addressFamily(a)));
    if (unusedSnat.length > 0) log.warn({ snatAddresses: unusedSnat }, 'the pod has no address of the family of a shared address: no NAT rules of that family, the address is unused');
    // Conntrack and NAT counters mean something without tunnels too (and the dashboard's panels
    // stay filled on a node that lacks FoU), so they are collected either way.
    this.collector = setInterval(() => void this.collect(), c.metricsIntervalMs);
    this.collector.unref();
    void this.collect();
    if (this.kernelProblem) return;

    await this.server.init();
    const source: ClientPodSource = new ClientPodSource({
      transport: this.transport,
      egress: { namespace: c.namespace, name: c.egressName }, log: log.child({ component: 'client-pods' }),
      onChange: () => this.watcher?.notify(),
    });
    this.watcher = new ClientWatcher({ source, server: this.server, metrics: this.metrics, log: log.child({ component: 'client-watcher' }) });
    this.supervisor = new RunnableSupervisor({ name: 'client-watcher', leaderOnly: false }, this.watcher, log);
    this.supervisor.start();
  }

  /** Reads conntrack and nft counters into the metrics; failures are logged, never thrown. */
  async collect(): Promise<void> {
    try {
      const [count, limit] = await Promise.all([readSysctl(this.ip, 'net.netfilter.nf_conntrack_count'), readSysctl(this.ip, 'net.netfilter.nf_conntrack_max')]);
      this.metrics.setConntrack(Number(count), Number(limit));
    } catch (err) {
      this.o.log.debug({ err }, 'conntrack counters unavailable');
    }
    try {
      this.metrics.setNat(await this.nat.counters());
    } catch (err) {
      this.o.log.warn({ err, backend: this.o.config.backend }, 'cannot read the NAT rule counters');
    }
  }

  /**
   * The drain before a graceful stop (SIGTERM): everything keeps running — data path, watcher,
   * endpoints, readiness — until the established client flows through this pod ended or
   * `--drain-timeout` passed (drain.ts); resolves at once with `--drain-timeout=0`. Never throws.
   */
  async drain(signal?: AbortSignal): Promise<DrainOutcome> {
    const c = this.o.config;
    return new NatDrain({ ip: this.ip, log: this.o.log.child({ component: 'drain' }), families: this.server.families(), timeoutMs: c.drainTimeoutMs }).run(signal);
  }

  /** Stops the watcher and the servers; the kernel state stays (a restarted agent adopts it). */
  async stop(): Promise<void> {
    clearInterval(this.collector);
    await this.supervisor?.stop(5_000);
    await this.endpoints.close();
    this.transport.close();
  }
}

function same(a: { host?: string; port: number } | undefined, b: { host?: string; port: number } | undefined): boolean {
  return !!a && !!b && a.port === b.port && (a.host ?? '0.0.0.0') === (b.host ?? '0.0.0.0');
}
