/**
 * Client-side egress in coild: sets up a pod's tunnels at ADD, and keeps every egress client pod
 * of this node in step with its Egresses afterwards — destinations and `fouSourcePortAuto`
 * changes, as Coil's EgressWatcher (#253), and also what Coil leaves behind: a deleted Egress, a
 * removed annotation, or a Service with new ClusterIPs
 * (docs/compatibility.md#egress-updates-to-running-clients,
 * docs/compatibility.md#set-but-never-unset).
 *
 * The netns of each client pod is recorded at ADD, as a small JSON file per attachment in
 * `stateDir` (on tmpfs under /run, so it survives a coild restart but not a reboot, like the netns
 * itself), instead of Coil's search through `ip netns list-id` and /var/run/netns
 * (docs/compatibility.md#netns-lookup-through-bind-mounts).
 *
 * Kernel features are probed once at start. Without FoU/IPIP, ADD of a pod that names an Egress
 * fails (as in Coil, where FoU setup fails ADD), with a clear message, a Warning Event on the pod
 * and `coil_coild_kernel_feature{feature} 0`: a pod that asked for egress NAT and silently got
 * none would reach the outside with its own address, around the NAT's addresses and firewall
 * rules. Pods that name no Egress are never affected.
 *
 * Concurrency: per-attachment work runs under coild's per-container lock (ADD already holds it
 * when it calls {@link onAdd}); the update loop handles one attachment at a time.
 * @see docs/compatibility.md#client-pod-egress-setup,
 *   docs/compatibility.md#egress-updates-to-running-clients
 */
