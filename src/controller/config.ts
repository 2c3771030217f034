/**
 * coil-controller flags: Coil's names and defaults
 * (docs/compatibility.md#coil-ipam-controller-flags) plus ours. Environment variables are read here
 * and in main.ts only.
 */
import { ConfigError, parseBindAddress, parseDuration } from '../runtime/flags.js';
import { defineFlags } from '../runtime/flag-table.js';
import { SECURE_ENDPOINTS_FLAG } from '../runtime/secure-serving.js';
import { LEADER_ELECTION_ID, NETFILTER_BACKENDS, PORTS, type NetfilterBackend } from '../api/v2/keys.js';
import { DEFAULT_EGRESS_OPTIONS } from '../reconcilers/egress-options.js';
import { DEFAULT_IPAM_OPTIONS, type IpamOptions } from '../reconcilers/options.js';
import type { BindAddress } from '../runtime/http-servers.js';
import type { AddressPoolSpec } from '../api/v2/addresspool.js';
import { validateAddressPoolSpec } from '../api/v2/addresspool-validation.js';
import { DEFAULT_BLOCK_SIZE_BITS } from '../api/v2/keys.js';

/** Parsed configuration of one coil-controller process. */
export interface ControllerConfig {
  /** `--metrics-addr`, default `:9386`; `0` disables. */
  readonly metricsAddr?: BindAddress;
  /** `--health-addr`, default `:9387`; `0` disables. */
  readonly healthAddr?: BindAddress;
  /**
   * `--secure-endpoints` (ours), default true: every endpoint but the probes over HTTPS to callers
   * the API server authenticates and authorizes (src/runtime/secure-serving.ts); false: Coil's plain HTTP.
   */
  readonly secureEndpoints: boolean;
  /** `--webhook-addr`, default `:9443`. */
  readonly webhookAddr: BindAddress;
  /** `--cert-dir`, default `/certs`: holds `tls.crt` and `tls.key`. */
  readonly certDir: string;
  /** `--enable-webhooks` (ours), default true; false serves no webhook (e.g. local runs without certificates). */
  readonly enableWebhooks: boolean;
  /** `--kubeconfig`, else `$KUBECONFIG`, else in-cluster, else `~/.kube/config`. */
  readonly kubeconfig?: string;
  /**
   * `--api-http2` (ours), default true: speak HTTP/2 to the API server when it negotiates it, every
   * call and watch multiplexed over one connection as client-go does; false keeps HTTP/1.1, one
   * connection per open watch (src/runtime/api-transport.ts).
   */
  readonly apiHttp2: boolean;
  /** `--leader-elect` (ours), default true. */
  readonly leaderElect: boolean;
  /** `--leader-election-id`, default `coil-leader`. */
  readonly leaderElectionId: string;
  /** `--leader-election-namespace`, default `$COIL_POD_NAMESPACE` or `kube-system`. */
  readonly leaderElectionNamespace: string;
  /** `--graceful-shutdown` (ours), default 20 s as Coil. */
  readonly gracefulShutdownMs: number;
  /** `--log-level` (ours; `--zap-log-level` is accepted as an alias), default `info`. */
  readonly logLevel: 'trace' | 'debug' | 'info' | 'warn' | 'error' | 'fatal';
  /** `--gc-interval` (1h), `--node-notready-reclaim` (1h), `--blockrequest-ttl` (5m), `--blockrequest-max-concurrent-reconciles` (16). */
  readonly ipam: IpamOptions;
  /** `--enable-ipam`, default true: AddressPool webhooks, AddressPool/BlockRequest reconcilers, GC. */
  readonly enableIpam: boolean;
  /** `--enable-egress`, default true: Egress webhooks and reconcilers. At least one of the two must be on. */
  readonly enableEgress: boolean;
  /**
   * `--default-pool` (ours): the spec of the AddressPool `default` as JSON, e.g.
   * `{"blockSizeBits":5,"subnets":[{"ipv4":"10.244.0.0/16"}]}`; the leader creates or adopts the
   * pool once its webhook serves (src/reconcilers/default-pool.ts). Absent: no default pool is made.
   */
  readonly defaultPool?: AddressPoolSpec;
  /** Egress settings (docs/compatibility.md#coil-egress-controller-flags). */
  readonly egress: {
    /** `--egress-port`, default 5555: the Egress Services' UDP port and coil-egress `--fou-port`. */
    readonly fouPort: number;
    /** `--backend` (`iptables` | `nftables`), default `iptables` as Coil's, passed to coil-egress. */
    readonly backend: NetfilterBackend;
    /** `--egress-image`; absent: the controller's own image (read from its Pod by main.ts). */
    readonly image?: string;
  };
}

