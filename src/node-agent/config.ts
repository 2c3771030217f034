/**
 * coild flags: Coil's names and defaults (docs/compatibility.md#coild-flags) plus ours. Environment
 * variables are read here and in main.ts only. Booleans take Go's forms: `--flag`,
 * `--flag=true`, `--flag=false`.
 */
import { ConfigError, parseBindAddress, parseDuration } from '../runtime/flags.js';
import { defineFlags } from '../runtime/flag-table.js';
import { SECURE_ENDPOINTS_FLAG } from '../runtime/secure-serving.js';
import { NETFILTER_BACKENDS, DEFAULT_NETFILTER_BACKEND, DEFAULT_SOCKET_PATH, EXPORT_TABLE_ID, FOU_PORT, POD_RULE_PRIO, POD_TABLE_ID, PORTS, PROTOCOL_ID, type NetfilterBackend } from '../api/v2/keys.js';
import type { BindAddress } from '../runtime/http-servers.js';

/** Parsed configuration of one coild process. */
export interface CoildConfig {
  /** Env `COIL_NODE_NAME` (required): the Node this coild serves. */
  readonly nodeName: string;
  /** `--metrics-addr`, default `:9384`; `0` disables. */
  readonly metricsAddr?: BindAddress;
  /** `--health-addr`, default `:9385` (`/healthz`, `/readyz`, `/ipam`); `0` disables. */
  readonly healthAddr?: BindAddress;
  /**
   * `--secure-endpoints` (ours), default true: every endpoint but the probes over HTTPS to callers
   * the API server authenticates and authorizes (src/runtime/secure-serving.ts); false: Coil's plain HTTP.
   */
  readonly secureEndpoints: boolean;
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
  /**
   * `--api-http2` (ours), default true: speak HTTP/2 to the API server when it negotiates it, every
   * call and watch multiplexed over one connection as client-go does; false keeps HTTP/1.1, one
   * connection per open watch (src/runtime/api-transport.ts).
   */
  readonly apiHttp2: boolean;
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
  /**
   * `--egress-nat-steering` (ours), default true: coild probes the NAT pods and points each client
   * tunnel at a healthy one itself; false points tunnels at the Service ClusterIP as Coil's coild
   * does (docs/egress-failover.md).
   */
  readonly egressNatSteering: boolean;
  /** `--egress-probe-interval` (ours), default 100ms: period of the probe of each NAT pod. */
  readonly egressProbeIntervalMs: number;
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

const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal'];

/** coild's flags. */
export const COILD_FLAGS = defineFlags('coild', {
  'metrics-addr': { kind: 'addr', default: `:${PORTS.coildMetrics}`, help: 'listen address of /metrics; 0 disables' },
  'health-addr': { kind: 'addr', default: `:${PORTS.coildHealth}`, help: 'listen address of /healthz, /readyz and /ipam; 0 disables' },
  'secure-endpoints': SECURE_ENDPOINTS_FLAG,
  'pod-table-id': { kind: 'int', default: POD_TABLE_ID, max: 2 ** 32 - 1, help: 'routing table of the routes to pods' },
  'pod-rule-prio': { kind: 'int', default: POD_RULE_PRIO, max: 2 ** 32 - 1, help: 'priority of the routing rule to the pod table' },
  'export-table-id': { kind: 'int', default: EXPORT_TABLE_ID, max: 2 ** 32 - 1, help: 'routing table of the exported address blocks' },
  'protocol-id': { kind: 'int', default: PROTOCOL_ID, max: 255, help: 'route protocol of the exported routes' },
  socket: { kind: 'string', default: DEFAULT_SOCKET_PATH, help: 'UNIX socket of the CNI gRPC service' },
  'addressblock-gc-interval': { kind: 'duration', default: '5m', help: 'interval of the AddressBlock garbage collection' },
  'cooling-period': { kind: 'duration', default: '30s', help: 'a freed address is not reused for this long' },
  'block-release-grace': { kind: 'duration', default: '1m', help: 'an empty block is released after this long' },
  'low-water-mark': { kind: 'int', default: 8, max: 2 ** 31, help: 'request the next block when fewer addresses are free; 0 disables' },
  'alloc-timeout': { kind: 'duration', default: '30s', help: 'how long an ADD waits for a new block' },
  'graceful-shutdown': { kind: 'duration', default: '20s', help: 'how long a shutdown may take' },
  kubeconfig: { kind: 'string', help: 'kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)' },
  'api-http2': { kind: 'bool', default: true, help: 'speak HTTP/2 to the API server, every call and watch over one connection (false: HTTP/1.1, a connection per watch)' },
  'host-netns': { kind: 'string', help: 'a netns file standing in for the host netns (tests, labs)' },
  'cni-conf-file': { kind: 'string', help: "coil's conflist, removed when the release is uninstalled" },
  'log-level': { kind: 'string', help: `log level: ${LOG_LEVELS.join(', ')} (default info)` },
  'zap-log-level': { kind: 'string', help: 'alias of --log-level (controller-runtime)' },
  'clear-routes-on-shutdown': { kind: 'bool', default: false, help: 'flush the export table at shutdown when the Node is gone' },
  // No default: unset picks by runtime (on under Node, off under Bun).
  'spawn-helper': { kind: 'bool', help: 'start ip through a helper process (default: on under Node, off under Bun)' },
  'netlink-agent': { kind: 'bool', default: true, help: 'apply pod wiring with rtnetlink instead of ip processes' },
  'enable-ipam': { kind: 'bool', default: true, help: 'run IPAM; false is the egress-only mode, chained after another CNI' },
  'enable-egress': { kind: 'bool', default: true, help: 'set up FoU tunnels for pods naming Egresses' },
  // Accepted by name so Coil's manifests parse, but not implemented: refused when switched on.
  'compat-calico': { kind: 'bool', default: false, help: 'not supported (refused when true)' },
  'register-from-main': { kind: 'bool', default: false, help: 'not supported (refused when true)' },
  'enable-originating-only': { kind: 'bool', default: false, help: 'answer connections that came in through a pod link through it' },
  'egress-port': { kind: 'port', default: FOU_PORT, help: "FoU port; must equal coil-egress's --fou-port" },
  'egress-nat-steering': { kind: 'bool', default: true, help: 'probe NAT pods and point client tunnels at a healthy one (false: at the Service ClusterIP, as Coil)' },
  'egress-probe-interval': { kind: 'duration', default: '100ms', help: 'period of the probe of each NAT pod through its tunnel (down after 3 unanswered)' },
  'egress-state-dir': { kind: 'string', default: '/run/coild/egress', help: 'where the netns of each egress client is recorded' },
  backend: { kind: 'enum', values: NETFILTER_BACKENDS, default: DEFAULT_NETFILTER_BACKEND, help: 'netfilter backend of the originating-only rules' },
});

/** The flags of `coild ipam-status`, which prints a running coild's `/ipam` page. */
export const IPAM_STATUS_FLAGS = defineFlags('coild ipam-status', {
  'health-addr': { kind: 'addr', default: `127.0.0.1:${PORTS.coildHealth}`, help: "the coild's --health-addr (0.0.0.0 is asked on 127.0.0.1)" },
  'secure-endpoints': { ...SECURE_ENDPOINTS_FLAG, help: "the coild's --secure-endpoints: ask over HTTPS with --token-file's token; false: plain HTTP" },
  'token-file': { kind: 'string', default: '/var/run/secrets/kubernetes.io/serviceaccount/token', help: 'bearer token sent with --secure-endpoints (default: the Pod\'s ServiceAccount token, which the chart allows get /ipam)' },
});

/** Parses `argv` (without node and script) and the environment. @throws ConfigError */
export function parseConfig(argv: readonly string[], env: NodeJS.ProcessEnv): CoildConfig {
  const v = COILD_FLAGS.parse(argv);
  const nodeName = env.COIL_NODE_NAME ?? '';
  if (!nodeName) throw new ConfigError('environment variable COIL_NODE_NAME is required');
  if (!v['enable-ipam'] && !v['enable-egress']) throw new ConfigError('--enable-ipam and --enable-egress are both false: nothing to run');
  if (v['compat-calico']) throw new ConfigError('--compat-calico is not supported: coil names host-side veths its own way (Calico-compatible names are not implemented)');
  if (v['register-from-main']) throw new ConfigError('--register-from-main is not supported: it migrates from Coil 2.0.1, whose routes coil does not read');
  const level = v['log-level'] ?? v['zap-log-level'] ?? 'info';
  if (!LOG_LEVELS.includes(level)) throw new ConfigError(`invalid log level ${level}`);
  const metricsAddr = v['metrics-addr'];
  const healthAddr = v['health-addr'];
  const kubeconfig = v.kubeconfig ?? env.KUBECONFIG;
  const hostNetns = v['host-netns'];
  return {
    nodeName,
    ...(metricsAddr && { metricsAddr }),
    ...(healthAddr && { healthAddr }),
    secureEndpoints: v['secure-endpoints'],
    podTableId: v['pod-table-id'],
    podRulePrio: v['pod-rule-prio'],
    exportTableId: v['export-table-id'],
    protocolId: v['protocol-id'],
    socketPath: v.socket,
    gcIntervalMs: positive('addressblock-gc-interval', v['addressblock-gc-interval']),
    clearRoutesOnShutdown: v['clear-routes-on-shutdown'],
    coolingMs: v['cooling-period'],
    blockReleaseGraceMs: v['block-release-grace'],
    lowWaterMark: v['low-water-mark'],
    allocTimeoutMs: positive('alloc-timeout', v['alloc-timeout']),
    ...(kubeconfig ? { kubeconfig } : {}),
    apiHttp2: v['api-http2'],
    ...(hostNetns ? { hostNetns } : {}),
    ...(v['cni-conf-file'] ? { cniConfFile: v['cni-conf-file'] } : {}),
    ...(env.COIL_POD_NAMESPACE && env.COIL_POD_NAME ? { pod: { namespace: env.COIL_POD_NAMESPACE, name: env.COIL_POD_NAME } } : {}),
    gracefulShutdownMs: v['graceful-shutdown'],
    logLevel: level as CoildConfig['logLevel'],
    enableIpam: v['enable-ipam'],
    enableEgress: v['enable-egress'],
    spawnHelper: v['spawn-helper'],
    netlinkAgent: v['netlink-agent'],
    egressPort: v['egress-port'],
    egressStateDir: v['egress-state-dir'],
    egressNatSteering: v['egress-nat-steering'],
    egressProbeIntervalMs: positive('egress-probe-interval', v['egress-probe-interval']),
    enableOriginatingOnly: v['enable-originating-only'],
    backend: v.backend,
  };
}

function positive(flag: string, ms: number): number {
  if (ms <= 0) throw new ConfigError(`--${flag} must be positive`);
  return ms;
}
