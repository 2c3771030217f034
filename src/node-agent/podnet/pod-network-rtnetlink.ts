/**
 * PodNetwork on rtnetlink: each setup is two lists of typed requests (pod-network-wiring.ts), host
 * side and pod side, applied by the NetlinkExecutor's rtnetlink backend in one call (≈ 0.3 ms);
 * reads (list, inspect, check, a stale veth's alias) are rtnetlink dumps of links, addresses and
 * routes (≈ 0.1–1 ms each; docs/performance.md#recovery-and-gc-reads). Without a usable backend
 * the same requests and reads run as `ip -batch` and `ip -json` processes (≈ 5–10 ms per side,
 * against ≈ 30 ms for one process per command; docs/performance.md#pod-wiring).
 * @see docs/compatibility.md#coild-start-up, docs/compatibility.md#pod-network-setup,
 *   docs/compatibility.md#add-del-and-check
 */
import { randomFillSync } from 'node:crypto';
import { POD_RULE_PRIO, POD_TABLE_ID, PROTOCOL_ID } from '../../api/v2/keys.js';
import { readAddrs } from '../../netlink/addr.js';
import { canonicalAddress } from '../../ipam/ip-address.js';
import { routeKeyOfDst } from '../../netlink/cidr.js';
import type { IpRunner } from '../../netlink/iproute2/ip-runner.js';
import { readLinks, type Link } from '../../netlink/link.js';
import { NetlinkExecutor } from '../../netlink/netlink-executor.js';
import { rt } from '../../netlink/rt-request.js';
import { LinkReaper } from '../../netlink/link-reaper.js';
import { detectMtu } from '../../netlink/mtu.js';
import { NetlinkError, isNetlinkErrno } from '../../netlink/netlink-error.js';
import { readRoutes, readRoutesBothFamilies, type Route } from '../../netlink/route.js';
import { readRules } from '../../netlink/rule.js';
import { writeSysctl } from '../../netlink/sysctl.js';
import {
  IPV6_GATEWAY, PodNetworkError, hostVethName, parseAlias,
  type PodCheckOptions, type PodNetwork, type PodNetworkEntry, type PodNetworkInitResult,
  type PodNetworkResult, type PodSetupOptions,
} from './pod-network.js';
import { validateSetup } from './pod-network-validate.js';
import { hostWiring, podWiring } from './pod-network-wiring.js';

/** Constructor options of {@link RtnetlinkPodNetwork}. */
export interface RtnetlinkPodNetworkOptions {
  /** Executor of every kernel call. Default: one on {@link ip}. */
  kernel?: NetlinkExecutor;
  /**
   * Without {@link kernel}: an executor on this iproute2 runner alone (tests of the fallback).
   * Default: a new IpRunner.
   */
  ip?: IpRunner;
  /** netns file path standing in for the host netns (tests); default: coild's own netns. */
  hostNetns?: string;
  /** Table of the host routes to pods (coild `--pod-table-id`). Default 116. */
  podTableId?: number;
  /** Priority of the `lookup <podTableId>` rule (coild `--pod-rule-prio`). Default 2000. */
  podRulePrio?: number;
  /** Protocol id of the host routes (coild `--protocol-id`). Default 30. */
  protocolId?: number;
  /** Fixed pod MTU; when set, `init()` does not detect one. */
  mtuBytes?: number;
  /** Link group of destroyed veths awaiting deletion (> 0). Default 0x434f494c ("COIL"), LinkReaper's. */
  retiredLinkGroup?: number;
  /** Delay gathering destroyed veths into one deletion. Default LinkReaper's (500 ms). */
  reapDelayMs?: number;
  /** Told about failed background deletions (coild logs them); the next deletion retries. */
  onReapError?: (err: unknown) => void;
}

/**
 * The rtnetlink {@link PodNetwork}.
 *
 * IPv6 gateway: every host veth carries the fixed link-local {@link IPV6_GATEWAY} (`nodad`), and
 * pods route `default via fe80::1`. Coil instead waits (up to 10 s) for DAD and then reads the
 * kernel-generated link-local; a fixed address needs no wait and no read, link-local addresses
 * are per link so the same one on every veth cannot clash, and nodes without an IPv6 InternalIP
 * can host IPv6 pods (docs/compatibility.md#gateways-need-node-internalips). Pod addresses are
 * added `nodad` as well: IPAM hands each out once and the only other station on a veth is the host.
 *
 * State: the detected MTU (set by `init()`) and the reaper's timer; calls for different keys run
 * in parallel.
 */
