/**
 * coil-egress flags and environment: Coil's names and defaults
 * (docs/compatibility.md#coil-egress-flags), `--backend` included (`iptables`, Coil's
 * default, or `nftables`). Environment variables are read here and in main.ts only.
 */
import { ConfigError, parseBindAddress } from '../runtime/flags.js';
import { defineFlags } from '../runtime/flag-table.js';
import { SECURE_ENDPOINTS_FLAG } from '../runtime/secure-serving.js';
import { DEFAULT_NETFILTER_BACKEND, DEFAULT_TERMINATION_GRACE_S, egressDrainSeconds, FOU_PORT, NETFILTER_BACKENDS, PORTS, type NetfilterBackend } from '../api/v2/keys.js';
import { canonicalSnatAddresses, snatAddressesProblems } from '../api/v2/snat-addresses.js';
import type { BindAddress } from '../runtime/http-servers.js';

/** Parsed configuration of one coil-egress process. */
export interface EgressConfig {
  /** Env `COIL_POD_NAMESPACE` (required): the Egress's namespace. */
  readonly namespace: string;
  /** Env `COIL_EGRESS_NAME` (required): the Egress this pod serves. */
  readonly egressName: string;
  /** Env `COIL_POD_ADDRESSES` (required): this pod's IPs (`status.podIPs`), plain addresses. */
  readonly podAddresses: readonly string[];
  /** Env `HOSTNAME`: the `pod` metric label. */
  readonly podName: string;
  /** `--metrics-addr`, default `:8080`; `0` disables. */
  readonly metricsAddr?: BindAddress;
  /** `--health-addr`, default `:8081`; `0` disables. */
  readonly healthAddr?: BindAddress;
  /**
   * `--secure-endpoints` (ours), default true: every endpoint but the probes over HTTPS to callers
   * the API server authenticates and authorizes (src/runtime/secure-serving.ts); false: Coil's plain HTTP.
   */
  readonly secureEndpoints: boolean;
  /** `--fou-port`, default 5555; must equal coild's `--egress-port` and the Service port. */
  readonly fouPort: number;
  /** `--enable-sport-auto`, default false: tunnels back to clients use a per-flow source port. */
  readonly isSourcePortAuto: boolean;
  /** `--backend`: `iptables` (default, as Coil's) or `nftables`; anything else is refused. */
  readonly backend: NetfilterBackend;
  /** `--out-interface` (ours), default `eth0` (Coil hard-codes it). */
  readonly outInterface: string;
  /** `--kubeconfig`, else in-cluster, else `~/.kube/config`. */
  readonly kubeconfig?: string;
  /**
   * `--api-http2` (ours), default true: speak HTTP/2 to the API server when it negotiates it, every
   * call and watch multiplexed over one connection as client-go does; false keeps HTTP/1.1, one
   * connection per open watch (src/runtime/api-transport.ts).
   */
  readonly apiHttp2: boolean;
  /** `--log-level` (ours), default `info`. */
  readonly logLevel: 'trace' | 'debug' | 'info' | 'warn' | 'error' | 'fatal';
  /** `--metrics-interval` (ours), default 30 000 ms as Coil's collector: conntrack and nft reads. */
  readonly metricsIntervalMs: number;
  /**
   * `--drain-timeout` (ours; Coil has none), default 25 000 ms: after SIGTERM, how long at most
   * the NAT pod keeps its data path for its established client flows before it exits; 0 exits at
   * once as Coil's does. Must fit the pod's `terminationGracePeriodSeconds` with the 5 s of the
   * shutdown after it (default grace 30 s; the controller derives the flag from a template's grace
   * period, src/reconcilers/egress-objects.ts). @see docs/egress-failover.md#draining
   */
  readonly drainTimeoutMs: number;
  /**
   * `--snat-addresses` (ours; Coil has none), default none: the Egress's shared addresses
   * (`spec.snatAddresses`), at most one per family, canonical text. The NAT rules of a family
   * with one SNAT to it instead of masquerading to the pod's own address, and drop new packets
   * from outside to it (src/netlink/netfilter/nftables.ts natRuleset), so that another NAT pod can take
   * over this pod's client flows. @see docs/egress-failover.md#sessions-kept-the-shared-snat-address
   */
  readonly snatAddresses: readonly string[];
}

/** A flag or environment value coil-egress cannot use (the runtime's ConfigError, under coil-egress's name). */
export { ConfigError as EgressConfigError };

/**
 * Default of `--drain-timeout`: what fits Kubernetes' default `terminationGracePeriodSeconds`
 * (30 s) with coil-egress's shutdown after it (keys.ts egressDrainSeconds): 25 s.
 */
