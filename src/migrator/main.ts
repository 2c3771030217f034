/**
 * coil-migrator: the upgrade from Coil v1. `dump` converts the v1 etcd data to v2 manifests on
 * stdout; `replace` moves the pods to v2 addresses and releases the reserved blocks. Flags: see
 * config.ts. Progress and problems go to stderr, so `dump > data.yaml` captures only manifests.
 *
 * Exit codes: 0 done; 1 a failure (etcd unreachable, bad v1 data, a cluster step, pods not
 * replaced or blocks kept); 2 a bad command line; 3 `replace` declined at the prompt.
 * @see docs/migration-from-coil-v1.md#the-original-coil-migrator,
 *   docs/migration-from-coil-v1.md#the-procedure
 */
import { createInterface } from 'node:readline/promises';
import { ApiTransport } from '../runtime/api-transport.js';
import { Client } from '../runtime/client.js';
import { HelpRequested } from '../runtime/flag-table.js';
import { EXIT_USAGE, loadKubeConfig, runMain } from '../runtime/program.js';
import { ConfigError, parseConfig, USAGE, type MigratorConfig } from './config.js';
import { runDump } from './dump.js';
import { runReplace } from './replace.js';

function log(line: string): void {
  process.stderr.write(`coil-migrator: ${line}\n`);
}

/** Reads one answer from stdin; only y, Y, yes, YES proceed (as the original). */
async function confirm(question: string): Promise<boolean> {
  const rl = createInterface({ input: process.stdin, output: process.stderr });
  try {
    const answer = (await rl.question(question)).trim();
    return ['y', 'Y', 'yes', 'YES'].includes(answer);
  } catch {
    return false; // stdin closed: no answer is a no
  } finally {
    rl.close();
  }
}

async function main(): Promise<number> {
  const argv = process.argv.slice(2);
  if (argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(USAGE);
    return 0;
  }
  let cfg: MigratorConfig;
  try {
    cfg = parseConfig(argv, process.env);
  } catch (e) {
    if (e instanceof HelpRequested) {
      process.stdout.write(e.usage); // `coil-migrator dump -help`: that command's flags
      return 0;
    }
    if (!(e instanceof ConfigError)) throw e;
    process.stderr.write(`coil-migrator: ${e.message}\n${USAGE}`);
    return EXIT_USAGE;
  }
  const client = new Client(new ApiTransport(loadKubeConfig(cfg.kubeconfig)), 'coil-migrator');
  try {
    if (cfg.command === 'dump') {
      await runDump(cfg, { client, log, out: (text) => process.stdout.write(text) });
      return 0;
    }
    const summary = await runReplace(cfg, { client, log, confirm });
    if (summary === undefined) {
      log('aborted');
      return 3;
    }
    return summary.ok ? 0 : 1;
  } catch (e) {
    log(`${cfg.command} failed: ${(e as Error).message}`);
    return 1;
  }
}

runMain('coil-migrator', main);
