/**
 * Coild: the node agent's wiring, as Coil's `coild/sub/run.go`
 * (docs/compatibility.md#coild-start-up), kept apart from main.ts so tests can run it in-process.
 * Start order:
 * 1. Manager (no leader election, no reconcilers): metrics server, client, Event recorder, and a
 *    cache of this node's AddressBlocks (label `coil.cybozu.com/node`), its Node and Pods (field
 *    selectors), all Namespaces and AddressPools — waited until synced; no BlockRequests (the
 *    BlockRequester reads its own by name, ipam/block-request.ts);
 * 2. PodNetwork.init (forwarding, the pod-table rule, MTU; failures only logged, as Coil);
 * 3. NodeIpam from the cache, then recovery from the host, then release of empty blocks;
 * 4. export table sync, egress client records and kernel probe (with `--enable-egress`),
 *    health/introspection server, gRPC server, periodic GC.
 * The loops — BlockRequest poll, block releaser, egress watcher, GC — are Manager runnables
 * (supervised, restarted with backoff on failure); the first three start with the Manager once
 * its caches synced, GC once the gRPC server serves.
 * Stop runs it backwards: gRPC server, the loops (newest first, each awaited within
 * `--graceful-shutdown`), then the host clean-ups, then the Manager. With `--enable-ipam=false` (Coil's egress-only mode) steps 2 and 3, the
 * export table, the GC and the IPAM kinds' caches are left out, and CNI calls go to
 * EgressOnlyCniService.
 */
import type { KubeConfig, V1Pod } from '@kubernetes/client-node';
import type Logger from 'bunyan';
import type { AddressBlock } from '../api/v2/addressblock.js';
import { Manager } from '../runtime/manager.js';
import { Registry } from '../runtime/registry.js';
import { BlockExport } from './ipam/block-export.js';
import { BlockReleaser } from './ipam/block-release.js';
import { BlockRequester } from './ipam/block-request.js';
import { CniService } from './rpc/cni-service.js';
import type { CniHandler } from './rpc/cni-handler.js';
import { EgressOnlyCniService } from './rpc/egress-only-cni-service.js';
import type { CoildConfig } from './config.js';
import { NodeGc, type GcReport } from './ipam/gc.js';
import { CniGrpcServer } from './rpc/grpc-server.js';
import { IntrospectionServer, ipamSnapshot } from './ipam/introspection.js';
import { LeakReleaser } from './ipam/leak-release.js';
import { LeakReleaseRequests } from './ipam/leak-release-requests.js';
import { KeyedMutex } from './podnet/keyed-mutex.js';
import { Kinds } from '../api/v2/kinds.js';
import { MAIN_TABLE_ID } from '../api/v2/keys.js';
import { probeFeatures } from '../netlink/features.js';
import { IpRunner } from '../netlink/iproute2/ip-runner.js';
import { NetlinkExecutor } from '../netlink/netlink-executor.js';
import { NetlinkAgent } from '../netlink/netlink-agent.js';
import { InProcessRtnetlink, isBun } from '../netlink/socket/rtnetlink-inprocess.js';
import { EgressClient } from './egress/egress-client.js';
import { EgressWatcher } from './egress/egress-watcher.js';
import { NatSteering } from './egress/nat-steering.js';
import { SnatRouter } from './egress/snat-routes.js';
import { FlowPins } from './egress/flow-pins.js';
import { allocationKey } from './ipam/node-ipam.js';
import { NodeAgentMetrics } from './node-metrics.js';
import { NodeIpam } from './ipam/node-ipam.js';
import { OriginatingOnly } from './egress/originating-only.js';
import { RtnetlinkPodNetwork } from './podnet/pod-network-rtnetlink.js';
import { IpRouteExporter } from './ipam/route-export.js';
import { declareCoildCache } from './rbac.js';
import { recoverAllocations } from './ipam/recovery.js';
import { OrphanAddresses } from './ipam/orphans.js';
import { SpawnHelper } from './podnet/spawn-helper.js';
import { removeCoilConflist, removeNodeRouting, UninstallDetector } from './uninstall.js';