export { ConfigError, parseBindAddress, parseDuration };

const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal'];

/** coil-controller's flags (the `release-finalizers` subcommand has its own table in main.ts). */
export const CONTROLLER_FLAGS = defineFlags('coil-controller', {
  'metrics-addr': { kind: 'addr', default: `:${PORTS.controllerMetrics}`, help: 'listen address of /metrics; 0 disables' },
  'health-addr': { kind: 'addr', default: `:${PORTS.controllerHealth}`, help: 'listen address of /healthz and /readyz; 0 disables' },
  'secure-endpoints': SECURE_ENDPOINTS_FLAG,
  'webhook-addr': { kind: 'addr', default: `:${PORTS.controllerWebhook}`, help: 'listen address of the admission webhooks' },
  'cert-dir': { kind: 'string', default: '/certs', help: 'directory holding the webhook certificate tls.crt and key tls.key' },
  'enable-webhooks': { kind: 'bool', default: true, help: 'serve the admission webhooks' },
  'gc-interval': { kind: 'duration', default: '1h', help: 'interval of the AddressBlock garbage collection' },
  'node-notready-reclaim': { kind: 'duration', default: '1h', help: 'reclaim the blocks of a Node NotReady this long' },
  'blockrequest-ttl': { kind: 'duration', default: '5m', help: 'keep a completed BlockRequest this long' },
  'blockrequest-max-concurrent-reconciles': { kind: 'int', default: DEFAULT_IPAM_OPTIONS.blockRequestConcurrency, min: 1, max: 1024, help: 'BlockRequests answered at once (the blockrequest controller\'s workers)' },
  'enable-ipam': { kind: 'bool', default: true, help: 'run the IPAM controller (AddressPool, BlockRequest, GC)' },
  'enable-egress': { kind: 'bool', default: true, help: 'run the Egress controller' },
  'egress-port': { kind: 'port', default: DEFAULT_EGRESS_OPTIONS.fouPort, help: "UDP port of the Egress Services and coil-egress's --fou-port" },
  backend: { kind: 'enum', values: NETFILTER_BACKENDS, default: DEFAULT_EGRESS_OPTIONS.backend, help: 'netfilter backend passed to coil-egress' },
  'egress-image': { kind: 'string', help: "image of the Egress pods (default: the controller's own)" },
  'default-pool': { kind: 'string', help: 'JSON AddressPoolSpec of the AddressPool "default" to create or adopt' },
  kubeconfig: { kind: 'string', help: 'kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)' },
  'api-http2': { kind: 'bool', default: true, help: 'speak HTTP/2 to the API server, every call and watch over one connection (false: HTTP/1.1, a connection per watch)' },
  'leader-elect': { kind: 'bool', default: true, help: 'run under Lease leader election' },
  'leader-election-id': { kind: 'string', default: LEADER_ELECTION_ID, help: 'name of the Lease' },
  'leader-election-namespace': { kind: 'string', help: 'namespace of the Lease (default: $COIL_POD_NAMESPACE or kube-system)' },
  'graceful-shutdown': { kind: 'duration', default: '20s', help: 'how long a shutdown may take' },
  'log-level': { kind: 'string', help: `log level: ${LOG_LEVELS.join(', ')} (default info)` },
  // Coil's manifests pass controller-runtime's zap flags; accepted so they keep working.
  'zap-log-level': { kind: 'string', help: 'alias of --log-level (controller-runtime)' },
  'zap-stacktrace-level': { kind: 'string', help: 'accepted and ignored (controller-runtime)' },
  'zap-encoder': { kind: 'string', help: 'accepted and ignored (controller-runtime)' },
  'zap-devel': { kind: 'string', help: 'accepted and ignored (controller-runtime)' },
  'zap-time-encoding': { kind: 'string', help: 'accepted and ignored (controller-runtime)' },
});

