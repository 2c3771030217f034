/**
 * One declarative flag table per command line, parsed with the semantics of Go's `flag`/`pflag`
 * packages, which Coil's programs use (docs/compatibility.md keeps their flag names and defaults):
 *
 * - `--name` and `-name` are the same flag; `-x` is the flag whose `short` is `x`;
 * - a non-boolean takes `--name=value` or `--name value` (the next argument, whatever it is);
 * - a boolean takes `--name` (true) or `--name=true|false` (and Go's other `strconv.ParseBool`
 *   spellings: 1, t, T, TRUE, True, 0, f, F, FALSE, False) — never a separate argument, so
 *   `--name false` is a positional argument, which no coil program accepts;
 * - the last occurrence of a flag wins; `--` ends the flags;
 * - `-h`, `-help` and `--help` raise {@link HelpRequested} with the usage text made from the table.
 *
 * Every value goes through the same typed parser whether given or defaulted, and every error is a
 * {@link ConfigError} whose message starts with the flag it is about.
 */
import type { BindAddress } from './http-servers.js';
import { ConfigError, parseBindAddress, parseDuration } from './flags.js';

interface FlagCommon {
  /** One line shown by `--help`. */
  readonly help: string;
  /** A one-letter alias, `-x` (pflag's shorthand). */
  readonly short?: string;
}

/** `--name`, `--name=true|false`. Absent and no default: `undefined` (a tri-state). */
export interface BoolFlag extends FlagCommon {
  readonly kind: 'bool';
  readonly default?: boolean;
}

/** Any text, taken as given (an empty value included). */
export interface StringFlag extends FlagCommon {
  readonly kind: 'string';
  readonly default?: string;
}

/**
 * Any text, repeatable: every occurrence is kept, in order (pflag's `StringArray`), e.g.
 * `--from-report a.json --from-report b.json`. Absent: `[]`.
 */
export interface StringListFlag extends FlagCommon {
  readonly kind: 'strings';
}

/** A decimal integer in [min, max] (defaults: 0 and 2^53 − 1). */
export interface IntFlag extends FlagCommon {
  readonly kind: 'int';
  readonly default?: number;
  readonly min?: number;
  readonly max?: number;
}

/** A TCP/UDP port, 1–65535. */
export interface PortFlag extends FlagCommon {
  readonly kind: 'port';
  readonly default?: number;
}

/** A Go duration (`5m`, `1h30m`, `250ms`, `0`; flags.ts parseDuration), in milliseconds. */
export interface DurationFlag extends FlagCommon {
  readonly kind: 'duration';
  /** Go duration text, e.g. `20s`. */
  readonly default?: string;
}

/** A listen address `host:port`, `:port` or `[v6]:port`; `0` or empty disables (`undefined`). */
export interface AddrFlag extends FlagCommon {
  readonly kind: 'addr';
  /** Address text, e.g. `:9384`. */
  readonly default?: string;
}

/** One of a fixed set of words. */
export interface EnumFlag extends FlagCommon {
  readonly kind: 'enum';
  readonly values: readonly string[];
  readonly default?: string;
}

/** One row of a flag table. */
export type FlagSpec = BoolFlag | StringFlag | StringListFlag | IntFlag | PortFlag | DurationFlag | AddrFlag | EnumFlag;

/** A flag table: flag names (without dashes) to their specs. */
export type FlagSpecs = Readonly<Record<string, FlagSpec>>;

/** The parsed type of one flag. */
export type FlagValue<S extends FlagSpec> = S extends { kind: 'bool' }
  ? boolean
  : S extends { kind: 'strings' }
    ? readonly string[]
    : S extends { kind: 'int' | 'port' | 'duration' }
    ? number
    : S extends { kind: 'addr' }
      ? BindAddress | undefined
      : S extends { kind: 'enum'; values: readonly (infer V)[] }
        ? V
        : string;

/** The parsed values of a table: a flag with a default always has a value. */
export type FlagValues<T extends FlagSpecs> = {
  readonly [K in keyof T]: T[K] extends { default: unknown } | { kind: 'strings' } ? FlagValue<T[K]> : FlagValue<T[K]> | undefined;
};

/** `-h`/`--help` was given: print {@link usage} and exit 0 (Go's `flag.ErrHelp`). */
export class HelpRequested extends Error {
  override readonly name = 'HelpRequested';
  constructor(readonly usage: string) {
    super('help requested');
  }
}

const GO_TRUE = ['1', 't', 'T', 'TRUE', 'true', 'True'];
const GO_FALSE = ['0', 'f', 'F', 'FALSE', 'false', 'False'];

/** A flag table and its parser; make one with {@link defineFlags}. */
export class FlagTable<T extends FlagSpecs> {
  private readonly byShort = new Map<string, string>();

  /**
   * @param command the name shown in the usage text, e.g. `coild` or `coil-migrator dump`
   * @param specs the flags, in the order the usage text lists them
   */
  constructor(
    readonly command: string,
    readonly specs: T,
  ) {
    for (const [name, spec] of Object.entries(specs)) if (spec.short) this.byShort.set(spec.short, name);
  }

