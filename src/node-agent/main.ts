/**
 * coild, the node agent: `node main.js [flags]` (see config.ts), or `node main.js ipam-status
 * [--health-addr host:port]` to print a running coild's IPAM state.
 *
 * Exit codes: 0 after a graceful shutdown (SIGTERM/SIGINT), 1 on a start-up or shutdown failure,
 * 2 on a bad flag or environment. SIGHUP runs a GC pass at once (see Coild.runGc).
 * @see docs/compatibility.md#coild-flags, docs/compatibility.md#coild-start-up
 */
import '../runtime/bun-jit-policy.js'; // first: see there
import 'reflect-metadata';
import { readFileSync, realpathSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { PORTS } from '../api/v2/keys.js';
import { createLogger } from '../runtime/logging.js';
import { loadKubeConfig, parseOrExit, runMain, startOrExit, stopOnSignals } from '../runtime/program.js';
import { Coild } from './coild.js';
import { COILD_FLAGS, IPAM_STATUS_FLAGS, parseConfig } from './config.js';
import { fetchIpamStatus } from './ipam/ipam-status.js';

/**
 * `proto/` of the install, from the path of the script being run (`process.argv[1]`: main.js, or
 * main.bundle.cjs on Bun — both in dist/src/node-agent/). Read at run time because a bundle fixes
 * `import.meta.url` to the path it was built at (hack/build-cni.sh), which the image moves.
 */
function protoDir(): string {
  return resolve(dirname(realpathSync(process.argv[1] ?? '.')), '../../../proto');
}

async function ipamStatus(argv: string[]): Promise<void> {
  const flags = parseOrExit('coild ipam-status', () => IPAM_STATUS_FLAGS.parse(argv), IPAM_STATUS_FLAGS.usage());
  const addr = flags['health-addr'];
  const host = !addr?.host || addr.host === '0.0.0.0' ? '127.0.0.1' : addr.host;
  const secure = flags['secure-endpoints'];
  try {
    const token = secure ? readFileSync(flags['token-file'], 'utf8').trim() : undefined;
    process.stdout.write(await fetchIpamStatus(`${secure ? 'https' : 'http'}://${host.includes(':') ? `[${host}]` : host}:${addr?.port ?? PORTS.coildHealth}/ipam`, 5_000, token));
  } catch (err) {
    process.stderr.write(`coild ipam-status: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  }
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  if (argv[0] === 'ipam-status') return ipamStatus(argv.slice(1));
  const cfg = parseOrExit('coild', () => parseConfig(argv, process.env), COILD_FLAGS.usage());
  const log = createLogger({ name: 'coild', level: cfg.logLevel });
  const coild = new Coild({ config: cfg, kubeConfig: loadKubeConfig(cfg.kubeconfig), logger: log, protoDir: protoDir() });
  stopOnSignals(coild, { log, timeoutMs: cfg.gracefulShutdownMs });
  process.on('SIGHUP', () => {
    coild.runGc().catch((err: unknown) => log.error({ err }, 'node GC pass failed'));
  });
  await startOrExit(coild, log);
}

runMain('coild', main);