export class RtnetlinkPodNetwork implements PodNetwork {
  private readonly kernel: NetlinkExecutor;
  /** The executor's iproute2 runner, for what only processes do (sysctl in another netns). */
  private readonly ip: IpRunner;
  private readonly hostNetns: string | undefined;
  private readonly podTableId: number;
  private readonly podRulePrio: number;
  private readonly protocolId: number;
  private mtuBytes: number | undefined;
  private readonly isMtuFixed: boolean;
  private readonly reaper: LinkReaper;

  constructor(options: RtnetlinkPodNetworkOptions = {}) {
    this.kernel = options.kernel ?? new NetlinkExecutor(options.ip ? { ip: options.ip } : {});
    this.ip = this.kernel.ip;
    this.hostNetns = options.hostNetns;
    this.podTableId = options.podTableId ?? POD_TABLE_ID;
    this.podRulePrio = options.podRulePrio ?? POD_RULE_PRIO;
    this.protocolId = options.protocolId ?? PROTOCOL_ID;
    this.mtuBytes = options.mtuBytes;
    this.isMtuFixed = options.mtuBytes !== undefined;
    this.reaper = new LinkReaper({
      kernel: this.kernel, netns: this.hostNetns,
      ...(options.retiredLinkGroup !== undefined ? { group: options.retiredLinkGroup } : {}),
      ...(options.reapDelayMs !== undefined ? { delayMs: options.reapDelayMs } : {}),
      ...(options.onReapError ? { onError: options.onReapError } : {}),
    });
  }

  async init(): Promise<PodNetworkInitResult> {
    const host = { netns: this.hostNetns };
    const addedRuleFamilies: Array<4 | 6> = [];
    const ensureRule = async (family: 4 | 6): Promise<void> => {
      const rules = await readRules(this.kernel, { ...host, family });
      if (rules.some((r) => r.priority === this.podRulePrio)) return;
      await this.kernel.apply([rt.ruleAdd({ family, priority: this.podRulePrio, table: this.podTableId })], host);
      addedRuleFamilies.push(family);
    };
    const steps = await Promise.allSettled([
      writeSysctl(this.ip, 'net.ipv4.ip_forward', '1', host),
      writeSysctl(this.ip, 'net.ipv6.conf.all.forwarding', '1', host),
      ensureRule(4),
      ensureRule(6),
      this.isMtuFixed ? Promise.resolve() : detectMtu(this.kernel, host).then((m) => { this.mtuBytes = m; }),
      this.reaper.reap(),
    ]);
    const errors = steps.flatMap((s) => (s.status === 'rejected' ? [s.reason as unknown] : []));
    if (errors.length > 0) throw new AggregateError(errors, `pod network init: ${errors.length} of ${steps.length} steps failed`);
    return { mtuBytes: this.mtuBytes, addedRuleFamilies };
  }

  /**
   * Undoes {@link init} on an uninstall (uninstall.ts): deletes the pod-table rule and every route
   * of the pod table, both families. Forwarding stays on (other CNIs need it too).
   * @throws NetlinkError
   */
  async deinit(): Promise<void> {
    const host = { netns: this.hostNetns };
    for (const family of [4, 6] as const) {
      const rules = await readRules(this.kernel, { ...host, family });
      const requests = rules.filter((r) => r.priority === this.podRulePrio && r.table === String(this.podTableId))
        .map(() => rt.ruleDel({ family, priority: this.podRulePrio, table: this.podTableId }));
      // `ip route flush table T` as typed requests: every route of the table, by its key.
      const routes = await readRoutes(this.kernel, { ...host, family, table: this.podTableId });
      for (const r of routes) {
        requests.push(rt.routeDel({ dst: r.dst === 'default' ? (family === 4 ? '0.0.0.0/0' : '::/0') : r.dst, ...(r.dev ? { dev: r.dev } : {}), table: this.podTableId }));
      }
      if (requests.length > 0) await this.kernel.apply(requests, host);
    }
  }

