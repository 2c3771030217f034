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
import { parseArgs, type ParseArgsConfig } from 'node:util';

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

/** Usage text printed by `--help` and on a bad command line. */
export const USAGE = `Usage:
  coil-migrator dump [--etcd-endpoints=URL,...] [--etcd-prefix=/coil/] [--etcd-timeout=2s]
                     [--etcd-username=U --etcd-password=P] [--etcd-tls-ca=F --etcd-tls-cert=F --etcd-tls-key=F]
                     [--kubeconfig=F] [--dry-run] [--skip-uninstall]   > data.yaml
  coil-migrator replace [--yes] [--interval=10s] [--pod-timeout=5m] [--delete-bare-pods]
                        [--coild-namespace=kube-system] [--coild-selector=SELECTOR] [--kubeconfig=F]
`;

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

function parse(args: readonly string[], options: NonNullable<ParseArgsConfig['options']>): Record<string, string | boolean | undefined> {
  try {
    return parseArgs({ args: [...args], strict: true, allowPositionals: false, options }).values as Record<string, string | boolean | undefined>;
  } catch (e) {
    throw new ConfigError((e as Error).message, { cause: e });
  }
}

function parseDump(args: readonly string[], env: NodeJS.ProcessEnv): DumpConfig {
  const v = parse(args, {
    'etcd-endpoints': { type: 'string', default: 'http://127.0.0.1:2379' },
    'etcd-prefix': { type: 'string', default: '/coil/' },
    'etcd-timeout': { type: 'string', default: '2s' },
    'etcd-username': { type: 'string' },
    'etcd-password': { type: 'string' },
    'etcd-tls-ca': { type: 'string' },
    'etcd-tls-cert': { type: 'string' },
    'etcd-tls-key': { type: 'string' },
    kubeconfig: { type: 'string' },
    'dry-run': { type: 'boolean', default: false },
    'skip-uninstall': { type: 'boolean', default: false },
  });
  const str = (k: string): string | undefined => (typeof v[k] === 'string' && v[k] !== '' ? (v[k] as string) : undefined);
  const endpoints = str('etcd-endpoints')!.split(',').map((e) => e.trim()).filter(Boolean);
  if (endpoints.length === 0) throw new ConfigError('--etcd-endpoints: no endpoint given');
  for (const e of endpoints) {
    if (!/^https?:\/\/[^/]+\/?$/.test(e)) throw new ConfigError(`--etcd-endpoints: ${JSON.stringify(e)} is not an http(s)://host:port URL (@name endpoints are not resolved)`);
  }
  if ((str('etcd-tls-cert') === undefined) !== (str('etcd-tls-key') === undefined)) throw new ConfigError('--etcd-tls-cert and --etcd-tls-key go together');
  if ((str('etcd-username') === undefined) !== (str('etcd-password') === undefined)) throw new ConfigError('--etcd-username and --etcd-password go together');
  const timeoutMs = parseDuration('etcd-timeout', str('etcd-timeout')!);
  if (timeoutMs <= 0) throw new ConfigError('--etcd-timeout must be positive');
  const etcd: EtcdConfig = {
    endpoints,
    prefix: v['etcd-prefix'] as string,
    timeoutMs,
    ...optional({ username: str('etcd-username'), password: str('etcd-password'), tlsCa: str('etcd-tls-ca'), tlsCert: str('etcd-tls-cert'), tlsKey: str('etcd-tls-key') }),
  };
  const kubeconfig = str('kubeconfig') ?? env.KUBECONFIG;
  return { command: 'dump', etcd, dryRun: v['dry-run'] === true, skipUninstall: v['skip-uninstall'] === true, ...(kubeconfig ? { kubeconfig } : {}) };
}

function parseReplace(args: readonly string[], env: NodeJS.ProcessEnv): ReplaceConfig {
  const v = parse(args, {
    yes: { type: 'boolean', short: 'y', default: false },
    interval: { type: 'string', default: '10s' },
    'pod-timeout': { type: 'string', default: '5m' },
    'delete-bare-pods': { type: 'boolean', default: false },
    'coild-namespace': { type: 'string', default: 'kube-system' },
    'coild-selector': { type: 'string', default: 'app.kubernetes.io/name=coil,app.kubernetes.io/component=coild' },
    kubeconfig: { type: 'string' },
  });
  const kubeconfig = (v.kubeconfig as string | undefined) || env.KUBECONFIG;
  const podTimeoutMs = parseDuration('pod-timeout', v['pod-timeout'] as string);
  if (podTimeoutMs <= 0) throw new ConfigError('--pod-timeout must be positive');
  return {
    command: 'replace',
    yes: v.yes === true,
    intervalMs: parseDuration('interval', v.interval as string),
    podTimeoutMs,
    deleteBarePods: v['delete-bare-pods'] === true,
    coildNamespace: v['coild-namespace'] as string,
    coildSelector: v['coild-selector'] as string,
    ...(kubeconfig ? { kubeconfig } : {}),
  };
}

function optional<T extends Record<string, string | undefined>>(o: T): Partial<Record<keyof T, string>> {
  return Object.fromEntries(Object.entries(o).filter(([, x]) => x !== undefined)) as Partial<Record<keyof T, string>>;
}
