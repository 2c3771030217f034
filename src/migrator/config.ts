/**
 * coil-migrator flags. The etcd flags keep the names and defaults of cybozu-go/etcdutil, which the
 * original coil-migrator used, so documented command lines keep working. Environment variables are
 * read here and in main.ts only.
 *
 * @see docs/migration-from-coil-v1.md#prefix-and-etcd-flags,
 *   docs/migration-from-coil-v1.md#its-dump, docs/migration-from-coil-v1.md#its-replace,
 *   docs/migration-from-coil-v1.md#coil-migrator-in-this-repository
 */
import { ConfigError, parseDuration as parseGoDuration } from '../runtime/flags.js';
import { defineFlags } from '../runtime/flag-table.js';

/** How to reach the v1 etcd. */
export interface EtcdConfig {
  /** `--etcd-endpoints`, comma-separated URLs; default `http://127.0.0.1:2379`. `@name` is not resolved (as the original). */
  readonly endpoints: readonly string[];
  /** `--etcd-prefix`, default `/coil/`. */
  readonly prefix: string;
  /** `--etcd-timeout`, default 2 s: connecting and reading must finish within it. */
  readonly timeoutMs: number;
  /** `--etcd-username` / `--etcd-password`. */
  readonly username?: string;
  readonly password?: string;
  /** `--etcd-tls-ca`, `--etcd-tls-cert`, `--etcd-tls-key`: PEM file paths. */
  readonly tlsCa?: string;
  readonly tlsCert?: string;
  readonly tlsKey?: string;
}

/** `coil-migrator dump`. */
export interface DumpConfig {
  readonly command: 'dump';
  readonly kubeconfig?: string;
  readonly etcd: EtcdConfig;
  /** `--dry-run`: read and convert only; change nothing in the cluster. */
  readonly dryRun: boolean;
  /** `--skip-uninstall`: keep the v1 Kubernetes objects (the original's "DANGER!!" flag). */
  readonly skipUninstall: boolean;
}

/** `coil-migrator replace`. */
export interface ReplaceConfig {
  readonly command: 'replace';
  readonly kubeconfig?: string;
  /** `--yes`: do not ask for confirmation. */
  readonly yes: boolean;
  /** `--interval`, default 10 s: pause between nodes. */
  readonly intervalMs: number;
  /** `--pod-timeout`, default 5 m: how long to wait for one pod to be gone and replaced. */
  readonly podTimeoutMs: number;
  /** `--delete-bare-pods`: also delete pods no controller owns (they are NOT re-created). */
  readonly deleteBarePods: boolean;
  /** `--coild-namespace` (default `kube-system`) and `--coild-selector`: the coild pods to restart. */
  readonly coildNamespace: string;
  readonly coildSelector: string;
}

export type MigratorConfig = DumpConfig | ReplaceConfig;

export { ConfigError };

/** The flags of `coil-migrator dump` (etcdutil's names and defaults for the etcd ones). */
export const DUMP_FLAGS = defineFlags('coil-migrator dump', {
  'etcd-endpoints': { kind: 'string', default: 'http://127.0.0.1:2379', help: 'comma-separated http(s)://host:port URLs of the v1 etcd' },
  'etcd-prefix': { kind: 'string', default: '/coil/', help: "key prefix of Coil v1's data" },
  'etcd-timeout': { kind: 'duration', default: '2s', help: 'connecting and reading must finish within this' },
  'etcd-username': { kind: 'string', help: 'etcd user (with --etcd-password)' },
  'etcd-password': { kind: 'string', help: 'etcd password (with --etcd-username)' },
  'etcd-tls-ca': { kind: 'string', help: 'PEM file of the etcd CA' },
  'etcd-tls-cert': { kind: 'string', help: 'PEM file of the client certificate (with --etcd-tls-key)' },
  'etcd-tls-key': { kind: 'string', help: 'PEM file of the client key (with --etcd-tls-cert)' },
  kubeconfig: { kind: 'string', help: 'kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)' },
  'dry-run': { kind: 'bool', default: false, help: 'read and convert only; change nothing in the cluster' },
  'skip-uninstall': { kind: 'bool', default: false, help: 'keep the v1 Kubernetes objects (DANGER)' },
});

