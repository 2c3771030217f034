/**
 * coil-egress flags and environment: Coil's names and defaults
 * (docs/compatibility.md#coil-egress-flags), `--backend` included (`iptables`, Coil's
 * default, or `nftables`). Environment variables are read here and in main.ts only.
 */
import { parseArgs } from 'node:util';
import { ConfigError, parseBackend, parseBindAddress } from '../runtime/flags.js';
import { DEFAULT_NETFILTER_BACKEND, FOU_PORT, PORTS, type NetfilterBackend } from '../api/v2/keys.js';
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
  /** `--log-level` (ours), default `info`. */
  readonly logLevel: 'trace' | 'debug' | 'info' | 'warn' | 'error' | 'fatal';
  /** `--metrics-interval` (ours), default 30 000 ms as Coil's collector: conntrack and nft reads. */
  readonly metricsIntervalMs: number;
}

/** A flag or environment value coil-egress cannot use (the runtime's ConfigError, under coil-egress's name). */
export { ConfigError as EgressConfigError };

/**
 * Parses argv (without node and script) and the environment.
 * @throws ConfigError naming the flag or variable
 */
export function parseEgressConfig(argv: readonly string[], env: Readonly<Record<string, string | undefined>>): EgressConfig {
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({
      args: [...argv].map((a) => (a === '--enable-sport-auto=true' ? '--enable-sport-auto' : a)).filter((a) => a !== '--enable-sport-auto=false'),
      options: {
        'metrics-addr': { type: 'string', default: `:${PORTS.egressMetrics}` },
        'health-addr': { type: 'string', default: `:${PORTS.egressHealth}` },
        'fou-port': { type: 'string', default: String(FOU_PORT) },
        'enable-sport-auto': { type: 'boolean', default: false },
        backend: { type: 'string', default: DEFAULT_NETFILTER_BACKEND },
        'out-interface': { type: 'string', default: 'eth0' },
        kubeconfig: { type: 'string' },
        'log-level': { type: 'string', default: 'info' },
        'metrics-interval-seconds': { type: 'string', default: '30' },
      },
      strict: true,
    }));
  } catch (err) {
    throw new ConfigError((err as Error).message);
  }
  const need = (name: string): string => {
    const v = env[name];
    if (!v) throw new ConfigError(`environment variable ${name} is required`);
    return v;
  };
  const fouPort = Number(values['fou-port']);
  if (!Number.isInteger(fouPort) || fouPort < 1 || fouPort > 65535) throw new ConfigError(`--fou-port: bad port ${String(values['fou-port'])}`);
  const backend = parseBackend(String(values.backend));
  const level = String(values['log-level']);
  if (!['trace', 'debug', 'info', 'warn', 'error', 'fatal'].includes(level)) throw new ConfigError(`--log-level: bad level ${level}`);
  const intervalS = Number(values['metrics-interval-seconds']);
  if (!(intervalS > 0)) throw new ConfigError('--metrics-interval-seconds must be > 0');
  const addresses = need('COIL_POD_ADDRESSES').split(',').map((a) => a.trim()).filter(Boolean);
  const metricsAddr = parseBindAddress(String(values['metrics-addr']));
  const healthAddr = parseBindAddress(String(values['health-addr']));
  return {
    namespace: need('COIL_POD_NAMESPACE'),
    egressName: need('COIL_EGRESS_NAME'),
    podAddresses: addresses,
    podName: env.HOSTNAME ?? 'unknown',
    ...(metricsAddr ? { metricsAddr } : {}),
    ...(healthAddr ? { healthAddr } : {}),
    fouPort,
    isSourcePortAuto: values['enable-sport-auto'] === true,
    backend,
    outInterface: String(values['out-interface']),
    ...(typeof values.kubeconfig === 'string' ? { kubeconfig: values.kubeconfig } : {}),
    logLevel: level as EgressConfig['logLevel'],
    metricsIntervalMs: Math.round(intervalS * 1000),
  };
}

export { parseBindAddress };