  async setup(netnsPath: string, options: PodSetupOptions): Promise<PodNetworkResult> {
    const v = validateSetup(netnsPath, options);
    const hostIfname = hostVethName(v.containerId, v.ifname);
    const mac = randomMac();
    const podMac = randomMac();
    const mtuBytes = options.mtuBytes ?? this.mtuBytes;
    const fail = (message: string, cause: unknown, kind: 'kernel' | 'name-collision' = 'kernel') =>
      new PodNetworkError(`setup of ${v.containerId}:${v.ifname}: ${message}`, { kind, containerId: v.containerId, ifname: v.ifname, cause });

    const hostRequests = hostWiring(v, {
      hostIfname, netnsPath, mac, podMac, podTableId: this.podTableId, protocolId: this.protocolId, ...(mtuBytes ? { mtuBytes } : {}),
    });
    const podRequests = podWiring(v);
    // Both sides in one go (one round trip to the netlink agent); the pod side runs only if the
    // host side, which creates the veth pair, succeeded.
    const outcome = await this.kernel.applySequence([
      { requests: hostRequests, options: { netns: this.hostNetns } },
      { requests: podRequests, options: { netns: netnsPath } },
    ]);
    if (!outcome.ok && outcome.step === 1) throw fail('pod side failed', await this.rollback(hostIfname, outcome.error));
    if (!outcome.ok) {
      const err = outcome.error;
      // EEXIST on `link add` is either a stale veth of this key (rebuilt, as Coil does) or `ifname`
      // taken in the pod netns (a permanent error). Anything later failed after the link existed.
      const isLinkAdd = err instanceof NetlinkError && err.failedRequest === 1;
      if (!isLinkAdd) throw fail('host side failed', await this.rollback(hostIfname, err));
      if (!isNetlinkErrno(err, 'EEXIST')) throw fail('creating the veth pair failed', err);
      const stale = await this.staleLinkAlias(hostIfname);
      if (stale === undefined) throw fail(`interface ${v.ifname} already exists in ${netnsPath}`, err);
      if (stale !== '' && stale !== v.alias) throw fail(`host veth ${hostIfname} belongs to "${stale}"`, err, 'name-collision');
      try {
        // Deleted synchronously, tolerating the reaper getting there first (a retired link).
        await this.deleteLink(hostIfname);
        await this.kernel.apply(hostRequests, { netns: this.hostNetns });
      } catch (err2) {
        throw fail('host side failed after removing a stale veth', await this.rollback(hostIfname, err2));
      }
      try {
        await this.kernel.apply(podRequests, { netns: netnsPath });
      } catch (err3) {
        throw fail('pod side failed', await this.rollback(hostIfname, err3));
      }
    }
    return {
      hostIfname,
      interfaces: [{ name: v.ifname, mac: podMac, sandbox: netnsPath }, { name: hostIfname, mac }],
      ips: [
        ...(v.ipv4 && v.hostIPv4 ? [{ address: `${v.ipv4}/32`, gateway: v.hostIPv4, interface: 0 as const }] : []),
        ...(v.ipv6 ? [{ address: `${v.ipv6}/128`, gateway: IPV6_GATEWAY, interface: 0 as const }] : []),
      ],
    };
  }