/** What {@link Coild} needs besides its flags. */
export interface CoildOptions {
  readonly config: CoildConfig;
  readonly kubeConfig: KubeConfig;
  readonly logger: Logger;
  /**
   * Directory holding the gRPC service definitions (`cnirpc.proto`, `health.proto`); by default
   * `proto/` of the install, found from this module's URL (see CniGrpcServerOptions.protoDir).
   */
  readonly protoDir?: string;
}

/** One running coild. Not restartable: build a new one. */
export class Coild {
  readonly manager: Manager;
  readonly podNetwork: RtnetlinkPodNetwork;
  readonly exporter: IpRouteExporter;
  readonly locks = new KeyedMutex();
  readonly requester: BlockRequester;
  readonly ipam: NodeIpam;
  readonly releaser: BlockReleaser;
  readonly blockExport: BlockExport;
  readonly service: CniHandler;
  readonly gc: NodeGc;
  /** Addresses on the host no block of this node holds: kept wired, claimed back (docs/ipam-recovery.md). */
  readonly orphans: OrphanAddresses;
  readonly metrics: NodeAgentMetrics;
  /** Client-side egress; undefined with `--enable-egress=false`. */
  readonly egress: EgressWatcher | undefined;
  /** Routes and exports the shared SNAT addresses of the Egresses whose active NAT pod runs here (with the steering). */
  readonly snatRouter: SnatRouter | undefined;
  private mtuBytes: number | undefined;
  /** Bound ports after start (useful with port 0). */
  readonly ports: { metrics?: number; health?: number } = {};
  private readonly introspection: IntrospectionServer;
  private readonly leakReleaser: LeakReleaser;
  /** Release requests annotated on this node's blocks (IPAM only). */
  readonly leakReleaseRequests: LeakReleaseRequests | undefined;
  private grpc: CniGrpcServer | undefined;
  private recovered = false;
  private serving = false;
  /** Starts coild's `ip` processes (see spawn-helper.ts); undefined with `--spawn-helper=false`, and by default under Bun. */
  private readonly spawnHelper: SpawnHelper | undefined;
  private readonly netlinkAgent: NetlinkAgent | undefined;
  /** Tells an uninstall from a restart; undefined outside a Pod (no COIL_POD_NAMESPACE/NAME). */
  private readonly uninstall: UninstallDetector | undefined;