/** The flags of `coil-migrator replace`. */
export const REPLACE_FLAGS = defineFlags('coil-migrator replace', {
  yes: { kind: 'bool', short: 'y', default: false, help: 'do not ask for confirmation' },
  interval: { kind: 'duration', default: '10s', help: 'pause between nodes' },
  'pod-timeout': { kind: 'duration', default: '5m', help: 'how long to wait for one pod to be gone and replaced' },
  'delete-bare-pods': { kind: 'bool', default: false, help: 'also delete pods no controller owns (they are NOT re-created)' },
  'coild-namespace': { kind: 'string', default: 'kube-system', help: 'namespace of the coild pods to restart' },
  'coild-selector': { kind: 'string', default: 'app.kubernetes.io/name=coil,app.kubernetes.io/component=coild', help: 'label selector of the coild pods' },
  kubeconfig: { kind: 'string', help: 'kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)' },
});

/** Usage text printed by `--help` and on a bad command line: both commands' flag tables. */
export const USAGE = `Usage:
  coil-migrator dump [flags] > data.yaml
  coil-migrator replace [flags]

${DUMP_FLAGS.usage()}
${REPLACE_FLAGS.usage()}`;

/**
 * Parses a Go-style duration flag (`10s`, `1m30s`, `250ms`, `0`). @returns milliseconds
 * @throws ConfigError naming the flag on anything else
 */
export function parseDuration(flag: string, text: string): number {
  return parseGoDuration(text, flag);
}

/**
 * Parses `argv` (without node and script).
 * @throws ConfigError on a missing or unknown command, an unknown flag or a bad value
 */
export function parseConfig(argv: readonly string[], env: NodeJS.ProcessEnv): MigratorConfig {
  const [command, ...rest] = argv;
  if (command === 'dump') return parseDump(rest, env);
  if (command === 'replace') return parseReplace(rest, env);
  throw new ConfigError(command === undefined ? 'missing command: dump or replace' : `unknown command ${JSON.stringify(command)}: use dump or replace`);
}

function parseDump(args: readonly string[], env: NodeJS.ProcessEnv): DumpConfig {
  const v = DUMP_FLAGS.parse(args);
  // An empty value is no value, as etcdutil's.
  const str = (text: string | undefined): string | undefined => (text === '' ? undefined : text);
  const endpoints = v['etcd-endpoints'].split(',').map((e) => e.trim()).filter(Boolean);
  if (endpoints.length === 0) throw new ConfigError('--etcd-endpoints: no endpoint given');
  for (const e of endpoints) {
    if (!/^https?:\/\/[^/]+\/?$/.test(e)) throw new ConfigError(`--etcd-endpoints: ${JSON.stringify(e)} is not an http(s)://host:port URL (@name endpoints are not resolved)`);
  }
  const auth = { username: str(v['etcd-username']), password: str(v['etcd-password']), tlsCa: str(v['etcd-tls-ca']), tlsCert: str(v['etcd-tls-cert']), tlsKey: str(v['etcd-tls-key']) };
  if ((auth.tlsCert === undefined) !== (auth.tlsKey === undefined)) throw new ConfigError('--etcd-tls-cert and --etcd-tls-key go together');
  if ((auth.username === undefined) !== (auth.password === undefined)) throw new ConfigError('--etcd-username and --etcd-password go together');
  const timeoutMs = v['etcd-timeout'];
  if (timeoutMs <= 0) throw new ConfigError('--etcd-timeout must be positive');
  const etcd: EtcdConfig = { endpoints, prefix: v['etcd-prefix'], timeoutMs, ...optional(auth) };
  const kubeconfig = str(v.kubeconfig) ?? env.KUBECONFIG;
  return { command: 'dump', etcd, dryRun: v['dry-run'], skipUninstall: v['skip-uninstall'], ...(kubeconfig ? { kubeconfig } : {}) };
}

function parseReplace(args: readonly string[], env: NodeJS.ProcessEnv): ReplaceConfig {
  const v = REPLACE_FLAGS.parse(args);
  const kubeconfig = v.kubeconfig || env.KUBECONFIG;
  if (v['pod-timeout'] <= 0) throw new ConfigError('--pod-timeout must be positive');
  return {
    command: 'replace',
    yes: v.yes,
    intervalMs: v.interval,
    podTimeoutMs: v['pod-timeout'],
    deleteBarePods: v['delete-bare-pods'],
    coildNamespace: v['coild-namespace'],
    coildSelector: v['coild-selector'],
    ...(kubeconfig ? { kubeconfig } : {}),
  };
}

function optional<T extends Record<string, string | undefined>>(o: T): Partial<Record<keyof T, string>> {
  return Object.fromEntries(Object.entries(o).filter(([, x]) => x !== undefined)) as Partial<Record<keyof T, string>>;
}
