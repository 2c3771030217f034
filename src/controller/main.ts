/**
 * coil-controller: the IPAM controller (AddressPool webhooks, AddressPool and BlockRequest
 * reconcilers, AddressBlock GC) and the Egress controller (Egress webhooks, Egress, ServiceAccount
 * and ClusterRoleBinding reconcilers), each switchable, under one Lease leader election.
 * Flags: see config.ts.
 *
 * Exit codes: 0 after a graceful shutdown (SIGTERM/SIGINT), 1 on a start-up failure or a lost
 * lease, 2 on a bad flag.
 * @see docs/compatibility.md#coil-ipam-controller-flags,
 *   docs/compatibility.md#coil-egress-controller-flags, docs/compatibility.md#leader-election
 */
import 'reflect-metadata';
import { join } from 'node:path';
import { Kinds } from '../api/v2/kinds.js';
import { Container } from 'inversify';
import { DEFAULT_EGRESS_OPTIONS, FALLBACK_EGRESS_IMAGE } from '../reconcilers/egress-options.js';
import type { Client } from '../runtime/client.js';
import { stripManagedFields } from '../runtime/informer.js';
import { createLogger, type Logger } from '../runtime/logging.js';
import { Manager } from '../runtime/manager.js';
import { loadKubeConfig, parseOrExit, runMain, startOrExit } from '../runtime/program.js';
import { Registry } from '../runtime/registry.js';
import { CONTROLLER_FLAGS, parseConfig, parseReleaseFinalizersConfig, RELEASE_FINALIZERS_FLAGS } from './config.js';
import { addEgress, bindEgress, egressCache } from './egress-registry.js';
import { addIpam, bindIpam, ipamCache } from './ipam-registry.js';
import { DefaultPoolEnsurer } from '../reconcilers/default-pool.js';
import { ApiTransport } from '../runtime/api-transport.js';
import { Client as ApiClient } from '../runtime/client.js';
import { releaseFinalizers } from './release-finalizers.js';

/**
 * The default egress image: this controller's own
 * (docs/compatibility.md#coil-egress-controller-flags: Coil reads its Pod's first container).
 * Outside a Pod (no COIL_POD_NAMESPACE/COIL_POD_NAME) the chart's image.
 * @throws ApiError or Error when the Pod is named but cannot be read
 */
async function ownImage(client: Client, log: Logger): Promise<string> {
  const namespace = process.env.COIL_POD_NAMESPACE;
  const name = process.env.COIL_POD_NAME;
  if (!namespace || !name) {
    log.warn({ image: FALLBACK_EGRESS_IMAGE }, 'not in a Pod and no --egress-image: Egress pods use the fallback image');
    return FALLBACK_EGRESS_IMAGE;
  }
  const pod = await client.get(Kinds.Pod, { namespace, name });
  const containers = pod?.spec?.containers ?? [];
  const image = (containers.find((c) => c.name === 'coil-controller') ?? containers[0])?.image;
  if (!image) throw new Error(`cannot find the controller image in Pod ${namespace}/${name}; pass --egress-image`);
  return image;
}

/**
 * `coil-controller release-finalizers --namespace NS --release NAME [--wait 90s] [--kubeconfig F]`:
 * the chart's post-delete hook (release-finalizers.ts). Exit 0 when done, 1 on an API error, 2 on a bad flag.
 */
async function releaseFinalizersCommand(argv: string[]): Promise<void> {
  const v = parseOrExit('coil-controller release-finalizers', () => parseReleaseFinalizersConfig(argv, process.env), RELEASE_FINALIZERS_FLAGS.usage());
  const log = createLogger({ name: 'coil-controller', level: 'info' });
  const kc = loadKubeConfig(v.kubeconfig);
  try {
    await releaseFinalizers({ client: new ApiClient(new ApiTransport(kc), 'coil-controller'), namespace: v.namespace, release: v.release, waitMs: v.waitMs, logger: log });
  } catch (err) {
    log.error({ err }, 'release-finalizers failed');
    process.exit(1);
  }
}

async function main(): Promise<void> {
  if (process.argv[2] === 'release-finalizers') return releaseFinalizersCommand(process.argv.slice(3));
  const cfg = parseOrExit('coil-controller', () => parseConfig(process.argv.slice(2), process.env), CONTROLLER_FLAGS.usage());
  const log = createLogger({ name: 'coil-controller', level: cfg.logLevel });
  const registry = new Registry();
  const container = new Container();
  if (cfg.enableIpam) {
    addIpam(registry, { webhooks: cfg.enableWebhooks });
    bindIpam(container, cfg.ipam);
  }
  if (cfg.enableEgress) addEgress(registry, { webhooks: cfg.enableWebhooks });
  const mgr = new Manager({
    kubeConfig: loadKubeConfig(cfg.kubeconfig),
    transport: { http2: cfg.apiHttp2 },
    registry,
    container,
    name: 'coil-controller',
    identity: process.env.COIL_POD_NAME ? `${process.env.COIL_POD_NAME}_${process.pid}` : undefined,
    logger: log,
    ...(cfg.leaderElect ? { leaderElection: { name: cfg.leaderElectionId, namespace: cfg.leaderElectionNamespace } } : {}),
    ...(cfg.metricsAddr && { metricsBindAddress: cfg.metricsAddr }),
    ...(cfg.healthAddr && { healthProbeBindAddress: cfg.healthAddr }),
    secureEndpoints: cfg.secureEndpoints,
    ...(cfg.enableWebhooks && {
      webhook: { host: cfg.webhookAddr.host, port: cfg.webhookAddr.port, certFile: join(cfg.certDir, 'tls.crt'), keyFile: join(cfg.certDir, 'tls.key') },
    }),
    gracefulShutdownTimeoutMs: cfg.gracefulShutdownMs,
    // managedFields are a third of a cached AddressBlock and nothing reads them (100,000 blocks ≤ 300 MB).
    cache: {
      defaults: { transform: stripManagedFields },
      kinds: [...(cfg.enableIpam ? ipamCache() : []), ...(cfg.enableEgress ? egressCache() : [])],
    },
  });
  mgr.handleSignals();
  if (cfg.defaultPool) {
    mgr.add({ name: 'default-pool', leaderOnly: true }, new DefaultPoolEnsurer({ client: mgr.client, spec: cfg.defaultPool, logger: log.child({ runnable: 'default-pool' }) }));
  }
  await startOrExit({
    start: async () => {
      if (cfg.enableEgress) {
        const image = cfg.egress.image ?? (await ownImage(mgr.client, log));
        bindEgress(container, { ...DEFAULT_EGRESS_OPTIONS, fouPort: cfg.egress.fouPort, backend: cfg.egress.backend, image, secureEndpoints: cfg.secureEndpoints });
      }
      await mgr.start();
    },
    stop: () => mgr.stop(),
  }, log);
  log.info({ config: cfg }, 'coil-controller running');
}

runMain('coil-controller', main);