  constructor(private readonly o: CoildOptions) {
    const cfg = o.config;
    const log = o.logger;
    this.manager = new Manager({
      kubeConfig: o.kubeConfig, transport: { http2: cfg.apiHttp2 }, registry: new Registry(), name: 'coild', identity: cfg.nodeName, logger: log,
      ...(cfg.metricsAddr && { metricsBindAddress: cfg.metricsAddr }),
      secureEndpoints: cfg.secureEndpoints,
      gracefulShutdownTimeoutMs: cfg.gracefulShutdownMs,
    });
    const { cache, client } = this.manager;
    // What the enabled features cache (rbac.ts; the chart grants exactly the reads of these).
    declareCoildCache(cache, cfg);

    this.uninstall = cfg.pod ? new UninstallDetector({ cache, client, pod: cfg.pod, logger: log.child({ logger: 'uninstall' }) }) : undefined;

    const host = cfg.hostNetns ? { hostNetns: cfg.hostNetns } : {};
    this.spawnHelper = cfg.spawnHelper ?? !isBun ? new SpawnHelper({ onExit: (code, signal) => log.warn({ code, signal }, 'spawn helper exited; restarting on next use') }) : undefined;
    // Under Bun coild applies rtnetlink requests itself; under Node a Bun child does it for it.
    this.netlinkAgent = cfg.netlinkAgent && !isBun ? new NetlinkAgent({ onExit: (code, signal) => log.warn({ code, signal }, 'netlink agent exited; restarting on next use') }) : undefined;
    if (this.netlinkAgent && !this.netlinkAgent.isUsable) log.warn({ runtime: this.netlinkAgent.runtimePath, script: this.netlinkAgent.scriptPath }, 'netlink agent not in this build; pod wiring runs ip');
    const rtnetlink = !cfg.netlinkAgent ? undefined : isBun ? new InProcessRtnetlink() : this.netlinkAgent;
    const ip = new IpRunner(this.spawnHelper ? { spawner: this.spawnHelper.spawner } : {});
    const kernel = new NetlinkExecutor({ ip, ...(rtnetlink ? { rtnetlink } : {}) });
    this.podNetwork = new RtnetlinkPodNetwork({
      ...host, kernel, podTableId: cfg.podTableId, podRulePrio: cfg.podRulePrio, protocolId: cfg.protocolId,
      onReapError: (err) => log.warn({ err }, 'deleting retired veths failed'),
    });
    this.exporter = new IpRouteExporter({ ...host, kernel, tableId: cfg.exportTableId, protocolId: cfg.protocolId });
    this.metrics = new NodeAgentMetrics(this.manager.metrics.registry, () => (cfg.enableIpam && this.recovered ? this.ipam : undefined), {
      pending: () => this.requester.pendingSince(),
      ready: () => this.notReadyReason() === undefined,
      orphans: () => (cfg.enableIpam && this.recovered ? this.orphans.list() : []),
    });
    this.requester = new BlockRequester({
      cache, client, nodeName: cfg.nodeName, logger: log.child({ logger: 'block-request' }),
      onAnswered: (pool, result, waitMs) => this.metrics.observeBlockRequest(pool, result, waitMs),
    });
    this.ipam = new NodeIpam({
      cache, requester: this.requester, logger: log.child({ logger: 'node-ipam' }),
      coolingMs: cfg.coolingMs, lowWaterMark: cfg.lowWaterMark, allocTimeoutMs: cfg.allocTimeoutMs,
      onBlocksChanged: () => this.releaser.schedule(),
      exportSync: () => this.blockExport.syncUnlessStopped(),
      onUnreadableBlock: (block, reason) => this.manager.recorder.event(block as AddressBlock, 'Warning', 'UnreadableBlock',
        `coild on ${cfg.nodeName} cannot read this block and skips it (its addresses are not handed out; the node's other blocks are served): ${reason}`),
      onExpectedRegistered: (key, blockName, withoutBlock) => (withoutBlock ? this.orphans.note({ ...withoutBlock, registeredIn: blockName }) : this.orphans.forget(key)),
      onFreed: (key) => this.orphans.forget(key),
      onAddressesOrphaned: (entries) => {
        for (const e of entries) this.orphans.note(e);
      },
    });
    this.orphans = new OrphanAddresses({
      cache, client, requester: this.requester, nodeName: cfg.nodeName, logger: log.child({ logger: 'orphans' }),
      unreadable: () => this.ipam.unreadableBlocks().map((b) => b.name),
      hold: { expect: (e) => this.ipam.expect(e), unexpect: (key) => this.ipam.unexpect(key) },
      reportOnPod: (pod, message) => this.manager.recorder.event(pod as V1Pod, 'Warning', 'AddressWithoutBlock', message),
      onBlockBack: () => void this.runGc().catch((err: unknown) => log.error({ err }, 'GC pass registering claimed-back addresses failed')),
      onExportChange: () => this.blockExport.trigger(),
    });
    this.releaser = new BlockReleaser({ ipam: this.ipam, client, logger: log.child({ logger: 'block-release' }), graceMs: cfg.blockReleaseGraceMs });
    // Exported beside the blocks: the shared SNAT addresses this node routes (egress/snat-routes.ts)
    // and the addresses of running Pods that no block of the node holds (orphans.ts).
    this.blockExport = new BlockExport({
      cache, exporter: this.exporter, logger: log.child({ logger: 'route-exporter' }),
      extra: () => [...(this.snatRouter?.exported() ?? []), ...(cfg.enableIpam ? this.orphans.exported() : [])],
    });
    if (cfg.enableEgress) {
      const steering = cfg.egressNatSteering
        ? new NatSteering({
          cache, port: cfg.egressPort, logger: log.child({ logger: 'egress-steering' }), registry: this.manager.metrics.registry,
          probeIntervalMs: cfg.egressProbeIntervalMs, nodeName: cfg.nodeName,
          onChange: (egress) => {
            this.egress?.onSteeringChange(egress);
            this.snatRouter?.trigger();
          },
        })
        : undefined;
      if (steering) {
        const router: SnatRouter = new SnatRouter({
          ...host, cache, kernel, ip, activeOf: (ref, family) => steering.active(ref, family), hostedNatPods: () => steering.hostedSharedNatPods(), nodeName: cfg.nodeName,
          // Without coil's IPAM the pods' routes are another CNI's, in the main table.
          podTableId: cfg.enableIpam ? cfg.podTableId : MAIN_TABLE_ID, protocolId: cfg.protocolId, logger: log.child({ logger: 'egress-snat-routes' }), registry: this.manager.metrics.registry,
          // Without coil's IPAM no BlockExport runs: the export table then holds these alone.
          onExportChange: () => (cfg.enableIpam ? this.blockExport.trigger()
            : void this.exporter.sync(router.exported()).catch((err: unknown) => log.error({ err }, 'export table sync failed'))),
        });
        this.snatRouter = router;
      }
      this.egress = new EgressWatcher({
        cache, client, recorder: this.manager.recorder, locks: this.locks, lockKey: allocationKey,
        egressClient: new EgressClient({ ip, kernel, port: cfg.egressPort, originatingOnly: { enabled: cfg.enableOriginatingOnly, applier: new OriginatingOnly({ ip, kernel, backend: cfg.backend }) },
          // Per-flow draining needs coild's own NAT pod choice (docs/egress-failover.md#draining).
          flowPins: { enabled: cfg.egressNatSteering, applier: new FlowPins({ ip, kernel, backend: cfg.backend }) } }),
        logger: log.child({ logger: 'egress' }),
        stateDir: cfg.egressStateDir, port: cfg.egressPort, probe: () => probeFeatures(ip),
        registry: this.manager.metrics.registry, linkMtuBytes: () => this.mtuBytes,
        ...(steering ? { steering } : {}),
      });
      this.manager.add({ name: 'egress-watcher', leaderOnly: false }, this.egress);
      if (steering) this.manager.add({ name: 'egress-steering', leaderOnly: false }, steering);
      if (this.snatRouter) this.manager.add({ name: 'egress-snat-routes', leaderOnly: false }, this.snatRouter);
    }
    // coild's loops are Manager runnables: started once the caches synced, stopped newest first
    // (GC, added once coild serves; the releaser; the requester; the export; the egress steering
    // and watcher), each awaited.
    if (cfg.enableIpam) {
      // Added before the other IPAM loops, so stopped after them: block changes while they wind down
      // still reach table 119.
      this.manager.add({ name: 'block-export', leaderOnly: false }, this.blockExport);
      this.manager.add({ name: 'block-request', leaderOnly: false }, this.requester);
      this.manager.add({ name: 'block-release', leaderOnly: false }, this.releaser);
    }
    const observe = (command: 'ADD' | 'DEL', ms: number, ok: boolean): void => this.metrics.observeCni(command, ms, ok);
    this.service = cfg.enableIpam || !this.egress
      ? new CniService({
        ipam: this.ipam, podNetwork: this.podNetwork, cache, client, recorder: this.manager.recorder, locks: this.locks,
        nodeName: cfg.nodeName, logger: log.child({ logger: 'cni' }), notReadyReason: () => this.notReadyReason(), observe,
        ...(this.egress && { egress: this.egress }),
      })
      : new EgressOnlyCniService({
        cache, client, locks: this.locks, logger: log.child({ logger: 'cni' }), egress: this.egress,
        notReadyReason: () => this.notReadyReason(), observe,
      });
    this.gc = new NodeGc({
      ipam: this.ipam, podNetwork: this.podNetwork, releaser: this.releaser, exporter: this.blockExport, locks: this.locks,
      logger: log.child({ logger: 'gc' }), intervalMs: cfg.gcIntervalMs, orphans: this.orphans,
    });
    this.leakReleaser = new LeakReleaser({
      ipam: this.ipam, podNetwork: this.podNetwork, locks: this.locks, client, nodeName: cfg.nodeName, logger: log.child({ logger: 'leak-release' }),
    });
    this.leakReleaseRequests = cfg.enableIpam ? new LeakReleaseRequests({
      cache, client, releaser: this.leakReleaser, nodeName: cfg.nodeName, logger: log.child({ logger: 'leak-release' }), ready: () => this.recovered,
    }) : undefined;
    this.introspection = new IntrospectionServer({
      health: () => undefined,
      ready: () => this.notReadyReason(),
      snapshot: () => (this.recovered ? ipamSnapshot(this.ipam, cfg.nodeName, this.requester.pendingPools(), Date.now(), this.orphans.list()) : undefined),
      ipamDisabled: !cfg.enableIpam,
      // The metrics port's: one review bucket and one certificate per process.
      security: this.manager.endpointSecurity,
    });
  }

