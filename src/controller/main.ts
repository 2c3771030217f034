/**
 * coil-controller: the IPAM controller (AddressPool webhooks, AddressPool and BlockRequest
 * reconcilers, AddressBlock GC) under Lease leader election. Flags: see config.ts.
 *
 * Exit codes: 0 after a graceful shutdown (SIGTERM/SIGINT), 1 on a start-up failure or a lost
 * lease, 2 on a bad flag.
 * @see coil-behaviour.md §1.2 (coil-ipam-controller), §4.7
 */
import 'reflect-metadata';
import { join } from 'node:path';
import { KubeConfig } from '@kubernetes/client-node';
import { Container } from 'inversify';
import { createLogger } from '../runtime/logging.js';
import { Manager } from '../runtime/manager.js';
import { Registry } from '../runtime/registry.js';
import { ConfigError, parseConfig, type ControllerConfig } from './config.js';
import { addIpam, bindIpam } from './ipam-registry.js';

/** Loads the kubeconfig: the flag (or `$KUBECONFIG`), else in-cluster, else `~/.kube/config`. */
function loadKubeConfig(cfg: ControllerConfig): KubeConfig {
  const kc = new KubeConfig();
  if (cfg.kubeconfig) kc.loadFromFile(cfg.kubeconfig);
  else if (process.env.KUBERNETES_SERVICE_HOST) kc.loadFromCluster();
  else kc.loadFromDefault();
  return kc;
}

async function main(): Promise<void> {
  let cfg: ControllerConfig;
  try {
    cfg = parseConfig(process.argv.slice(2), process.env);
  } catch (e) {
    if (!(e instanceof ConfigError)) throw e;
    process.stderr.write(`coil-controller: ${e.message}\n`);
    process.exit(2);
  }
  const log = createLogger({ name: 'coil-controller', level: cfg.logLevel });
  const registry = addIpam(new Registry(), { webhooks: cfg.enableWebhooks }, cfg.ipam);
  const container = bindIpam(new Container(), cfg.ipam);
  const mgr = new Manager({
    kubeConfig: loadKubeConfig(cfg),
    registry,
    container,
    name: 'coil-controller',
    identity: process.env.COIL_POD_NAME ? `${process.env.COIL_POD_NAME}_${process.pid}` : undefined,
    logger: log,
    ...(cfg.leaderElect ? { leaderElection: { name: cfg.leaderElectionId, namespace: cfg.leaderElectionNamespace } } : {}),
    ...(cfg.metricsAddr && { metricsBindAddress: cfg.metricsAddr }),
    ...(cfg.healthAddr && { healthProbeBindAddress: cfg.healthAddr }),
    ...(cfg.enableWebhooks && {
      webhook: { host: cfg.webhookAddr.host, port: cfg.webhookAddr.port, certFile: join(cfg.certDir, 'tls.crt'), keyFile: join(cfg.certDir, 'tls.key') },
    }),
    gracefulShutdownTimeoutMs: cfg.gracefulShutdownMs,
  });
  mgr.handleSignals();
  try {
    await mgr.start();
  } catch (err) {
    log.fatal({ err }, 'cannot start');
    await mgr.stop().catch(() => undefined);
    process.exit(1);
  }
  log.info({ config: { ...cfg, ipam: cfg.ipam } }, 'coil-controller running');
}

await main();
