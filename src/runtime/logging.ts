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
    serializers: { err: bunyan.stdSerializers.err },
  });
}

/** A logger that drops everything (tests that do not inspect logs). */
export function silentLogger(name = 'test'): Logger {
  return bunyan.createLogger({ name, level: bunyan.FATAL + 1 });
}

export type { Logger };
