/**
 * coild flags: Coil's names and defaults (docs/compatibility.md#coild-flags) plus ours. Environment
 * variables are read here and in main.ts only. Booleans take Go's forms: `--flag`,
 * `--flag=true`, `--flag=false`.
 */
import { parseArgs } from 'node:util';
import { ConfigError, parseBackend, parseBindAddress, parseDuration } from '../runtime/flags.js';
import { DEFAULT_NETFILTER_BACKEND, DEFAULT_SOCKET_PATH, EXPORT_TABLE_ID, FOU_PORT, POD_RULE_PRIO, POD_TABLE_ID, PORTS, PROTOCOL_ID, type NetfilterBackend } from '../api/v2/keys.js';
import type { BindAddress } from '../runtime/http-servers.js';

/** Parsed configuration of one coild process. */
export interface CoildConfig {
  /** Env `COIL_NODE_NAME` (required): the Node this coild serves. */
  readonly nodeName: string;
  /** `--metrics-addr`, default `:9384`; `0` disables. */
  readonly metricsAddr?: BindAddress;
  /** `--health-addr`, default `:9385` (`/healthz`, `/readyz`, `/ipam`); `0` disables. */
  readonly healthAddr?: BindAddress;
  /** `--pod-table-id`, default 116. */
  readonly podTableId: number;
  /** `--pod-rule-prio`, default 2000. */
  readonly podRulePrio: number;
  /** `--export-table-id`, default 119. */
  readonly exportTableId: number;
  /** `--protocol-id`, default 30. */
  readonly protocolId: number;
  /** `--socket`, default `/run/coild.sock`. */
  readonly socketPath: string;
  /** `--addressblock-gc-interval`, default 5 min. */
  readonly gcIntervalMs: number;
  /** `--clear-routes-on-shutdown`, default false: flush table 119 at shutdown when the Node is gone (Coil #370). */
  readonly clearRoutesOnShutdown: boolean;
  /**
   * `--cni-conf-file` (ours): coil's conflist as coild sees it (the chart mounts the host's conf
   * dir). Removed when the release is uninstalled (uninstall.ts), so the node can run pods with
   * another CNI. Absent: never touched.
   */
  readonly cniConfFile?: string;
  /**
   * Env `COIL_POD_NAMESPACE` and `COIL_POD_NAME` (the chart's downward API): coild's own Pod, whose
   * owning DaemonSet tells an uninstall from a restart (uninstall.ts). Absent: no uninstall cleanup.
   */
  readonly pod?: { readonly namespace: string; readonly name: string };
  /** `--cooling-period` (ours), default 30 s: a freed address is not reused for this long. */
  readonly coolingMs: number;
  /** `--block-release-grace` (ours), default 1 min: an empty block is released after this long. */
  readonly blockReleaseGraceMs: number;
  /** `--low-water-mark` (ours), default 8: request the next block when fewer addresses are free; 0 disables. */
  readonly lowWaterMark: number;
  /** `--alloc-timeout` (ours), default 30 s: how long an ADD waits for a new block (Coil: 10 s). */
  readonly allocTimeoutMs: number;
  /** `--kubeconfig`, else `$KUBECONFIG`, else in-cluster, else `~/.kube/config`. */
  readonly kubeconfig?: string;
  /** `--host-netns` (ours): a netns file standing in for the host netns (tests, labs of several nodes on one machine). */
  readonly hostNetns?: string;
  /** `--graceful-shutdown` (ours), default 20 s as Coil's. */
  readonly gracefulShutdownMs: number;
  /**
   * `--enable-ipam`, default true as Coil's. False is Coil's egress-only mode: another CNI plugin
   * gives pods their addresses and network, coil is chained after it and only sets up egress.
   */
  readonly enableIpam: boolean;
  /** `--enable-egress`, default true as Coil's: set up FoU tunnels for pods naming Egresses. */
  readonly enableEgress: boolean;
  /** `--egress-port`, default 5555: FoU port; must equal coil-egress `--fou-port`. */
  readonly egressPort: number;
  /**
   * `--enable-originating-only`, default false as Coil's: in client pods, connections that came in
   * through a pod link are answered through it, not through the egress tunnel (originating-only.ts).
   */
  readonly enableOriginatingOnly: boolean;
  /** `--backend`, default `iptables` as Coil's: the netfilter backend of the originating-only connmark rules. */
  readonly backend: NetfilterBackend;
  /** `--egress-state-dir` (ours), default `/run/coild/egress`: netns of each egress client, recorded at ADD. */
  readonly egressStateDir: string;
  /** `--log-level` (ours; `--zap-log-level` is accepted too), default `info`. */
  readonly logLevel: 'trace' | 'debug' | 'info' | 'warn' | 'error' | 'fatal';
  /**
   * `--spawn-helper` (ours): start `ip` through a small helper process, whose fork() is cheaper
   * than coild's (spawn-helper.ts); `=false` spawns from coild itself. Default (undefined): on
   * under Node, off under Bun, which starts processes with posix_spawn at no cost that grows with
   * coild's memory.
   */
  readonly spawnHelper: boolean | undefined;
  /**
   * `--netlink-agent` (ours), default true: apply the pod wiring's typed requests with rtnetlink
   * — in coild itself under Bun, in the netlink agent process (netlink/netlink-agent.ts) under
   * Node — instead of an `ip` process per batch; `=false`, or a Node build without the agent,
   * runs `ip` for everything.
   */
  readonly netlinkAgent: boolean;
}

