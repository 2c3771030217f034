import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import type { KubeConfig } from '@kubernetes/client-node';
import { Container } from 'inversify';
import { mutate, validate } from './admission.js';
import { ApiTransport, type ApiTransportOptions } from './api-transport.js';
import { Cache, type CacheKindOptions } from './cache.js';
import { Client } from './client.js';
import { Controller, controllerSettings } from './controller.js';
import { EventRecorder } from './event-recorder.js';
import { HttpEndpoints, type BindAddress } from './http-servers.js';
import { RequestAuthorizer } from './http-auth.js';
import { endpointSecurity, type EndpointSecurity } from './secure-serving.js';
import { selfSignedCert } from './self-signed-cert.js';
import type { InformerOptions } from './informer.js';
import { keyOf, type KindDescriptor } from './kind.js';
import { LeaderElector, type LeaderElectionOptions } from './leader-election.js';
import { createLogger, type Logger } from './logging.js';
import { Metrics } from './metrics.js';
import type { OperatorFacade } from './operator-facade.js';
import { defaultRegistry, type Defaulter, type Reconcile, type Registry, type Validator } from './registry.js';
import { stopOnSignals } from './program.js';
import { RunnableSupervisor, type Runnable, type RunnableOptions } from './runnable.js';
import { TOKENS } from './tokens.js';
import { WebhookServer, type WebhookServerOptions } from './webhook-server.js';

/** Options of a {@link Manager}. Every field but `kubeConfig` has a default. */
export interface ManagerOptions {
  readonly kubeConfig: KubeConfig;
  /** How the API is spoken (HTTP/2 or HTTP/1.1, timeouts). Default: ApiTransport's defaults. */
  readonly transport?: ApiTransportOptions;
  /** Where decorators recorded reconcilers and webhooks. Default: the default registry. */
  readonly registry?: Registry;
  /** Container holding the program's own bindings (e.g. PoolManager); runtime services are added to it. Default: a new one. */
  readonly container?: Container;
  /** Program name: logger name, Event source, field manager. Default `coil-controller`. */
  readonly name?: string;
  /** Replica identity (Lease holder, Event reportingInstance). Default `<hostname>_<random>`. */
  readonly identity?: string;
  readonly logger?: Logger;
  /** Lease election; reconcilers with `leaderOnly` wait for it. Absent: this replica leads alone. */
  readonly leaderElection?: Omit<LeaderElectionOptions, 'identity'> & {
    /** Clear the holder on clean shutdown so a standby takes over at once. Default true. */
    readonly releaseOnCancel?: boolean;
  };
  /** `/metrics` endpoint; absent: not served. */
  readonly metricsBindAddress?: BindAddress;
  /** `/healthz` + `/readyz`; absent: not served. May equal the metrics address (one server). */
  readonly healthProbeBindAddress?: BindAddress;
  /**
   * `/metrics` over HTTPS to callers allowed `get` on it (TokenReview, SubjectAccessReview;
   * src/runtime/secure-serving.ts); the probes stay open. Default false (plain); the programs pass
   * their `--secure-endpoints` flag, default true.
   */
  readonly secureEndpoints?: boolean;
  /** Required when the registry holds webhooks. */
  readonly webhook?: Omit<WebhookServerOptions, 'notReadyReason'>;
  readonly cache?: {
    /** Defaults for every informer (relist period, watchdog, backoff). */
    readonly defaults?: InformerOptions;
    /** Per-kind selectors, e.g. `{ kind: Pod, options: { fieldSelector: 'spec.nodeName=n1' } }`. */
    readonly kinds?: readonly { readonly kind: KindDescriptor; readonly options: CacheKindOptions }[];
    /** Default 120 000 ms. */
    readonly syncTimeoutMs?: number;
  };
  /** How long `stop()` waits for in-flight reconciles. Default 30 000 ms (controller-runtime). */
  readonly gracefulShutdownTimeoutMs?: number;
  /**
   * Called when the lease is lost. Default: log and `process.exit(1)` — a deposed leader must stop
   * writing at once, and a restart is the only way to be sure nothing it started still runs
   * (controller-runtime does the same).
   */
  readonly onLeadershipLost?: () => void;
  /** Collect prom-client's `process_*`/`nodejs_*` metrics. Default true. */
  readonly defaultMetrics?: boolean;
}

