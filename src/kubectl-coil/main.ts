/**
 * `kubectl-coil`: coil's kubectl plugin (`kubectl coil …` once it is on PATH). The commands,
 * their flags and exit statuses: run.ts; README, "Operate". Built into one executable per
 * platform by hack/kubectl-coil/build.ts.
 *
 * A fatal error — one run.ts does not turn into an exit status, an uncaught exception or
 * rejection, or a module failing to load — prints one line, `kubectl coil: <message>`
 * (fatal.ts), and exits 1. The handlers are in place before anything else loads: run.ts and the
 * libraries are imported only after, so an error in their loading is caught too. Run on a Node
 * older than it needs, it says so (runtime-check.ts) rather than fail inside a library.
 */
import { fatalMessage } from './fatal.js';
import { runtimeProblem } from './runtime-check.js';

/** Exit status of a fatal error (run.ts's 1: an error). */
const EXIT_FATAL = 1;

function die(err: unknown): void {
  process.stderr.write(`kubectl coil: ${fatalMessage(err)}\n`);
  process.exit(EXIT_FATAL);
}

process.on('uncaughtException', die);
process.on('unhandledRejection', die);
const problem = runtimeProblem(process.versions);
if (problem) die(new Error(problem));
// The runtime's timers are unref'd (src/runtime/clock.ts): hold the process until run() settles
// (src/runtime/program.ts, runMain, says why).
const alive = setInterval(() => undefined, 2 ** 30);
import('./run.js')
  .then(({ run }) => run(process.argv.slice(2)))
  .then((code) => {
    clearInterval(alive);
    process.exitCode = code;
  }, die);
