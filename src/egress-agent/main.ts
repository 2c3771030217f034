/**
 * coil-egress, the agent inside each Egress pod: `node main.js [flags]` (see config.ts).
 * Exit codes: 0 after a graceful shutdown (SIGTERM/SIGINT, 5 s as Coil's), 1 on a start-up
 * failure, 2 on a bad flag or environment.
 * @see docs/compatibility.md#coil-egress-flags, docs/compatibility.md#the-nat-pod
 */
import '../runtime/bun-jit-policy.js'; // first: see there
import 'reflect-metadata';
import { KubeConfig } from '../runtime/kubeconfig.js';
import { createLogger } from '../runtime/logging.js';
import { EgressConfigError, parseEgressConfig, type EgressConfig } from './config.js';
import { EgressAgent } from './egress-agent.js';

const GRACEFUL_SHUTDOWN_MS = 5_000;

async function main(): Promise<void> {
  let cfg: EgressConfig;
  try {
    cfg = parseEgressConfig(process.argv.slice(2), process.env);
  } catch (e) {
    if (!(e instanceof EgressConfigError)) throw e;
    process.stderr.write(`coil-egress: ${e.message}\n`);
    process.exit(2);
  }
  const log = createLogger({ name: 'coil-egress', level: cfg.logLevel });
  const kc = new KubeConfig();
  if (cfg.kubeconfig) kc.loadFromFile(cfg.kubeconfig);
  else if (process.env.KUBERNETES_SERVICE_HOST) kc.loadFromCluster();
  else kc.loadFromDefault();
  const agent = new EgressAgent({ config: cfg, kubeConfig: kc, log });
  let stopping = false;
  const shutdown = (signal: string): void => {
    if (stopping) process.exit(1);
    stopping = true;
    log.info({ signal }, 'shutting down');
    setTimeout(() => process.exit(1), GRACEFUL_SHUTDOWN_MS).unref();
    agent.stop().then(() => process.exit(0), (err: unknown) => {
      log.error({ err }, 'shutdown failed');
      process.exit(1);
    });
  };
  process.on('SIGTERM', shutdown);
  process.on('SIGINT', shutdown);
  try {
    await agent.start();
    log.info({ ports: agent.ports, egress: `${cfg.namespace}/${cfg.egressName}` }, 'coil-egress started');
  } catch (err) {
    log.fatal({ err }, 'cannot start');
    await agent.stop().catch(() => undefined);
    process.exit(1);
  }
}

// No top-level await: the Bun bundle of this program is CommonJS (hack/build-cni.sh says why).
main().catch((err: unknown) => {
  process.stderr.write(`coil-egress: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