export const DEFAULT_DRAIN_TIMEOUT = `${egressDrainSeconds(DEFAULT_TERMINATION_GRACE_S)}s`;

const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal'] as const;

/** coil-egress's flags. */
export const EGRESS_FLAGS = defineFlags('coil-egress', {
  'metrics-addr': { kind: 'addr', default: `:${PORTS.egressMetrics}`, help: 'listen address of /metrics; 0 disables' },
  'health-addr': { kind: 'addr', default: `:${PORTS.egressHealth}`, help: 'listen address of /healthz and /readyz; 0 disables' },
  'secure-endpoints': SECURE_ENDPOINTS_FLAG,
  'fou-port': { kind: 'port', default: FOU_PORT, help: "FoU port; must equal coild's --egress-port" },
  'enable-sport-auto': { kind: 'bool', default: false, help: 'tunnels back to clients use a per-flow source port' },
  backend: { kind: 'enum', values: NETFILTER_BACKENDS, default: DEFAULT_NETFILTER_BACKEND, help: 'netfilter backend of the NAT rules' },
  'out-interface': { kind: 'string', default: 'eth0', help: 'interface the NAT-ed traffic leaves by' },
  kubeconfig: { kind: 'string', help: 'kubeconfig file (default: in-cluster, ~/.kube/config)' },
  'api-http2': { kind: 'bool', default: true, help: 'speak HTTP/2 to the API server, every call and watch over one connection (false: HTTP/1.1, a connection per watch)' },
  'log-level': { kind: 'enum', values: LOG_LEVELS, default: 'info', help: 'log level' },
  'metrics-interval-seconds': { kind: 'string', default: '30', help: 'seconds between conntrack and nft reads for the metrics' },
  'drain-timeout': { kind: 'duration', default: DEFAULT_DRAIN_TIMEOUT, help: 'after SIGTERM, keep the data path until the established client flows end, at most this long; 0 exits at once' },
  'snat-addresses': { kind: 'strings', help: "the Egress's shared addresses (comma-separated or repeated, at most one per family): NAT client flows to them instead of the pod's own address, so another NAT pod can take its flows over" },
});

/**
 * Parses argv (without node and script) and the environment.
 * @throws ConfigError naming the flag or variable
 */
export function parseEgressConfig(argv: readonly string[], env: Readonly<Record<string, string | undefined>>): EgressConfig {
  const values = EGRESS_FLAGS.parse(argv);
  const need = (name: string): string => {
    const v = env[name];
    if (!v) throw new ConfigError(`environment variable ${name} is required`);
    return v;
  };
  const intervalS = Number(values['metrics-interval-seconds']);
  if (!(intervalS > 0)) throw new ConfigError('--metrics-interval-seconds must be > 0');
  const addresses = need('COIL_POD_ADDRESSES').split(',').map((a) => a.trim()).filter(Boolean);
  const snatAddresses = parseSnatAddresses(values['snat-addresses']);
  const metricsAddr = values['metrics-addr'];
  const healthAddr = values['health-addr'];
  return {
    namespace: need('COIL_POD_NAMESPACE'),
    egressName: need('COIL_EGRESS_NAME'),
    podAddresses: addresses,
    podName: env.HOSTNAME ?? 'unknown',
    ...(metricsAddr ? { metricsAddr } : {}),
    ...(healthAddr ? { healthAddr } : {}),
    secureEndpoints: values['secure-endpoints'],
    fouPort: values['fou-port'],
    isSourcePortAuto: values['enable-sport-auto'],
    backend: values.backend,
    outInterface: values['out-interface'],
    ...(values.kubeconfig !== undefined ? { kubeconfig: values.kubeconfig } : {}),
    apiHttp2: values['api-http2'],
    logLevel: values['log-level'],
    metricsIntervalMs: Math.round(intervalS * 1000),
    drainTimeoutMs: values['drain-timeout'],
    snatAddresses,
  };
}

/**
 * `--snat-addresses`' values, each comma-separated: plain unicast IP addresses, at most one per
 * family (the webhook's rule, src/api/v2/snat-addresses.ts; text need not be canonical here).
 * @returns the addresses in canonical text
 * @throws ConfigError naming the flag and the first bad value
 */
function parseSnatAddresses(values: readonly string[]): string[] {
  const items = values.flatMap((v) => v.split(',')).map((a) => a.trim());
  const problem = snatAddressesProblems(items, { canonical: false, name: (i) => JSON.stringify(items[i]) })[0];
  if (problem) throw new ConfigError(`--snat-addresses: ${JSON.stringify(problem.value)} ${problem.message}`);
  return canonicalSnatAddresses(items);
}

export { parseBindAddress };