  async check(options: PodCheckOptions): Promise<string[]> {
    const hostIfname = hostVethName(options.containerId, options.ifname);
    const host = { netns: this.hostNetns };
    // A missing link or netns is a finding, not a failure to read.
    const orMissing = <T>(p: Promise<T[]>): Promise<T[] | 'missing'> =>
      p.catch((e: unknown) => (isNetlinkErrno(e, 'ENODEV', 'ENOENT') ? 'missing' as const : Promise.reject(e)));
    try {
      const [links, routes, podAddrs] = await Promise.all([
        orMissing(readLinks(this.kernel, { ...host, dev: hostIfname })),
        readRoutesBothFamilies(this.kernel, { ...host, table: this.podTableId }),
        options.netnsPath === undefined ? undefined : orMissing(readAddrs(this.kernel, { netns: options.netnsPath, dev: options.ifname })),
      ]);
      const hostLink = links === 'missing' ? undefined : links[0];
      if (hostLink === undefined || this.reaper.isRetired(hostLink)) return [`host veth ${hostIfname} not found`];
      const problems: string[] = [];
      const alias = hostLink.ifalias === undefined ? undefined : parseAlias(hostLink.ifalias);
      if (alias?.containerId !== options.containerId || alias.ifname !== options.ifname) {
        problems.push(`host veth ${hostIfname} has alias "${hostLink.ifalias ?? ''}"`);
      }
      if (!hostLink.flags.includes('UP')) problems.push(`host veth ${hostIfname} is down`);
      const wanted = [options.ipv4, options.ipv6].filter((a): a is string => a !== undefined).map((a) => canonicalAddress(a));
      const routed = new Set(routes.filter((r) => r.dev === hostIfname && r.gateway === undefined).map((r) => routeKeyOfDst(r.dst)));
      for (const a of wanted) if (!routed.has(a)) problems.push(`no route to ${a} via ${hostIfname} in table ${this.podTableId}`);
      if (podAddrs === undefined) return problems;
      const podLink = podAddrs === 'missing' ? undefined : podAddrs[0];
      if (podLink === undefined) return [...problems, `${options.ifname} not found in ${options.netnsPath ?? ''}`];
      const have = new Set(podLink.addr_info.map((a) => canonicalAddress(a.local)));
      for (const a of wanted) if (!have.has(a)) problems.push(`${options.ifname} lacks address ${a}`);
      return problems;
    } catch (err) {
      throw new PodNetworkError(`check of ${options.containerId}:${options.ifname}: cannot read the kernel`,
        { kind: 'kernel', containerId: options.containerId, ifname: options.ifname, cause: err });
    }
  }

  async destroy(containerId: string, ifname: string): Promise<void> {
    try {
      await this.kernel.apply([this.reaper.retire(hostVethName(containerId, ifname))], { netns: this.hostNetns });
      this.reaper.schedule();
    } catch (err) {
      if (!isNetlinkErrno(err, 'ENODEV')) {
        throw new PodNetworkError(`destroy of ${containerId}:${ifname} failed`, { kind: 'kernel', containerId, ifname, cause: err });
      }
      await this.destroyByAlias(containerId, ifname);
    }
  }

  /**
   * Fallback of destroy: links carrying the pod's alias under another name, which Coil (Go)
   * created with random names, so pods wired before a migration are still torn down. Costs one
   * read, only when the deterministic name is absent (a repeated DEL).
   */
  private async destroyByAlias(containerId: string, ifname: string): Promise<void> {
    try {
      const links = await readLinks(this.kernel, { netns: this.hostNetns });
      const stale = links.filter((l) => {
        const a = l.ifalias === undefined ? undefined : parseAlias(l.ifalias);
        return a?.containerId === containerId && a.ifname === ifname && !this.reaper.isRetired(l);
      });
      if (stale.length === 0) return;
      await this.kernel.apply(stale.map((l) => this.reaper.retire(l.ifname)), { netns: this.hostNetns, onError: 'continue' });
      this.reaper.schedule();
    } catch (err) {
      if (!isNetlinkErrno(err, 'ENODEV')) {
        throw new PodNetworkError(`destroy of ${containerId}:${ifname} failed`, { kind: 'kernel', containerId, ifname, cause: err });
      }
    }
  }

  async list(): Promise<PodNetworkEntry[]> {
    const host = { netns: this.hostNetns };
    try {
      const [links, routes] = await Promise.all([
        readLinks(this.kernel, host),
        readRoutesBothFamilies(this.kernel, { ...host, table: this.podTableId }),
      ]);
      return links.flatMap((l) => this.podEntryOf(l, routes) ?? []);
    } catch (err) {
      throw new PodNetworkError('listing pod interfaces failed', { kind: 'kernel', containerId: '', ifname: '', cause: err });
    }
  }