/**
 * Owns everything a controller process shares, as controller-runtime's Manager does: the
 * inversify container, client, informer cache, one Controller (work queue + workers) per
 * registered reconciler, supervised runnables, the webhook server, Lease election, metrics, probes, the Event recorder,
 * the root logger, and shutdown.
 *
 * `start()` runs the fixed order: HTTP endpoints → webhook server → caches (wait for sync) →
 * reconcilers and runnables that do not need the lease → leader election → leader-only ones. Webhooks
 * and metrics serve on every replica. `stop()` drains reconciles (30 s; then aborts them), releases
 * the lease once leader-only work has returned, then stops caches and servers.
 *
 * @example
 *   const mgr = new Manager({ kubeConfig, registry, leaderElection: { name: LEADER_ELECTION_ID, namespace: 'kube-system' },
 *     metricsBindAddress: { port: 9386 }, healthProbeBindAddress: { port: 9387 }, webhook: { port: 9443, certFile, keyFile } });
 *   await mgr.start();
 *   mgr.handleSignals();
 * @see controller-runtime `pkg/manager/internal.go`
 */
export class Manager {
  readonly container: Container;
  readonly log: Logger;
  readonly metrics: Metrics;
  readonly transport: ApiTransport;
  readonly client: Client;
  readonly cache: Cache;
  readonly recorder: EventRecorder;
  /**
   * The dot-i Operator façade, loaded at start only when the registry holds reconcilers or
   * webhooks: a Manager without them (coild) starts its caches directly and never loads
   * @dot-i/k8s-operator, which loads all of @kubernetes/client-node (≈ 80 MB RSS on Node 24).
   */
  operator: OperatorFacade | undefined;
  readonly identity: string;
  /** Bound ports after start (useful with port 0). */
  readonly ports: { metrics?: number; health?: number; webhook?: number } = {};
  private readonly registry: Registry;
  private readonly endpoints: HttpEndpoints;
  /** How the endpoints are served (`secureEndpoints`); other servers of the process share it (coild's health port). */
  readonly endpointSecurity: EndpointSecurity;
  private readonly controllers: Controller[] = [];
  private readonly runnables: RunnableSupervisor[] = [];
  private webhookServer: WebhookServer | undefined;
  private elector: LeaderElector | undefined;
  private state: 'new' | 'starting' | 'running' | 'stopping' | 'stopped' = 'new';
  private leaderStarted = false;
  private keepAlive: NodeJS.Timeout | undefined;
  private runnablesStopped: Promise<boolean> | undefined;

  constructor(private readonly options: ManagerOptions) {
    const name = options.name ?? 'coil-controller';
    this.identity = options.identity ?? `${hostname()}_${randomBytes(4).toString('hex')}`;
    this.registry = options.registry ?? defaultRegistry();
    this.log = options.logger ?? createLogger({ name });
    this.metrics = new Metrics({ defaultMetrics: options.defaultMetrics ?? true });
    this.transport = new ApiTransport(options.kubeConfig, options.transport);
    this.client = new Client(this.transport, name);
    this.cache = new Cache(this.transport, this.log, options.cache?.defaults);
    this.recorder = new EventRecorder(this.transport, name, this.identity, this.log);
    this.endpointSecurity = endpointSecurity(options.secureEndpoints ?? false, () => ({
      authorizer: new RequestAuthorizer({ client: this.client }),
      tls: selfSignedCert([hostname()]),
    }));
    this.endpoints = new HttpEndpoints(this.metrics.registry, this.endpointSecurity);
    const c = (this.container = options.container ?? new Container());
    c.bind(TOKENS.Logger).toConstantValue(this.log);
    c.bind(TOKENS.Manager).toConstantValue(this);
    c.bind(Client).toConstantValue(this.client);
    c.bind(Cache).toConstantValue(this.cache);
    c.bind(EventRecorder).toConstantValue(this.recorder);
    c.bind(Metrics).toConstantValue(this.metrics);
  }

  /**
   * Starts everything in order and resolves once non-leader work runs (leader-only reconcilers
   * start whenever the lease is acquired).
   * @throws Error when a webhook or HTTP port is taken, certificates are unreadable, a reconciler
   *   cannot be constructed, or the cache does not sync within `cache.syncTimeoutMs`; whatever
   *   had started is stopped again before the error is thrown
   */
  async start(): Promise<void> {
    if (this.state !== 'new') throw new Error(`Manager cannot start from state ${this.state}`);
    this.state = 'starting';
    // Retry timers are unref'd; without open sockets (API server down, no HTTP endpoints) Node
    // would otherwise exit quietly with code 0 while the informers wait to retry.
    this.keepAlive = setInterval(() => undefined, 1 << 30);
    try {
      await this.startInOrder();
    } catch (err) {
      await this.stop();
      throw err;
    }
    this.state = 'running';
    this.log.info({ identity: this.identity, ports: this.ports }, 'manager started');
  }

