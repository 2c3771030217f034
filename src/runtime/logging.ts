import bunyan from 'bunyan';
import type Logger from 'bunyan';

/** Options of {@link createLogger}. */
export interface LoggerOptions {
  /** `name` field of every record, e.g. `coil-controller`. */
  readonly name: string;
  /** Default `info`. */
  readonly level?: bunyan.LogLevel;
  /** Where records go; default stderr (stdout stays free for programs that print results). */
  readonly stream?: NodeJS.WritableStream;
}

/**
 * The root bunyan logger of a program. Reconcile logs are children carrying `controller`,
 * `object` (the key) and `reconcileID` (a UUID per reconcile), as controller-runtime's logr
 * fields do, so one reconcile's lines can be grepped together.
 */
export function createLogger(opts: LoggerOptions): Logger {
  return bunyan.createLogger({
    name: opts.name,
    level: opts.level ?? 'info',
    stream: opts.stream ?? process.stderr,
    serializers: { err: serializeError },
  });
}

/**
 * bunyan's `err` serializer, plus what it leaves out: the ES2022 `cause` chain (bunyan follows
 * only VError's `cause()` method), the `errors` of an AggregateError, and the error's own plain
 * fields (a NetlinkError's command, stderr and errno; an ApiError's code). Without them a failed
 * GC pass logs "listing pod interfaces failed" and nothing about why.
 */
export function serializeError(err: unknown, depth = 0): unknown {
  if (!(err instanceof Error)) return err;
  const own = Object.fromEntries(Object.entries(err).filter(([, v]) => v === null || ['string', 'number', 'boolean'].includes(typeof v)));
  const out: Record<string, unknown> = { ...own, ...(bunyan.stdSerializers.err(err) as object) };
  if (depth >= 5) return out;
  if (err.cause !== undefined) out.cause = serializeError(err.cause, depth + 1);
  if (err instanceof AggregateError) out.errors = err.errors.slice(0, 10).map((e: unknown) => serializeError(e, depth + 1));
  return out;
}

/** A logger that drops everything (tests that do not inspect logs). */
export function silentLogger(name = 'test'): Logger {
  return bunyan.createLogger({ name, level: bunyan.FATAL + 1 });
}

export type { Logger };