  /**
   * Why ADD cannot succeed now, or undefined (readyz, CNI STATUS): caches unsynced, state not
   * recovered, socket not served, or no pool usable (none exists, or all answered out of blocks
   * and have no free address here).
   */
  notReadyReason(): string | undefined {
    if (!this.manager.cache.hasSynced()) return 'informer cache not synced';
    if (!this.recovered) return 'allocations not recovered from the host yet';
    if (!this.serving) return 'gRPC server not serving';
    if (!this.o.config.enableIpam) return undefined;
    const pools = this.manager.cache.list(Kinds.AddressPool).map((p) => p.metadata?.name ?? '');
    if (pools.length === 0) return 'no AddressPool exists';
    if (!pools.some((p) => this.ipam.isUsable(p))) return `every AddressPool is out of blocks for this node (${pools.join(', ')})`;
    return undefined;
  }

  /**
   * Starts everything in order.
   * @throws Error when the Node does not exist, the host cannot be listed, or a port or the
   *   socket cannot be bound
   */
  async start(): Promise<void> {
    const { config: cfg, logger: log } = this.o;
    if (cfg.healthAddr) this.ports.health = await this.introspection.listen(cfg.healthAddr);
    await this.manager.start();
    this.ports.metrics = this.manager.ports.metrics;
    const node = this.manager.cache.get(Kinds.Node, { name: cfg.nodeName }) ?? (await this.manager.client.get(Kinds.Node, { name: cfg.nodeName }));
    if (!node) throw new Error(`Node ${cfg.nodeName} (COIL_NODE_NAME) does not exist`);
    await this.uninstall?.start();
    if (cfg.enableIpam) {
      try {
        const init = await this.podNetwork.init();
        this.mtuBytes = init.mtuBytes;
        log.info(init, 'pod network initialised');
      } catch (err) {
        log.error({ err }, 'pod network init failed (continuing, as Coil)');
      }
      this.ipam.start();
      this.orphans.start();
      await recoverAllocations({ podNetwork: this.podNetwork, ipam: this.ipam, releaser: this.releaser, logger: log, orphans: this.orphans });
      await this.blockExport.firstSync();
    }
    this.recovered = true;
    this.leakReleaseRequests?.start();
    this.leakReleaseRequests?.scanAll();
    await this.egress?.init();
    this.grpc = new CniGrpcServer({ handler: this.service, logger: log, registry: this.manager.metrics.registry, socketPath: cfg.socketPath, protoDir: this.o.protoDir });
    await this.grpc.start();
    this.serving = true;
    // Added only now: a pass before recovery would adopt every veth the recovery is registering.
    if (cfg.enableIpam) this.manager.add({ name: 'gc', leaderOnly: false }, this.gc.runnable());
    // A block claimed back while recovery ran: register its addresses now rather than a GC interval later.
    if (cfg.enableIpam && this.orphans.list().some((o) => o.state === 'granted')) {
      void this.runGc().catch((err: unknown) => log.error({ err }, 'GC pass registering claimed-back addresses failed'));
    }
    log.info({ node: cfg.nodeName, socket: cfg.socketPath, ports: this.ports, ipam: cfg.enableIpam, egress: cfg.enableEgress,
      originatingOnly: cfg.enableOriginatingOnly, backend: cfg.backend }, 'coild running');
  }

