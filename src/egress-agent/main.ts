/**
 * coil-egress, the agent inside each Egress pod: `node main.js [flags]` (see config.ts).
 * Exit codes: 0 after a graceful shutdown (5 s as Coil's), 1 on a start-up failure, 2 on a bad
 * flag or environment. SIGTERM (Kubernetes deleting the pod) first drains — the data path stays
 * until the established client flows ended or `--drain-timeout` passed (drain.ts) —, SIGINT
 * (interactive) stops at once, as Coil's does on both.
 * @see docs/compatibility.md#coil-egress-flags, docs/compatibility.md#the-nat-pod,
 *   docs/egress-failover.md#draining
 */
import '../runtime/bun-jit-policy.js'; // first: see there
import 'reflect-metadata';
import { createLogger } from '../runtime/logging.js';
import { loadKubeConfig, parseOrExit, runMain, startOrExit, stopOnSignals } from '../runtime/program.js';
import { EGRESS_FLAGS, parseEgressConfig } from './config.js';
import { EgressAgent } from './egress-agent.js';

const GRACEFUL_SHUTDOWN_MS = 5_000;

async function main(): Promise<void> {
  const cfg = parseOrExit('coil-egress', () => parseEgressConfig(process.argv.slice(2), process.env), EGRESS_FLAGS.usage());
  const log = createLogger({ name: 'coil-egress', level: cfg.logLevel });
  const agent = new EgressAgent({ config: cfg, kubeConfig: loadKubeConfig(cfg.kubeconfig), log });
  stopOnSignals(agent, { log, timeoutMs: GRACEFUL_SHUTDOWN_MS, ...(cfg.drainTimeoutMs > 0 && { drainOnSigterm: () => agent.drain() }) });
  await startOrExit(agent, log);
  // A daemon runs until a signal stops it (stopOnSignals exits). Nothing else may hold the event
  // loop: with --metrics-addr=0 and --health-addr=0 on a kernel without FoU (no client watch),
  // coil-egress would otherwise exit 0 right after its start, and kubelet restart it in a loop.
  setInterval(() => undefined, 2 ** 30);
  log.info({ ports: agent.ports, egress: `${cfg.namespace}/${cfg.egressName}` }, 'coil-egress started');
}

runMain('coil-egress', main);
