/**
 * What every coil program's main does the same way (coil-controller, coild, coil-egress,
 * coil-migrator): load the kubeconfig, turn SIGTERM/SIGINT into a graceful stop, and map the
 * outcome to an exit code.
 *
 * Exit codes, shared by all of them: 0 done (or stopped gracefully), 1 a failure (start-up,
 * shutdown, or an error nothing caught), 2 a bad flag or environment ({@link ConfigError}); a
 * program may add its own above 2 (coil-migrator: 3 when `replace` is declined).
 */
import type { KubeConfig as KubeConfigType } from '@kubernetes/client-node';
import type Logger from 'bunyan';
import { HelpRequested } from './flag-table.js';
import { ConfigError } from './flags.js';
import { KubeConfig } from './kubeconfig.js';

/** Exit code of a bad flag or environment value (Go's flag package uses 2 as well). */
export const EXIT_USAGE = 2;

/**
 * The kubeconfig a program runs with: the file of `--kubeconfig` (whose default the program takes
 * from `$KUBECONFIG`), else the in-cluster ServiceAccount when running in a Pod, else
 * `~/.kube/config` — controller-runtime's order.
 * @throws Error when the named file cannot be read or parsed
 */
export function loadKubeConfig(path: string | undefined, env: NodeJS.ProcessEnv = process.env): KubeConfigType {
  const kc = new KubeConfig();
  if (path) kc.loadFromFile(path);
  else if (env.KUBERNETES_SERVICE_HOST) kc.loadFromCluster();
  else kc.loadFromDefault();
  return kc;
}

/** Options of {@link stopOnSignals}. */
export interface StopOnSignalsOptions {
  readonly log: Logger;
  /** Force `exit(1)` when the stop has not finished by then; none by default. */
  readonly timeoutMs?: number;
  readonly exit?: (code: number) => void;
  readonly proc?: NodeJS.Process;
  /**
   * Run on SIGTERM before the stop (coil-egress's drain); SIGINT, interactive, stops at once. Its
   * time does not count against `timeoutMs`; a second signal during it exits 1 as ever. Must not
   * throw. The process is kept alive while it runs.
   */
  readonly drainOnSigterm?: () => Promise<unknown>;
}

/**
 * Stops `target` gracefully on SIGTERM/SIGINT (after `drainOnSigterm` on SIGTERM, when given),
 * then calls `exit(0)`; `exit(1)` when the stop fails, times out, or a second signal arrives. Only a program's main should call this.
 * @returns a function removing the handlers
 */
export function stopOnSignals(target: { stop(): Promise<void> }, o: StopOnSignalsOptions): () => void {
  const exit = o.exit ?? ((code: number) => process.exit(code));
  const proc = o.proc ?? process;
  let received = false;
  const handler = (signal: string): void => {
    if (received) return exit(1);
    received = true;
    const drain = signal === 'SIGTERM' && o.drainOnSigterm ? o.drainOnSigterm : undefined;
    if (!drain) return stop(signal);
    o.log.info({ signal }, 'draining before the shutdown');
    // Runtime timers are unref'd (clock.ts): keep the process alive through the drain's sleeps.
    const alive = setInterval(() => undefined, 2 ** 30);
    drain().finally(() => clearInterval(alive)).then(() => stop(signal), () => stop(signal));
  };
  const stop = (signal: string): void => {
    o.log.info({ signal }, 'shutting down');
    if (o.timeoutMs !== undefined) {
      setTimeout(() => {
        o.log.error('graceful shutdown timed out');
        exit(1);
      }, o.timeoutMs).unref();
    }
    target.stop().then(
      () => exit(0),
      (err: unknown) => {
        o.log.error({ err }, 'shutdown failed');
        exit(1);
      },
    );
  };
  proc.on('SIGTERM', handler);
  proc.on('SIGINT', handler);
  return () => {
    proc.off('SIGTERM', handler);
    proc.off('SIGINT', handler);
  };
}

/**
 * Parses the command line with `parse`; a {@link ConfigError} is printed as `<name>: <message>`
 * (plus `usage`, when given, as Go's flag package does) and exits {@link EXIT_USAGE}; `-h`/`--help`
 * ({@link HelpRequested}) prints its usage text on stdout and exits 0. Any other error propagates.
 */
export function parseOrExit<C>(name: string, parse: () => C, usage = ''): C {
  try {
    return parse();
  } catch (e) {
    if (e instanceof HelpRequested) {
      process.stdout.write(e.usage);
      process.exit(0);
    }
    if (!(e instanceof ConfigError)) throw e;
    process.stderr.write(`${name}: ${e.message}\n${usage}`);
    process.exit(EXIT_USAGE);
  }
}

/**
 * Starts `target`; when that throws, logs it as fatal, stops what did start, and exits 1.
 * Signals are handled from before the start, so a SIGTERM during a slow start stops it too.
 */
export async function startOrExit(target: { start(): Promise<void>; stop(): Promise<void> }, log: Logger): Promise<void> {
  try {
    await target.start();
  } catch (err) {
    log.fatal({ err }, 'cannot start');
    await target.stop().catch(() => undefined);
    process.exit(1);
  }
}

/**
 * Runs a program's `main` and exits 1 with the stack on stderr if it throws what nothing caught.
 * With a number, `main`'s result becomes the exit code. No top-level await: the Bun bundles of
 * coild and coil-egress are CommonJS (hack/build-cni.sh says why).
 *
 * The process stays alive until `main` settles. The runtime's timers are unref'd (clock.ts: a
 * pending retry must never keep a stopping daemon alive), so a one-shot command whose only pending
 * work is such a timer would otherwise end half-way, silently and with status 0: the chart's
 * post-delete hook (`coil-controller release-finalizers`) did so while it waited for the release's
 * Pods to go, and helm took the Job's success for the finalizers' removal.
 */
export function runMain(name: string, main: () => Promise<number | void>): void {
  const alive = setInterval(() => undefined, 2 ** 30);
  main().then(
    (code) => {
      clearInterval(alive);
      if (typeof code === 'number') process.exitCode = code;
    },
    (err: unknown) => {
      process.stderr.write(`${name}: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
      process.exit(1);
    },
  );
}