import { existsSync } from 'node:fs';
import { kindRule } from '../../runtime/rbac.js';
import { mkdir, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { V1Pod } from '@kubernetes/client-node';
import type Logger from 'bunyan';
import { Gauge, type Registry } from 'prom-client';
import type { KernelFeatures } from '../../netlink/features.js';
import type { Cache } from '../../runtime/cache.js';
import type { Client } from '../../runtime/client.js';
import { sleep } from '../../runtime/clock.js';
import type { EventRecorder } from '../../runtime/event-recorder.js';
import type { RbacRule } from '../../runtime/registry.js';
import type { Runnable } from '../../runtime/runnable.js';
import { planEgressClient, type EgressClient, type EgressClientPlan, type EgressGateway } from './egress-client.js';
import { egressRefsOf, gatewaysOf } from './egress-gateways.js';
import type { NatSteering } from './nat-steering.js';
import type { KeyedMutex } from '../podnet/keyed-mutex.js';
import { Kinds } from '../../api/v2/kinds.js';

/** What is recorded per client attachment. */
export interface EgressAttachment {
  namespace: string;
  name: string;
  containerId: string;
  ifname: string;
  /** CNI_NETNS of the ADD. */
  netns: string;
  /** The pod's addresses (plain). */
  ips: string[];
  /** MTU of the pod interface, bytes. */
  linkMtuBytes?: number;
}

/** Constructor options of {@link EgressWatcher}. */
export interface EgressWatcherOptions {
  cache: Cache;
  client: Client;
  recorder: EventRecorder;
  egressClient: EgressClient;
  locks: KeyedMutex;
  /** The lock key of an attachment (coild's `allocationKey`). */
  lockKey: (containerId: string, ifname: string) => string;
  logger: Logger;
  /** Directory of the attachment records, e.g. `/run/coild/egress`. */
  stateDir: string;
  /** FoU port (`--egress-port`). */
  port: number;
  /** Probes the kernel once (src/netlink probeFeatures). */
  probe: () => Promise<KernelFeatures>;
  /** Registry for `coil_coild_kernel_feature`. */
  registry: Registry;
  /** MTU of pod interfaces when the attachment does not say (PodNetwork's detected MTU), bytes. */
  linkMtuBytes?: () => number | undefined;
  /** Full resync period, default 5 min: heals whatever an event missed. */
  resyncPeriodMs?: number;
  /**
   * coild's own NAT pod choice (docs/egress-failover.md). Absent: every tunnel points at the
   * Service ClusterIP and kube-proxy chooses, as with Coil's coild.
   */
  steering?: NatSteering;
}

/** An ADD that cannot set up egress; ADD fails with it (CNI 999 via the caller). */
export class EgressSetupError extends Error {
  override readonly name = 'EgressSetupError';
}

/** The client-side egress controller of one node. */
export class EgressWatcher implements Runnable {
  /** What it calls beyond the cache: the Service of a named Egress, read live by key. Its Events go through the Manager's recorder. */
  static readonly rbac: readonly RbacRule[] = [kindRule(Kinds.Service, ['get'])];

  private readonly attachments = new Map<string, EgressAttachment>();
  private readonly dirty = new Set<string>();
  /** Attachments whose only change is their NAT pod choice: moved by {@link EgressClient.retarget}. */
  private readonly steerOnly = new Set<string>();
  /** Attachments moved by a retarget whose flow pins are still to be synced, once no move waits. */
  private readonly pinsDue = new Set<string>();
  /** The pin sync under way, if any. */
  private pinning: Promise<void> | undefined;
  /** What each attachment was last brought to: its Egresses' gateways (with the chosen NAT pods) and plan. */
  private readonly applied = new Map<string, { egresses: string[]; gateways: EgressGateway[]; plan: EgressClientPlan }>();
  private wake: (() => void) | undefined;
  private features: KernelFeatures | undefined;
  private readonly featureGauge: Gauge<'feature'>;

  constructor(private readonly o: EgressWatcherOptions) {
    this.featureGauge = new Gauge({ name: 'coil_coild_kernel_feature', help: '1 when the kernel feature egress tunnels need is available, 0 when missing', labelNames: ['feature'], registers: [o.registry] });
  }

  /** Loads the records of a previous run and probes the kernel. @throws on an unreadable state dir */
  async init(): Promise<void> {
    await mkdir(this.o.stateDir, { recursive: true, mode: 0o700 });
    for (const f of await readdir(this.o.stateDir)) {
      if (!f.endsWith('.json')) continue;
      try {
        const a = JSON.parse(await readFile(join(this.o.stateDir, f), 'utf8')) as EgressAttachment;
        this.attachments.set(this.o.lockKey(a.containerId, a.ifname), a);
      } catch (err) {
        this.o.logger.warn({ err, file: f }, 'ignoring an unreadable egress record');
      }
    }
    this.features = await this.o.probe();
    for (const k of ['fou', 'ipip', 'ip6tnl'] as const) this.featureGauge.set({ feature: k }, this.features[k] ? 1 : 0);
    const missing = this.missingFeatures([4, 6]);
    if (missing) this.o.logger.error({ features: this.features }, `egress NAT clients cannot be set up on this node: the kernel lacks ${missing}`);
    // Egresses may have changed while coild was down: re-apply every recorded client once.
    for (const key of this.attachments.keys()) this.mark(key);
  }

  /**
   * ADD of a pod: when it names Egresses, resolves them and sets up the tunnels; records the
   * attachment for later updates. Call with the attachment's lock held.
   * @throws EgressSetupError when an Egress or its Service does not exist, FoU is missing, or an
   *   Egress has a shared SNAT address and this coild does not steer
   * @throws NetlinkError when the kernel refuses
   */
  async onAdd(pod: Readonly<V1Pod>, a: EgressAttachment): Promise<void> {
    const refs = egressRefsOf(pod.metadata?.annotations);
    if (refs.length === 0 || pod.spec?.hostNetwork) return;
    const families = [...new Set(a.ips.map((ip) => (ip.includes(':') ? 6 : 4) as 4 | 6))];
    const missing = this.missingFeatures(families);
    if (missing) {
      const msg = `egress NAT needs FoU tunnels, but this node's kernel lacks ${missing}`;
      this.o.recorder.event(pod as V1Pod, 'Warning', 'EgressUnavailable', msg);
      throw new EgressSetupError(msg);
    }
    const mtu = a.linkMtuBytes ?? this.o.linkMtuBytes?.();
    if (mtu !== undefined) a = { ...a, linkMtuBytes: mtu };
    const gateways: EgressGateway[] = [];
    for (const ref of refs) {
      const egress = this.o.cache.get(Kinds.Egress, ref);
      const service = egress ? await this.o.client.get(Kinds.Service, ref) : undefined;
      if (!egress || !service) throw new EgressSetupError(`${egress ? 'Service' : 'Egress'} ${ref.namespace}/${ref.name} named by annotation egress.coil.cybozu.com/${ref.namespace} does not exist`);
      gateways.push(...gatewaysOf(egress, service));
    }
    const unsteered = this.sharedWithoutSteering(gateways);
    if (unsteered) {
      this.o.recorder.event(pod as V1Pod, 'Warning', 'EgressUnavailable', unsteered);
      throw new EgressSetupError(unsteered);
    }
    const key = this.o.lockKey(a.containerId, a.ifname);
    const steered = this.steer(a, gateways, undefined);
    const plan = this.plan(a, steered);
    await this.o.egressClient.apply(a.netns, plan);
    this.remember(key, refs.map((r) => `${r.namespace}/${r.name}`), steered, plan);
    await this.record(a);
  }

  /** The attachments recorded as egress clients (CNI GC in egress-only mode compares them). */
  clients(): Array<{ containerId: string; ifname: string }> {
    return [...this.attachments.values()].map((a) => ({ containerId: a.containerId, ifname: a.ifname }));
  }

  /** DEL: forgets the attachment (its netns, and the tunnels in it, go away with the pod). */
  async onDel(containerId: string, ifname: string): Promise<void> {
    const key = this.o.lockKey(containerId, ifname);
    this.attachments.delete(key);
    this.dirty.delete(key);
    this.steerOnly.delete(key);
    this.pinsDue.delete(key);
    if (this.applied.delete(key)) this.publishUse();
    await rm(join(this.o.stateDir, fileOf(key)), { force: true });
  }

  /** Re-applies every attachment on Egress changes, annotation changes and periodically. */
  async run(signal: AbortSignal): Promise<void> {
    const offEgress = this.o.cache.onEvent(Kinds.Egress, () => this.markNaming());
    const offPod = this.o.cache.onEvent(Kinds.Pod, (e) => this.markPod(e.object.metadata?.namespace ?? '', e.object.metadata?.name ?? ''));
    this.publishUse();
    signal.addEventListener('abort', () => this.wake?.(), { once: true });
    const timer = setInterval(() => { for (const k of this.attachments.keys()) this.markFull(k); }, this.o.resyncPeriodMs ?? 300_000);
    timer.unref();
    try {
      while (!signal.aborted) {
        const [key] = this.dirty;
        if (key === undefined) {
          // Pins are synced beside the loop, one pod at a time: a move of another pod never
          // waits for their processes (a move of the same pod waits for its lock).
          const [due] = this.pinsDue;
          if (due !== undefined && !this.pinning) {
            this.pinning = this.syncPins(due).finally(() => { this.pinning = undefined; this.wake?.(); });
            continue;
          }
          await new Promise<void>((resolve) => { this.wake = resolve; });
          continue;
        }
        this.dirty.delete(key);
        const steerOnly = this.steerOnly.delete(key);
        const a = this.attachments.get(key);
        if (!a) continue;
        try {
          // Read again under the lock: a DEL, and maybe a new ADD of the key, may have run while
          // this waited for it, and the record of the call that finished last is the one to apply.
          await this.o.locks.run(key, async () => {
            const current = this.attachments.get(key);
            if (current && !(steerOnly && await this.resteer(key, current))) await this.resync(current);
          });
        } catch (err) {
          this.o.logger.error({ err, pod: `${a.namespace}/${a.name}` }, 'egress update failed; retrying');
          await sleep(1_000, signal);
          this.markFull(key);
        }
      }
    } finally {
      offEgress();
      offPod();
      clearInterval(timer);
      await this.pinning;
    }
  }

  /**
   * The flow pins of an attachment moved by a retarget (docs/egress-failover.md#draining), once no
   * move waits and beside the loop, so that no move of another pod is held up by their nft or
   * iptables process (under TCG in the VM one sync, then ~6 processes, took ~2 s, and held the
   * drain's end back that long while it ran in the loop). On failure the attachment is resynced in full.
   */
  private async syncPins(key: string): Promise<void> {
    this.pinsDue.delete(key);
    try {
      await this.o.locks.run(key, async () => {
        const a = this.attachments.get(key);
        const last = this.applied.get(key);
        if (a && last) await this.o.egressClient.syncFlowPins(a.netns, last.plan);
      });
    } catch (err) {
      this.o.logger.error({ err, key }, 'pinning the egress flows failed; resyncing');
      this.markFull(key);
    }
  }

  /** Applies the current state of the pod's Egresses; removes everything when none is left. */
  private async resync(a: EgressAttachment): Promise<void> {
    const pod = this.o.cache.get(Kinds.Pod, { namespace: a.namespace, name: a.name });
    if (!pod) {
      // DEL normally comes; a record whose netns is gone (GC'd sandbox, reboot) is dropped here.
      if (!existsSync(a.netns)) await this.onDel(a.containerId, a.ifname);
      return;
    }
    const gateways: EgressGateway[] = [];
    const refs = egressRefsOf(pod.metadata?.annotations);
    for (const ref of refs) {
      const egress = this.o.cache.get(Kinds.Egress, ref);
      const service = egress ? await this.o.client.get(Kinds.Service, ref) : undefined;
      if (egress && service) gateways.push(...gatewaysOf(egress, service));
    }
    const key = this.o.lockKey(a.containerId, a.ifname);
    // After a coild restart nothing is remembered: the tunnels' remotes in the pod netns say
    // where each client is, so a restart moves no client (and none of its connections).
    const remembered = this.applied.get(key)?.gateways;
    const unsteered = this.sharedWithoutSteering(gateways);
    if (unsteered && remembered?.every((g) => g.snatAddress === undefined)) {
      // A running client is not cut off (its tunnel stays, to the ClusterIP), but told once.
      this.o.logger.warn({ pod: `${a.namespace}/${a.name}` }, unsteered);
      this.o.recorder.event(pod as V1Pod, 'Warning', 'EgressUnavailable', unsteered);
    }
    const inKernel = !remembered && this.o.steering && typeof this.o.egressClient.peerRemotes === 'function'
      ? await this.o.egressClient.peerRemotes(a.netns).catch(() => [] as string[]) : [];
    const steered = this.steer(a, gateways, remembered, inKernel);
    const plan = this.plan(a, steered);
    if (plan.families.length === 0) await this.o.egressClient.remove(a.netns);
    else await this.o.egressClient.apply(a.netns, plan);
    this.remember(key, refs.map((r) => `${r.namespace}/${r.name}`), steered, plan);
    this.o.logger.debug({ pod: `${a.namespace}/${a.name}`, gateways: steered.map((g) => `${g.egress} ${g.natPod ?? g.clusterIp}`) }, 'egress client updated');
  }

  /**
   * Moves the attachment's tunnels to the NAT pods chosen now, with the gateways it was last
   * brought to (no Service read: a failover must not wait for the API server).
   * @returns false when there is no record to start from or the plans differ in more than the
   *   NAT pods (then a full resync follows)
   */
  private async resteer(key: string, a: EgressAttachment): Promise<boolean> {
    const last = this.applied.get(key);
    if (!last) return false;
    const steered = this.steer(a, last.gateways, last.gateways);
    const plan = this.plan(a, steered);
    try {
      if (!(await this.o.egressClient.retarget(a.netns, last.plan, plan))) return false;
    } catch (err) {
      this.o.logger.warn({ err, pod: `${a.namespace}/${a.name}` }, 'moving the egress tunnel in one batch failed; applying in full');
      return false;
    }
    this.remember(key, last.egresses, steered, plan);
    this.pinsDue.add(key);
    const moved = steered.filter((g, i) => g.natPod !== last.gateways[i]?.natPod).map((g) => `${g.egress} ${last.gateways.find((x) => x.clusterIp === g.clusterIp)?.natPod ?? g.clusterIp} → ${g.natPod ?? g.clusterIp}`);
    if (moved.length > 0) this.o.logger.info({ pod: `${a.namespace}/${a.name}`, moved }, 'egress tunnel moved');
    return true;
  }

  /**
   * `gateways` with the NAT pod chosen for this client; `previous` holds where each points now,
   * or else `inKernel`, the remotes of the pod's peer links.
   */
  private steer(a: EgressAttachment, gateways: readonly EgressGateway[], previous: readonly EgressGateway[] | undefined, inKernel: readonly string[] = []): EgressGateway[] {
    const steering = this.o.steering;
    return gateways.map(({ natPod: _, draining: _d, ...g }) => {
      const family = g.clusterIp.includes(':') ? 6 : 4;
      const client = a.ips.find((ip) => (ip.includes(':') ? 6 : 4) === family);
      if (!steering || client === undefined) return g;
      const [namespace = '', name = ''] = g.egress.split('/');
      const ref = { namespace, name };
      const prev = previous?.find((p) => p.egress === g.egress && p.clusterIp === g.clusterIp);
      // After a restart: the peer links in the netns are the tunnel and the links it drains through.
      const was = prev ? { current: prev.natPod, draining: prev.draining ?? [] } : steering.recover(ref, client, inKernel.filter((r) => r !== g.clusterIp));
      const p = steering.placement(ref, client, was.current, was.draining, g.snatAddress !== undefined);
      return { ...g, ...(p.natPod !== undefined ? { natPod: p.natPod } : {}), ...(p.draining.length > 0 ? { draining: p.draining } : {}) };
    });
  }

  private plan(a: EgressAttachment, gateways: readonly EgressGateway[]): EgressClientPlan {
    return planEgressClient({ podIps: a.ips, gateways, port: this.o.port, ...(a.linkMtuBytes ? { linkMtuBytes: a.linkMtuBytes } : {}) });
  }

  private remember(key: string, egresses: string[], gateways: EgressGateway[], plan: EgressClientPlan): void {
    const before = this.applied.get(key)?.egresses.join(',');
    this.applied.set(key, { egresses, gateways, plan });
    if (before !== egresses.join(',')) this.publishUse();
  }

  /** Tells the steering which Egresses this node's clients use (their NAT pods get probed). */
  private publishUse(): void {
    this.o.steering?.use(new Set([...this.applied.values()].flatMap((x) => x.egresses)));
  }

  /**
   * The NAT pods of `egress` changed state: the attachments using it whose choice changes are
   * moved (the choice is pure and cheap; the move is one batch per pod).
   */
  onSteeringChange(egress: string): void {
    for (const [key, last] of this.applied) {
      if (!last.egresses.includes(egress)) continue;
      const a = this.attachments.get(key);
      if (!a) continue;
      const steered = this.steer(a, last.gateways, last.gateways);
      if (steered.some((g, i) => g.natPod !== last.gateways[i]?.natPod || drainKey(g) !== drainKey(last.gateways[i]))) {
        if (!this.dirty.has(key)) this.steerOnly.add(key);
        this.mark(key);
      }
    }
  }

  /**
   * Why `gateways` cannot work on this node: an Egress with a shared SNAT address, whose answers
   * come back only to its active NAT pod, while this coild does not steer and its tunnels point at
   * the ClusterIP, which reaches any of them (docs/egress-failover.md#sessions-kept-the-shared-snat-address).
   * @returns the message, undefined when none
   */
  private sharedWithoutSteering(gateways: readonly EgressGateway[]): string | undefined {
    const shared = this.o.steering ? undefined : gateways.find((g) => g.snatAddress !== undefined);
    return shared && `Egress ${shared.egress} has a shared SNAT address (spec.snatAddresses), which needs coild's NAT pod steering; this node runs coild with --egress-nat-steering=false`;
  }

  private missingFeatures(families: ReadonlyArray<4 | 6>): string | undefined {
    const f = this.features;
    if (!f) return 'unknown features (not probed yet)';
    const missing = [...(f.fou ? [] : ['fou']), ...(families.includes(4) && !f.ipip ? ['ipip'] : []), ...(families.includes(6) && !f.ip6tnl ? ['ip6tnl'] : [])];
    return missing.length === 0 ? undefined : missing.join(', ');
  }

  private async record(a: EgressAttachment): Promise<void> {
    const key = this.o.lockKey(a.containerId, a.ifname);
    this.attachments.set(key, a);
    const file = join(this.o.stateDir, fileOf(key));
    // Written aside and renamed, so a crash never leaves half a record.
    await writeFile(`${file}.tmp`, JSON.stringify(a), { mode: 0o600 });
    await rename(`${file}.tmp`, file);
  }

  private mark(key: string): void {
    this.dirty.add(key);
    this.wake?.();
  }

  /** A mark that needs the full resync (an Egress, Service or pod changed). */
  private markFull(key: string): void {
    this.steerOnly.delete(key);
    this.mark(key);
  }

  /**
   * An Egress changed: every attachment is re-applied, not only those naming it now — a pod may
   * have just dropped it, and a node holds few egress clients, so precision would buy nothing.
   */
  private markNaming(): void {
    for (const key of this.attachments.keys()) this.markFull(key);
  }

  private markPod(namespace: string, name: string): void {
    for (const [key, a] of this.attachments) if (a.namespace === namespace && a.name === name) this.markFull(key);
  }
}

function drainKey(g: EgressGateway | undefined): string {
  return [...(g?.draining ?? [])].sort().join(',');
}

function fileOf(key: string): string {
  return `${key.replace(/[^A-Za-z0-9_.-]/g, '_')}.json`;
}
