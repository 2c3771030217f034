/**
 * `kubectl-coil`: coil's kubectl plugin (`kubectl coil …` once it is on PATH). The commands,
 * their flags and exit statuses: run.ts; README, "Operate".
 */
import { runMain } from '../runtime/program.js';
import { run } from './run.js';

runMain('kubectl coil', () => run(process.argv.slice(2)));