  private async startInOrder(): Promise<void> {
    const o = this.options;
    for (const k of o.cache?.kinds ?? []) this.cache.ensure(k.kind, k.options);
    if (this.registry.reconcilers.length > 0 || this.registry.webhooks.length > 0) {
      const { OperatorFacade } = await import('./operator-facade.js');
      this.operator = new OperatorFacade(this.cache, this.client, this.log.child({ component: 'operator' }));
      this.container.bind(OperatorFacade).toConstantValue(this.operator);
    }
    for (const r of this.registry.reconcilers) {
      for (const kind of [r.for, ...(r.owns ?? []), ...(r.watches ?? []).map((w) => w.kind), ...(r.reads ?? [])]) this.cache.ensure(kind);
      for (const ix of r.indexes ?? []) this.cache.addIndex(ix.kind, ix.name, ix.fn);
      if (!this.container.isBound(r.target)) this.container.bind(r.target).toSelf().inSingletonScope();
      const settings = controllerSettings(r, (token) => this.container.get(token));
      this.controllers.push(new Controller(r, this.container.get<Reconcile>(r.target), this.cache, this.metrics, this.recorder, this.log, settings));
    }
    for (const w of this.registry.webhooks) this.cache.ensure(w.for);
    for (const r of this.registry.runnables) {
      if (!this.container.isBound(r.target)) this.container.bind(r.target).toSelf().inSingletonScope();
      this.runnables.push(new RunnableSupervisor(r, this.container.get<Runnable>(r.target), this.log.child({ runnable: r.name })));
    }

    // 1. probes and metrics
    this.endpoints.healthChecks.set('ping', () => undefined);
    this.endpoints.readyChecks.set('cache', () => (this.cache.hasSynced() ? undefined : 'informer cache not synced'));
    if (o.metricsBindAddress) this.ports.metrics = await this.endpoints.listen(o.metricsBindAddress, { metrics: true, probes: sameAddress(o.metricsBindAddress, o.healthProbeBindAddress) });
    if (o.healthProbeBindAddress && !sameAddress(o.metricsBindAddress, o.healthProbeBindAddress)) this.ports.health = await this.endpoints.listen(o.healthProbeBindAddress, { probes: true });
    else if (o.healthProbeBindAddress) this.ports.health = this.ports.metrics;

    // 2. webhooks (before caches: the API server may call them while we sync; they deny until synced)
    if (this.registry.webhooks.length > 0) {
      if (!o.webhook) throw new Error('the registry holds webhooks but ManagerOptions.webhook is not set');
      const server = new WebhookServer({ ...o.webhook, notReadyReason: () => (this.cache.hasSynced() ? undefined : 'webhook cache is not synced yet') }, this.metrics, this.log.child({ component: 'webhook' }));
      for (const w of this.registry.webhooks) {
        if (!this.container.isBound(w.target)) this.container.bind(w.target).toSelf().inSingletonScope();
        const handler = this.container.get<Validator | Defaulter>(w.target);
        server.register(w.path, w.type === 'validating' ? (req) => validate(handler as Validator, w.for, req) : (req) => mutate(handler as Defaulter, w.for, req));
      }
      await server.start();
      this.webhookServer = server;
      this.ports.webhook = server.port();
    }

    // 3. caches, through the dot-i Operator lifecycle (start → init → watchResource per kind),
    //    or directly when there is no reconciler or webhook to serve
    const operator = this.operator;
    if (operator) {
      for (const kind of this.cache.kinds()) {
        operator.addWatch({ kind, onEvent: (e) => this.log.trace({ kind: kind.kind, type: e.type, object: keyOf(e.object) }, 'event') });
      }
      await operator.start();
    } else {
      this.cache.start();
    }
    await this.cache.waitForSync(o.cache?.syncTimeoutMs);

    // 4. reconcilers and runnables that run on every replica
    for (const c of this.controllers) if (c.registration.leaderOnly === false) c.start();
    for (const r of this.runnables) if (r.options.leaderOnly === false) r.start();

    // 5. leader election, then 6. leader-only reconcilers
    if (o.leaderElection) {
      this.elector = new LeaderElector({ ...o.leaderElection, identity: this.identity }, this.client, this.metrics, this.log.child({ component: 'leader-election' }));
      this.elector.run(
        () => this.startLeaderOnly(),
        () => this.leadershipLost(),
      );
    } else {
      this.startLeaderOnly();
    }
  }

  /**
   * Adds a runnable constructed by the program (decorated classes are added at start). Added while
   * running, it starts at once (leader-only ones once this replica leads), as controller-runtime's
   * `Manager.Add`: coild adds its GC only once it serves. Runnables stop in the reverse order of
   * their adding ({@link stopRunnables}).
   * @throws Error while starting, stopping or after stop
   */
  add(options: RunnableOptions, runnable: Runnable): void {
    if (this.state !== 'new' && this.state !== 'running') throw new Error('runnables must be added before start() or while running');
    const supervisor = new RunnableSupervisor(options, runnable, this.log.child({ runnable: options.name }));
    this.runnables.push(supervisor);
    if (this.state === 'running' && (options.leaderOnly === false || this.leaderStarted)) supervisor.start();
  }