/** Parses `argv` (without node and script). @throws ConfigError on an unknown flag or bad value */
export function parseConfig(argv: readonly string[], env: NodeJS.ProcessEnv): ControllerConfig {
  const v = CONTROLLER_FLAGS.parse(argv);
  const level = v['log-level'] ?? v['zap-log-level'] ?? 'info';
  if (!LOG_LEVELS.includes(level)) throw new ConfigError(`invalid log level ${level}`);
  const webhookAddr = v['webhook-addr'];
  if (!webhookAddr) throw new ConfigError('--webhook-addr cannot be disabled; use --enable-webhooks=false');
  const metricsAddr = v['metrics-addr'];
  const healthAddr = v['health-addr'];
  const kubeconfig = v.kubeconfig ?? env.KUBECONFIG;
  const enableIpam = v['enable-ipam'];
  const enableEgress = v['enable-egress'];
  if (!enableIpam && !enableEgress) throw new ConfigError('--enable-ipam and --enable-egress are both false: nothing to run');
  const defaultPool = v['default-pool'] ? parseDefaultPool(v['default-pool']) : undefined;
  if (defaultPool && !enableIpam) throw new ConfigError('--default-pool needs --enable-ipam');
  return {
    ...(metricsAddr && { metricsAddr }),
    ...(healthAddr && { healthAddr }),
    secureEndpoints: v['secure-endpoints'],
    webhookAddr,
    certDir: v['cert-dir'],
    enableWebhooks: v['enable-webhooks'],
    ...(kubeconfig ? { kubeconfig } : {}),
    apiHttp2: v['api-http2'],
    leaderElect: v['leader-elect'],
    leaderElectionId: v['leader-election-id'],
    leaderElectionNamespace: v['leader-election-namespace'] ?? env.COIL_POD_NAMESPACE ?? 'kube-system',
    gracefulShutdownMs: v['graceful-shutdown'],
    logLevel: level as ControllerConfig['logLevel'],
    ipam: {
      ...DEFAULT_IPAM_OPTIONS,
      gcIntervalMs: positive('gc-interval', v['gc-interval']),
      nodeNotReadyReclaimMs: v['node-notready-reclaim'],
      blockRequestTtlMs: v['blockrequest-ttl'],
      blockRequestConcurrency: v['blockrequest-max-concurrent-reconciles'],
    },
    enableIpam,
    enableEgress,
    ...(defaultPool ? { defaultPool } : {}),
    egress: { fouPort: v['egress-port'], backend: v.backend, ...(v['egress-image'] ? { image: v['egress-image'] } : {}) },
  };
}

function positive(flag: string, ms: number): number {
  if (ms <= 0) throw new ConfigError(`--${flag} must be positive`);
  return ms;
}

/**
 * `--default-pool`: JSON of an AddressPoolSpec, checked by the webhook's own rules so a bad value
 * stops the controller at start, naming the field, instead of being refused by the API server later.
 */
function parseDefaultPool(text: string): AddressPoolSpec {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (e) {
    throw new ConfigError(`--default-pool: not JSON: ${(e as Error).message}`);
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw new ConfigError('--default-pool: expected a JSON object {"blockSizeBits":N,"subnets":[{"ipv4":…,"ipv6":…}]}');
  const p = parsed as { blockSizeBits?: unknown; subnets?: unknown };
  const spec = { blockSizeBits: p.blockSizeBits ?? DEFAULT_BLOCK_SIZE_BITS, subnets: p.subnets ?? [] } as AddressPoolSpec;
  if (!Array.isArray(spec.subnets)) throw new ConfigError('--default-pool: subnets must be a list');
  const errors = validateAddressPoolSpec(spec);
  if (errors.length > 0) throw new ConfigError(`--default-pool: ${errors.map((e) => `${e.field}: ${e.detail}`).join('; ')}`);
  return spec;
}

/** `coil-controller release-finalizers` (the chart's post-delete hook, release-finalizers.ts). */
export interface ReleaseFinalizersConfig {
  /** `--namespace` (required): the release's namespace. */
  readonly namespace: string;
  /** `--release` (required): the Helm release name. */
  readonly release: string;
  /** `--wait`, default 90 s: how long to wait for coild pods to go before releasing. */
  readonly waitMs: number;
  /** `--kubeconfig`, else `$KUBECONFIG`, else in-cluster, else `~/.kube/config`. */
  readonly kubeconfig?: string;
}

/** The flags of `coil-controller release-finalizers`. */
export const RELEASE_FINALIZERS_FLAGS = defineFlags('coil-controller release-finalizers', {
  namespace: { kind: 'string', help: "the release's namespace (required)" },
  release: { kind: 'string', help: 'the Helm release name (required)' },
  wait: { kind: 'duration', default: '90s', help: 'how long to wait before releasing the finalizers' },
  kubeconfig: { kind: 'string', help: 'kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)' },
});

/** Parses the arguments after `release-finalizers`. @throws ConfigError on a missing, unknown or bad flag */
export function parseReleaseFinalizersConfig(argv: readonly string[], env: NodeJS.ProcessEnv): ReleaseFinalizersConfig {
  const v = RELEASE_FINALIZERS_FLAGS.parse(argv);
  if (!v.namespace || !v.release) throw new ConfigError('--namespace and --release are required');
  const kubeconfig = v.kubeconfig ?? env.KUBECONFIG;
  return { namespace: v.namespace, release: v.release, waitMs: v.wait, ...(kubeconfig ? { kubeconfig } : {}) };
}
