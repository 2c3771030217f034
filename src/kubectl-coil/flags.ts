/**
 * `kubectl coil`'s command line: the command words first (`ipam show`), then flags, parsed with
 * the project's flag table (Go/pflag semantics, as kubectl's own). Every command takes kubectl's
 * standard flags — `--kubeconfig`, `--context`, `-n/--namespace`, `-o/--output` — as the krew
 * plugin guidelines ask.
 */
import { defineFlags, type FlagTable, type FlagSpecs } from '../runtime/flag-table.js';
import { ConfigError } from '../runtime/flags.js';
import { DEFAULT_THRESHOLDS } from '../ipam/ipam-check.js';
import { PORTS } from '../api/v2/keys.js';

/** Output formats: `table` (the default), `wide`, `json`, `yaml`. */
export const OUTPUTS = ['table', 'wide', 'json', 'yaml'] as const;
export type Output = (typeof OUTPUTS)[number];

const COMMON = {
  kubeconfig: { kind: 'string', help: 'path to the kubeconfig file (default: $KUBECONFIG, else the ServiceAccount inside a Pod, else ~/.kube/config)' },
  context: { kind: 'string', help: 'the kubeconfig context to use (default: its current-context)' },
  namespace: { kind: 'string', short: 'n', default: 'kube-system', help: "coil's namespace, where coild's Pods run" },
  output: { kind: 'enum', short: 'o', values: OUTPUTS, default: 'table', help: 'output format' },
} as const satisfies FlagSpecs;

/** `ms` as Go duration text (`5m`, `90s`). */
const secs = (ms: number): string => (ms % 60_000 === 0 ? `${ms / 60_000}m` : `${ms / 1000}s`);

export const SHOW_FLAGS = defineFlags('kubectl coil ipam show', {
  ...COMMON,
  'show-blocks': { kind: 'bool', default: false, help: 'list every AddressBlock: node, addresses used, free and cooling (from coild)' },
  ip: { kind: 'string', help: 'show the block, node and pod of one address' },
  'coild-port': { kind: 'port', default: PORTS.coildHealth, help: "coild's health port, where it serves GET /ipam (chart value coild.ports.health)" },
});

export const CHECK_FLAGS = defineFlags('kubectl coil ipam check', {
  ...COMMON,
  'stuck-deleting': { kind: 'duration', default: secs(DEFAULT_THRESHOLDS.stuckDeletingMs), help: 'a block deleting longer than this is reported' },
  'blockrequest-wait': { kind: 'duration', default: secs(DEFAULT_THRESHOLDS.blockRequestWaitMs), help: 'a BlockRequest unanswered longer than this is reported' },
  'pool-usage': { kind: 'int', default: DEFAULT_THRESHOLDS.poolUsagePercent, min: 1, max: 100, help: "a pool with this percentage of its blocks allocated, or more, is reported" },
  'coild-port': { kind: 'port', default: PORTS.coildHealth, help: "coild's health port, where it serves GET /ipam (chart value coild.ports.health)" },
});

export const RELEASE_FLAGS = defineFlags('kubectl coil ipam release', {
  ...COMMON,
  'from-report': { kind: 'strings', help: 'a report written by `ipam check -o json`; repeat it: only what every report names is acted on' },
  'dry-run': { kind: 'bool', default: false, help: 'print what would be done, change nothing' },
});

export const VERSION_FLAGS = defineFlags('kubectl coil version', {
  ...COMMON,
  client: { kind: 'bool', default: false, help: "print only this tool's version; read nothing from the cluster" },
});

export const COMMANDS = {
  version: VERSION_FLAGS,
  'ipam show': SHOW_FLAGS,
  'ipam check': CHECK_FLAGS,
  'ipam release': RELEASE_FLAGS,
} as const satisfies Record<string, FlagTable<FlagSpecs>>;

export type CommandName = keyof typeof COMMANDS;

export const USAGE = `kubectl coil: inspect and repair coil's IP address management.

Commands:
  kubectl coil ipam show [--show-blocks] [--ip ADDR]     pools, blocks and one address's owner
  kubectl coil ipam check [-o json] > report.json        find inconsistencies (exit 3 when any)
  kubectl coil ipam release --from-report FILE... [--dry-run]
                                                          act on what every report names and is still true
  kubectl coil version [--client]                        this tool's version, coil-controller's and each coild's

Every command takes --kubeconfig, --context, -n/--namespace (coil's, default kube-system) and
-o/--output table|wide|json|yaml; \`kubectl coil <command> --help\` lists the rest.
`;

/**
 * Splits `argv` into the command (its leading words) and the rest.
 * @throws ConfigError on an unknown command
 */
export function splitCommand(argv: readonly string[]): { command: CommandName | 'help'; rest: string[] } {
  const words: string[] = [];
  let i = 0;
  while (i < argv.length && !argv[i]!.startsWith('-') && words.length < 2) words.push(argv[i++]!);
  const rest = argv.slice(i);
  const name = words.join(' ');
  if (name === '' || name === 'help' || name === 'ipam') return { command: 'help', rest };
  if (name in COMMANDS) return { command: name as CommandName, rest };
  throw new ConfigError(`unknown command ${JSON.stringify(name)}`);
}