export { ConfigError, parseBindAddress, parseDuration };

const BOOLEAN_FLAGS = ['clear-routes-on-shutdown', 'spawn-helper', 'netlink-agent', 'enable-ipam', 'enable-egress', 'compat-calico', 'register-from-main', 'enable-originating-only'];

/** Parses `argv` (without node and script) and the environment. @throws ConfigError */
export function parseConfig(argv: readonly string[], env: NodeJS.ProcessEnv): CoildConfig {
  const falseFlags = new Set<string>();
  const trueFlags = new Set<string>();
  const args = argv.flatMap((a) => {
    const m = /^--([a-z-]+)=(true|false)$/.exec(a);
    if (!m || !BOOLEAN_FLAGS.includes(m[1]!)) return [a];
    (m[2] === 'false' ? falseFlags : trueFlags).add(m[1]!);
    return m[2] === 'true' ? [`--${m[1]}`] : [];
  });
  let v: Record<string, string | boolean | undefined>;
  try {
    v = parseArgs({
      args,
      strict: true,
      options: {
        'metrics-addr': { type: 'string', default: `:${PORTS.coildMetrics}` },
        'health-addr': { type: 'string', default: `:${PORTS.coildHealth}` },
        'pod-table-id': { type: 'string', default: String(POD_TABLE_ID) },
        'pod-rule-prio': { type: 'string', default: String(POD_RULE_PRIO) },
        'export-table-id': { type: 'string', default: String(EXPORT_TABLE_ID) },
        'protocol-id': { type: 'string', default: String(PROTOCOL_ID) },
        socket: { type: 'string', default: DEFAULT_SOCKET_PATH },
        'addressblock-gc-interval': { type: 'string', default: '5m' },
        'cooling-period': { type: 'string', default: '30s' },
        'block-release-grace': { type: 'string', default: '1m' },
        'low-water-mark': { type: 'string', default: '8' },
        'alloc-timeout': { type: 'string', default: '30s' },
        'graceful-shutdown': { type: 'string', default: '20s' },
        kubeconfig: { type: 'string' },
        'host-netns': { type: 'string' },
        'cni-conf-file': { type: 'string' },
        'log-level': { type: 'string' },
        'zap-log-level': { type: 'string' },
        ...Object.fromEntries(BOOLEAN_FLAGS.map((f) => [f, { type: 'boolean' as const }])),
        'egress-port': { type: 'string', default: String(FOU_PORT) },
        'egress-state-dir': { type: 'string', default: '/run/coild/egress' },
        backend: { type: 'string', default: DEFAULT_NETFILTER_BACKEND },
      },
    }).values;
  } catch (e) {
    throw new ConfigError((e as Error).message, { cause: e });
  }
  const nodeName = env.COIL_NODE_NAME ?? '';
  if (!nodeName) throw new ConfigError('environment variable COIL_NODE_NAME is required');
  if (falseFlags.has('enable-ipam') && falseFlags.has('enable-egress')) throw new ConfigError('--enable-ipam and --enable-egress are both false: nothing to run');
  // Accepted by name so Coil's manifests parse, but not implemented: refused when switched on.
  if (v['compat-calico'] === true) throw new ConfigError('--compat-calico is not supported: coil names host-side veths its own way (Calico-compatible names are not implemented)');
  if (v['register-from-main'] === true) throw new ConfigError('--register-from-main is not supported: it migrates from Coil 2.0.1, whose routes coil does not read');
  const level = (v['log-level'] ?? v['zap-log-level'] ?? 'info') as string;
  if (!['trace', 'debug', 'info', 'warn', 'error', 'fatal'].includes(level)) throw new ConfigError(`invalid log level ${level}`);
  const str = (k: string): string => v[k] as string;
  const metricsAddr = parseBindAddress(str('metrics-addr'));
  const healthAddr = parseBindAddress(str('health-addr'));
  const kubeconfig = (v.kubeconfig as string | undefined) ?? env.KUBECONFIG;
  const hostNetns = v['host-netns'] as string | undefined;
  return {
    nodeName,
    ...(metricsAddr && { metricsAddr }),
    ...(healthAddr && { healthAddr }),
    podTableId: integer('pod-table-id', str('pod-table-id'), 0, 2 ** 32 - 1),
    podRulePrio: integer('pod-rule-prio', str('pod-rule-prio'), 0, 2 ** 32 - 1),
    exportTableId: integer('export-table-id', str('export-table-id'), 0, 2 ** 32 - 1),
    protocolId: integer('protocol-id', str('protocol-id'), 0, 255),
    socketPath: str('socket'),
    gcIntervalMs: positive('addressblock-gc-interval', parseDuration(str('addressblock-gc-interval'))),
    clearRoutesOnShutdown: v['clear-routes-on-shutdown'] === true,
    coolingMs: parseDuration(str('cooling-period')),
    blockReleaseGraceMs: parseDuration(str('block-release-grace')),
    lowWaterMark: integer('low-water-mark', str('low-water-mark'), 0, 2 ** 31),
    allocTimeoutMs: positive('alloc-timeout', parseDuration(str('alloc-timeout'))),
    ...(kubeconfig ? { kubeconfig } : {}),
    ...(hostNetns ? { hostNetns } : {}),
    ...(v['cni-conf-file'] ? { cniConfFile: v['cni-conf-file'] as string } : {}),
    ...(env.COIL_POD_NAMESPACE && env.COIL_POD_NAME ? { pod: { namespace: env.COIL_POD_NAMESPACE, name: env.COIL_POD_NAME } } : {}),
    gracefulShutdownMs: parseDuration(str('graceful-shutdown')),
    logLevel: level as CoildConfig['logLevel'],
    enableIpam: !falseFlags.has('enable-ipam'),
    enableEgress: !falseFlags.has('enable-egress'),
    spawnHelper: falseFlags.has('spawn-helper') ? false : trueFlags.has('spawn-helper') || v['spawn-helper'] === true ? true : undefined,
    netlinkAgent: !falseFlags.has('netlink-agent'),
    egressPort: integer('egress-port', str('egress-port'), 1, 65535),
    egressStateDir: str('egress-state-dir'),
    enableOriginatingOnly: v['enable-originating-only'] === true,
    backend: parseBackend(str('backend')),
  };
}

function integer(flag: string, text: string, min: number, max: number): number {
  const n = Number(text);
  if (!/^\d+$/.test(text) || n < min || n > max) throw new ConfigError(`--${flag}: ${JSON.stringify(text)} is not an integer in [${min}, ${max}]`);
  return n;
}

function positive(flag: string, ms: number): number {
  if (ms <= 0) throw new ConfigError(`--${flag} must be positive`);
  return ms;
}
