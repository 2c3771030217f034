/**
 * coil-controller flags: Coil's names and defaults
 * (docs/compatibility.md#coil-ipam-controller-flags) plus ours. Environment variables are read here
 * and in main.ts only.
 */
import { parseArgs } from 'node:util';
import { ConfigError, parseBackend, parseBindAddress, parseDuration } from '../runtime/flags.js';
import { LEADER_ELECTION_ID, PORTS } from '../api/v2/keys.js';
import { DEFAULT_EGRESS_OPTIONS, type NatBackend } from '../reconcilers/egress-options.js';
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
  /** `--webhook-addr`, default `:9443`. */
  readonly webhookAddr: BindAddress;
  /** `--cert-dir`, default `/certs`: holds `tls.crt` and `tls.key`. */
  readonly certDir: string;
  /** `--enable-webhooks` (ours), default true; false serves no webhook (e.g. local runs without certificates). */
  readonly enableWebhooks: boolean;
  /** `--kubeconfig`, else `$KUBECONFIG`, else in-cluster, else `~/.kube/config`. */
  readonly kubeconfig?: string;
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
  /** `--gc-interval` (1h), `--node-notready-reclaim` (1h), `--blockrequest-ttl` (5m). */
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
    readonly backend: NatBackend;
    /** `--egress-image`; absent: the controller's own image (read from its Pod by main.ts). */
    readonly image?: string;
  };
}

export { ConfigError, parseBindAddress, parseDuration };

/** Parses `argv` (without node and script). @throws ConfigError on an unknown flag or bad value */
export function parseConfig(argv: readonly string[], env: NodeJS.ProcessEnv): ControllerConfig {
  let parsed;
  try {
    parsed = parseArgs({
      args: [...argv],
      strict: true,
      options: {
        'metrics-addr': { type: 'string', default: `:${PORTS.controllerMetrics}` },
        'health-addr': { type: 'string', default: `:${PORTS.controllerHealth}` },
        'webhook-addr': { type: 'string', default: `:${PORTS.controllerWebhook}` },
        'cert-dir': { type: 'string', default: '/certs' },
        'enable-webhooks': { type: 'string', default: 'true' },
        'gc-interval': { type: 'string', default: '1h' },
        'node-notready-reclaim': { type: 'string', default: '1h' },
        'blockrequest-ttl': { type: 'string', default: '5m' },
        'enable-ipam': { type: 'string', default: 'true' },
        'enable-egress': { type: 'string', default: 'true' },
        'egress-port': { type: 'string', default: String(DEFAULT_EGRESS_OPTIONS.fouPort) },
        backend: { type: 'string', default: DEFAULT_EGRESS_OPTIONS.backend },
        'egress-image': { type: 'string' },
        'default-pool': { type: 'string' },
        kubeconfig: { type: 'string' },
        'leader-elect': { type: 'string', default: 'true' },
        'leader-election-id': { type: 'string', default: LEADER_ELECTION_ID },
        'leader-election-namespace': { type: 'string' },
        'graceful-shutdown': { type: 'string', default: '20s' },
        'log-level': { type: 'string' },
        // Coil's manifests pass controller-runtime's zap flags; accepted so they keep working.
        'zap-log-level': { type: 'string' },
        'zap-stacktrace-level': { type: 'string' },
        'zap-encoder': { type: 'string' },
        'zap-devel': { type: 'string' },
        'zap-time-encoding': { type: 'string' },
      },
    });
  } catch (e) {
    throw new ConfigError((e as Error).message, { cause: e });
  }
  const v = parsed.values;
  const level = v['log-level'] ?? v['zap-log-level'] ?? 'info';
  if (!['trace', 'debug', 'info', 'warn', 'error', 'fatal'].includes(level)) throw new ConfigError(`invalid log level ${level}`);
  const webhookAddr = parseBindAddress(v['webhook-addr']!);
  if (!webhookAddr) throw new ConfigError('--webhook-addr cannot be disabled; use --enable-webhooks=false');
  const metricsAddr = parseBindAddress(v['metrics-addr']!);
  const healthAddr = parseBindAddress(v['health-addr']!);
  const kubeconfig = v.kubeconfig ?? env.KUBECONFIG;
  const enableIpam = parseBool('enable-ipam', v['enable-ipam']!);
  const enableEgress = parseBool('enable-egress', v['enable-egress']!);
  if (!enableIpam && !enableEgress) throw new ConfigError('--enable-ipam and --enable-egress are both false: nothing to run');
  const fouPort = Number(v['egress-port']);
  if (!Number.isInteger(fouPort) || fouPort < 1 || fouPort > 65535) throw new ConfigError(`--egress-port: invalid port ${JSON.stringify(v['egress-port'])}`);
  const backend = parseBackend(v.backend!);
  const defaultPool = v['default-pool'] ? parseDefaultPool(v['default-pool']) : undefined;
  if (defaultPool && !enableIpam) throw new ConfigError('--default-pool needs --enable-ipam');
  return {
    ...(metricsAddr && { metricsAddr }),
    ...(healthAddr && { healthAddr }),
    webhookAddr,
    certDir: v['cert-dir']!,
    enableWebhooks: parseBool('enable-webhooks', v['enable-webhooks']!),
    ...(kubeconfig ? { kubeconfig } : {}),
    leaderElect: parseBool('leader-elect', v['leader-elect']!),
    leaderElectionId: v['leader-election-id']!,
    leaderElectionNamespace: v['leader-election-namespace'] ?? env.COIL_POD_NAMESPACE ?? 'kube-system',
    gracefulShutdownMs: parseDuration(v['graceful-shutdown']!),
    logLevel: level as ControllerConfig['logLevel'],
    ipam: {
      ...DEFAULT_IPAM_OPTIONS,
      gcIntervalMs: positive('gc-interval', parseDuration(v['gc-interval']!)),
      nodeNotReadyReclaimMs: parseDuration(v['node-notready-reclaim']!),
      blockRequestTtlMs: parseDuration(v['blockrequest-ttl']!),
    },
    enableIpam,
    enableEgress,
    ...(defaultPool ? { defaultPool } : {}),
    egress: { fouPort, backend, ...(v['egress-image'] ? { image: v['egress-image'] } : {}) },
  };
}

function parseBool(flag: string, text: string): boolean {
  if (text === 'true' || text === '') return true;
  if (text === 'false') return false;
  throw new ConfigError(`--${flag}: expected true or false, got ${JSON.stringify(text)}`);
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