  /** Names of the runnables, in the order they were added (decorated ones, after start, first). */
  runnableNames(): string[] {
    return this.runnables.map((r) => r.options.name);
  }

  /**
   * Stops every runnable, one at a time in the reverse order of their adding — what was added
   * later may use what was added earlier, as coild's GC uses the block releaser — each awaited
   * until it returns or the graceful-shutdown deadline (`gracefulShutdownTimeoutMs`, counted from
   * the first call, shared by all) passes. Part of {@link stop}; a program calls it first when it
   * has work to do between its loops stopping and the caches going (coild flushes table 119).
   * Idempotent: later calls return the first call's result.
   * @returns whether every leader-only runnable returned in time
   */
  stopRunnables(): Promise<boolean> {
    this.runnablesStopped ??= (async () => {
      const deadline = Date.now() + (this.options.gracefulShutdownTimeoutMs ?? 30_000);
      let leaderWorkStopped = true;
      for (const r of [...this.runnables].reverse()) {
        const returned = await r.stop(Math.max(0, deadline - Date.now()));
        if (!returned && r.options.leaderOnly !== false) leaderWorkStopped = false;
      }
      return leaderWorkStopped;
    })();
    return this.runnablesStopped;
  }

  /** Whether leader-only reconcilers run here (always true without leader election). */
  isLeader(): boolean {
    return this.leaderStarted;
  }

  /** The Controller of reconciler `name` (after start). */
  controller(name: string): Controller | undefined {
    return this.controllers.find((c) => c.registration.name === name);
  }

  /**
   * Graceful shutdown: stop taking work and drain in-flight reconciles (up to
   * `gracefulShutdownTimeoutMs`; then their signal is aborted and they get a short grace, see
   * {@link Controller.stop}), stop runnables ({@link stopRunnables}), release the lease (unless `releaseLease: false`,
   * which simulates a crash for tests), flush Events, stop caches and servers. Idempotent.
   *
   * The Lease is released only once every leader-only reconcile and runnable has returned: a
   * released Lease lets a standby lead at once, and two leaders must never write together. When one
   * still runs, renewal stops without a release, so a standby waits out the lease duration (by then
   * the process has exited).
   */
  async stop(opts: { releaseLease?: boolean } = {}): Promise<void> {
    if (this.state === 'stopping' || this.state === 'stopped') return;
    this.state = 'stopping';
    const timeout = this.options.gracefulShutdownTimeoutMs ?? 30_000;
    const leaderWorkStopped = await Promise.all([
      ...this.controllers.map(async (c) => (await c.stop(timeout)) || c.registration.leaderOnly === false),
      this.stopRunnables(),
    ]).then((done) => done.every(Boolean));
    const release = (opts.releaseLease ?? true) && (this.options.leaderElection?.releaseOnCancel ?? true);
    if (this.elector && release && !leaderWorkStopped) this.log.error('leader-only work still runs at shutdown: the Lease is not released, a standby takes over once it expires');
    await this.elector?.stop({ release: release && leaderWorkStopped });
    this.leaderStarted = false;
    await this.recorder.flush();
    this.operator?.stop();
    await this.cache.stop();
    this.transport.close();
    await this.webhookServer?.stop();
    await this.endpoints.close();
    clearInterval(this.keepAlive);
    this.state = 'stopped';
    this.log.info('manager stopped');
  }

  /**
   * Stops gracefully on SIGTERM/SIGINT, then calls `exit(0)` (`exit(1)` if shutdown failed or a
   * second signal arrives). Only a program's main should call this.
   * @returns a function removing the handlers
   */
  handleSignals(exit: (code: number) => void = (code) => process.exit(code), proc: NodeJS.Process = process): () => void {
    return stopOnSignals(this, { log: this.log, exit, proc });
  }

  private startLeaderOnly(): void {
    if (this.state === 'stopping' || this.state === 'stopped') return;
    this.leaderStarted = true;
    for (const c of this.controllers) if (c.registration.leaderOnly !== false) c.start();
    for (const r of this.runnables) if (r.options.leaderOnly !== false) r.start();
  }

  private leadershipLost(): void {
    this.leaderStarted = false;
    // A deposed leader must stop writing: in-flight reconciles are aborted at once.
    for (const c of this.controllers) if (c.registration.leaderOnly !== false) void c.stop(0);
    for (const r of this.runnables) if (r.options.leaderOnly !== false) void r.stop(0);
    const handler =
      this.options.onLeadershipLost ??
      (() => {
        this.log.fatal('leadership lost; exiting');
        process.exit(1);
      });
    handler();
  }
}

function sameAddress(a: BindAddress | undefined, b: BindAddress | undefined): boolean {
  return !!a && !!b && a.port === b.port && (a.host ?? '0.0.0.0') === (b.host ?? '0.0.0.0');
}