  async inspect(containerId: string, ifname: string, hostIfname = hostVethName(containerId, ifname)): Promise<PodNetworkEntry | undefined> {
    const host = { netns: this.hostNetns };
    try {
      // Link first, routes after: a DEL between the two reads would be seen by the route read as
      // a pod without routes, never as routes of a retired veth.
      const [l] = await readLinks(this.kernel, { ...host, dev: hostIfname }).catch((e: unknown) => (isNetlinkErrno(e, 'ENODEV') ? [] : Promise.reject(e)));
      if (l === undefined) return undefined;
      const e = this.podEntryOf(l, await readRoutesBothFamilies(this.kernel, { ...host, table: this.podTableId }));
      return e?.containerId === containerId && e.ifname === ifname ? e : undefined;
    } catch (err) {
      throw new PodNetworkError(`inspecting ${containerId}:${ifname} failed`, { kind: 'kernel', containerId, ifname, cause: err });
    }
  }

  /**
   * The one test of "a pod's interface" shared by {@link list} and {@link inspect}: a link whose
   * coil alias names a pool and that is not retired to the reaper, with its pod-table routes.
   */
  private podEntryOf(l: Link, routes: readonly Route[]): PodNetworkEntry | undefined {
    const a = l.ifalias === undefined || this.reaper.isRetired(l) ? undefined : parseAlias(l.ifalias);
    if (a === undefined || a.pool === '') return undefined;
    // A pod's own routes have no gateway; one with a gateway through its veth routes something
    // else to it (an Egress's shared SNAT address to its active NAT pod, egress/snat-routes.ts).
    const mine = routes.filter((r) => r.dev === l.ifname && r.gateway === undefined).map((r) => routeKeyOfDst(r.dst));
    const ipv4 = mine.find((k) => !k.includes('/') && !k.includes(':'));
    const ipv6 = mine.find((k) => !k.includes('/') && k.includes(':'));
    return { ...a, hostIfname: l.ifname, ...(ipv4 ? { ipv4 } : {}), ...(ipv6 ? { ipv6 } : {}),
      ...(l.link_netnsid !== undefined ? { netnsId: l.link_netnsid } : {}) };
  }

  async reap(): Promise<void> {
    try {
      await this.reaper.reap();
    } catch (err) {
      throw new PodNetworkError('deleting destroyed veths failed', { kind: 'kernel', containerId: '', ifname: '', cause: err });
    }
  }

  /** Alias of an existing host link named `name` ('' when unset), or undefined when there is none. */
  private async staleLinkAlias(name: string): Promise<string | undefined> {
    try {
      const [l] = await readLinks(this.kernel, { netns: this.hostNetns, dev: name });
      return l === undefined ? undefined : l.ifalias ?? '';
    } catch (err) {
      if (isNetlinkErrno(err, 'ENODEV')) return undefined;
      throw err;
    }
  }

  /** Deletes a host link now; a missing one is fine. @throws NetlinkError */
  private async deleteLink(name: string): Promise<void> {
    try {
      await this.kernel.apply([rt.linkDel(name)], { netns: this.hostNetns });
    } catch (err) {
      if (!isNetlinkErrno(err, 'ENODEV')) throw err;
    }
  }

  /**
   * Deletes the host veth after a failure past `link add` (its peer and routes go with it), so a
   * failed setup leaves nothing. A failed rollback is reported together with the original error.
   * @returns the error to report
   */
  private async rollback(name: string, err: unknown): Promise<unknown> {
    try {
      await this.deleteLink(name);
      return err;
    } catch (rbErr) {
      return new AggregateError([err, rbErr], `${String(err)}; rollback failed too`);
    }
  }
}

/** Random bytes for {@link randomMac}, refilled 64 MACs at a time (one getrandom(2) per 64 pods). */
const macPool = Buffer.alloc(6 * 64);
let macPoolOffset = macPool.length;
const HEX = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, '0'));

/** A random locally administered unicast MAC, as the kernel picks for veths. */
function randomMac(): string {
  if (macPoolOffset === macPool.length) {
    randomFillSync(macPool);
    macPoolOffset = 0;
  }
  const o = macPoolOffset;
  macPoolOffset += 6;
  const b = macPool;
  return `${HEX[((b[o] as number) & 0xfe) | 0x02]}:${HEX[b[o + 1] as number]}:${HEX[b[o + 2] as number]}:${HEX[b[o + 3] as number]}:${HEX[b[o + 4] as number]}:${HEX[b[o + 5] as number]}`;
}