  /**
   * Parses `argv` (without node and script).
   * @throws ConfigError naming the flag: unknown flag, missing value, bad value, or a positional argument
   * @throws HelpRequested on `-h`, `-help` or `--help` (unless the table defines `help`)
   */
  parse(argv: readonly string[]): FlagValues<T> {
    const given = new Map<string, string | boolean>();
    const lists = new Map<string, string[]>();
    for (let i = 0; i < argv.length; i++) {
      const arg = argv[i]!;
      if (arg === '--') {
        if (i + 1 < argv.length) throw new ConfigError(`unexpected argument ${JSON.stringify(argv[i + 1])}`);
        break;
      }
      const m = /^--?([^-=][^=]*)(?:=([\s\S]*))?$/.exec(arg);
      if (!m) throw new ConfigError(`unexpected argument ${JSON.stringify(arg)}`);
      const written = arg.slice(0, arg.length - (m[2] === undefined ? 0 : m[2].length + 1));
      const name = this.specs[m[1]!] ? m[1]! : !arg.startsWith('--') ? this.byShort.get(m[1]!) : undefined;
      if (name === undefined) {
        if (m[1] === 'help' || m[1] === 'h') throw new HelpRequested(this.usage());
        throw new ConfigError(`Unknown option '${written}'`);
      }
      const spec = this.specs[name]!;
      let value: string;
      if (spec.kind === 'bool') {
        given.set(name, m[2] === undefined ? true : parseBool(name, m[2]));
        continue;
      } else if (m[2] !== undefined) {
        value = m[2];
      } else if (i + 1 < argv.length) {
        value = argv[++i]!;
      } else {
        throw new ConfigError(`--${name}: flag needs an argument`);
      }
      if (spec.kind === 'strings') lists.set(name, [...(lists.get(name) ?? []), value]);
      else given.set(name, value);
    }
    const values: Record<string, unknown> = {};
    for (const [name, spec] of Object.entries(this.specs)) {
      if (spec.kind === 'strings') {
        values[name] = Object.freeze(lists.get(name) ?? []);
        continue;
      }
      const raw = given.has(name) ? given.get(name)! : spec.default;
      values[name] = raw === undefined ? undefined : convert(name, spec, raw);
    }
    return values as FlagValues<T>;
  }

  /** The usage text, pflag's layout: one line per flag with its type and default. */
  usage(): string {
    const rows = Object.entries(this.specs).map(([name, spec]) => {
      const type = typeName(spec);
      return [`  ${spec.short ? `-${spec.short}, ` : '    '}--${name}${type ? ` ${type}` : ''}`, `${spec.help}${defaultText(spec)}`] as const;
    });
    const width = Math.max(0, ...rows.map(([left]) => left.length)) + 3;
    return `Usage of ${this.command}:\n${rows.map(([left, right]) => `${left.padEnd(width)}${right}\n`).join('')}`;
  }
}

/**
 * Declares a flag table; the values {@link FlagTable.parse} returns are typed from it.
 * @example defineFlags('coild', { 'gc-interval': { kind: 'duration', default: '5m', help: '…' } })
 */
export function defineFlags<const T extends FlagSpecs>(command: string, specs: T): FlagTable<T> {
  return new FlagTable(command, specs);
}

/** Go's `strconv.ParseBool`. @throws ConfigError naming the flag */
function parseBool(name: string, text: string): boolean {
  if (GO_TRUE.includes(text)) return true;
  if (GO_FALSE.includes(text)) return false;
  throw new ConfigError(`--${name}: expected true or false, got ${JSON.stringify(text)}`);
}

function convert(name: string, spec: FlagSpec, raw: string | number | boolean): unknown {
  const text = String(raw);
  switch (spec.kind) {
    case 'bool':
      return typeof raw === 'boolean' ? raw : parseBool(name, text);
    case 'string':
    case 'strings':
      return text;
    case 'int': {
      const min = spec.min ?? 0;
      const max = spec.max ?? Number.MAX_SAFE_INTEGER;
      const n = Number(text);
      if (!/^\d+$/.test(text) || n < min || n > max) throw new ConfigError(`--${name}: ${JSON.stringify(text)} is not an integer in [${min}, ${max}]`);
      return n;
    }
    case 'port': {
      const n = Number(text);
      if (!/^\d+$/.test(text) || n < 1 || n > 65535) throw new ConfigError(`--${name}: invalid port ${JSON.stringify(text)}`);
      return n;
    }
    case 'duration':
      return parseDuration(text, name);
    case 'addr':
      try {
        return parseBindAddress(text);
      } catch (e) {
        throw new ConfigError(`--${name}: ${(e as Error).message}`, { cause: e });
      }
    case 'enum':
      if (spec.values.includes(text)) return text;
      throw new ConfigError(`--${name}: expected ${orList(spec.values)}, got ${JSON.stringify(text)}`);
  }
}

function orList(values: readonly string[]): string {
  const quoted = values.map((v) => JSON.stringify(v));
  return quoted.length <= 1 ? quoted.join('') : `${quoted.slice(0, -1).join(', ')} or ${quoted.at(-1)}`;
}

function typeName(spec: FlagSpec): string {
  switch (spec.kind) {
    case 'bool':
      return '';
    case 'int':
    case 'port':
      return 'int';
    case 'enum':
      return spec.values.join('|');
    case 'strings':
      return 'string (repeatable)';
    default:
      return spec.kind;
  }
}

function defaultText(spec: FlagSpec): string {
  if (spec.kind === 'strings' || spec.default === undefined || spec.default === false || spec.default === '') return '';
  return ` (default ${spec.kind === 'string' ? JSON.stringify(spec.default) : String(spec.default)})`;
}