  /**
   * Runs a GC pass now, as the periodic one does (coild's SIGHUP: after fixing a node by hand, or
   * to make a test's pass land where it wants). Joins a pass already running.
   * @returns undefined, without a pass, before coild serves or with `--enable-ipam=false`
   * @throws what the pass throws (PodNetworkError, NetlinkError, ApiError)
   */
  async runGc(): Promise<GcReport | undefined> {
    if (!this.o.config.enableIpam || !this.serving) return undefined;
    return this.gc.run();
  }

  /**
   * Graceful shutdown; with `--clear-routes-on-shutdown`, flushes table 119 when the Node is gone
   * (Coil #370). When the owning DaemonSet is gone (an uninstall, uninstall.ts), also removes coil's
   * conflist, the export table and the pod table with its rule.
   */
  async stop(): Promise<void> {
    const log = this.o.logger;
    // Asked first, while the cache still follows the DaemonSet.
    const uninstalling = (await this.uninstall?.uninstalling()) ?? false;
    if (uninstalling && this.o.config.cniConfFile) {
      // First of all, so no new pod is sent to a coild that is going away.
      await removeCoilConflist(this.o.config.cniConfFile).then(
        (removed) => log.info({ file: this.o.config.cniConfFile, removed }, 'uninstall: coil\'s conflist removed'),
        (err: unknown) => log.error({ err }, 'uninstall: cannot remove coil\'s conflist'));
    }
    this.serving = false;
    await this.grpc?.stop();
    // The loops (GC, releaser, requester, egress watcher) end before anything below changes the
    // host: no GC pass or release runs while table 119 is flushed or the pod table removed.
    await this.manager.stopRunnables();
    this.orphans.stop();
    this.ipam.stop();
    if (this.o.config.clearRoutesOnShutdown && this.o.config.enableIpam) {
      try {
        const node = await this.manager.client.get(Kinds.Node, { name: this.o.config.nodeName });
        if (!node) {
          await this.blockExport.clear();
          log.info('Node is gone: export table flushed');
        }
      } catch (err) {
        log.error({ err }, 'cannot decide whether to flush the export table');
      }
    }
    if (uninstalling && this.o.config.enableIpam) {
      try {
        // Pods still wired keep their network (docs/ipam-recovery.md#after-an-uninstall): their
        // routes in tables 116 and 119 and the rule stay, and a reinstall's coild adopts them.
        const done = await removeNodeRouting({
          list: () => this.podNetwork.list(), clearExport: () => this.blockExport.clear(), removePodTable: () => this.podNetwork.deinit(),
        });
        if (done === 'removed') log.info('uninstall: export table, pod table and its rule removed');
        else log.warn({ pods: done.kept }, 'uninstall: pods still run on this node; their wiring, the pod table, its rule and the export table are kept so they keep their network');
      } catch (err) {
        log.error({ err }, 'uninstall: cannot remove coil\'s routes and rules');
      }
    }
    await this.blockExport.stop();
    if (this.o.config.enableIpam) await this.podNetwork.reap().catch((err: unknown) => log.warn({ err }, 'deleting retired veths failed'));
    this.leakReleaseRequests?.stop();
    await this.manager.stop();
    await this.introspection.close();
    this.spawnHelper?.stop();
    this.netlinkAgent?.stop();
  }
}
