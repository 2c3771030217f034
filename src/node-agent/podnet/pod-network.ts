/**
 * PodNetwork: how coild wires a pod's network namespace to the node, as Coil's
 * `nodenet.PodNetwork` (docs/compatibility.md#pod-network-setup). This file holds the contract,
 * names and shapes; `pod-network-rtnetlink.ts` implements it on rtnetlink (iproute2 its fallback)
 * and tests can swap in a fake.
 */
import { hash } from 'node:crypto';

/** Gateway of IPv6 pods: a fixed link-local address on every host veth (see RtnetlinkPodNetwork). */
export const IPV6_GATEWAY = 'fe80::1';

/** Prefix of the host veth alias that marks a link as coil's. */
export const ALIAS_PREFIX = 'COIL:';

/** What {@link PodNetwork.setup} needs. Addresses are plain addresses (no `/len`). */
export interface PodSetupOptions {
  /** CNI_CONTAINERID: alphanumerics, `_`, `.`, `-` (CNI spec). */
  containerId: string;
  /** CNI_IFNAME: name of the pod-side veth, e.g. `eth0` (≤ 15 bytes). */
  ifname: string;
  /** AddressPool name, recorded in the host veth alias for start-up recovery. */
  pool: string;
  /** Pod IPv4 address, added as /32. At least one of ipv4/ipv6 is required. */
  ipv4?: string;
  /** Pod IPv6 address, added as /128. */
  ipv6?: string;
  /**
   * Node IPv4 (InternalIP): the pod's IPv4 gateway. Required with `ipv4`
   * (docs/compatibility.md#gateways-need-node-internalips).
   */
  hostIPv4?: string;
  /** Node IPv6 (InternalIP), added as /128 on the host veth when given; the gateway is {@link IPV6_GATEWAY}. */
  hostIPv6?: string;
  /** MTU of both veth ends; default: the one detected by `init()`, else the kernel's 1500. */
  mtuBytes?: number;
}

/** One CNI result interface. */
export interface PodInterface {
  name: string;
  /** MAC, lower-case colon form. */
  mac: string;
  /** The netns path, for the container-side interface only. */
  sandbox?: string;
}

/** One CNI result IP. */
export interface PodIp {
  /** CIDR string: `10.0.0.5/32` or `fd00::5/128`. */
  address: string;
  /** The gateway address used inside the pod (node IPv4, or {@link IPV6_GATEWAY}). */
  gateway: string;
  /** Index into {@link PodNetworkResult.interfaces}: always 0, the container side. */
  interface: 0;
}

/** Result of {@link PodNetwork.setup}, shaped after a CNI 1.x result. */
export interface PodNetworkResult {
  /** Name of the host-side veth. */
  hostIfname: string;
  /** `[container side (with sandbox), host side]`. */
  interfaces: [PodInterface, PodInterface];
  /** IPv4 first, then IPv6, as present. */
  ips: PodIp[];
}

/** What {@link PodNetwork.check} compares with the kernel. Addresses are plain addresses. */
export interface PodCheckOptions {
  containerId: string;
  ifname: string;
  /** When given, the pod side is inspected too. */
  netnsPath?: string;
  ipv4?: string;
  ipv6?: string;
}

/** A pod found on the host by {@link PodNetwork.list}: alias fields plus table-116 addresses. */
export interface PodNetworkEntry {
  pool: string;
  containerId: string;
  ifname: string;
  /** Pod IPv4 address (no prefix), from the /32 route in the pod table. */
  ipv4?: string;
  /** Pod IPv6 address (no prefix), from the /128 route in the pod table. */
  ipv6?: string;
  hostIfname: string;
  /** netns id (host view) of the pod side, when the kernel reports it. */
  netnsId?: number;
}

/**
 * Whether a listed pod interface is what an ADD left when it stopped half-way (coild killed
 * between its netlink requests): the host veth carries coil's alias, which the ADD sets right
 * after creating the veth, but no pod-table route, which it adds last on the host side. An ADD
 * reports success only after both, so no runtime was told this key has an address; the runtime
 * answers the failed ADD with a DEL or a new ADD, and until then the veth holds nothing. Start-up
 * recovery and GC delete it rather than keep a link no allocation accounts for. A veth whose route
 * someone else removed from a running pod looks the same; that pod already had no traffic from
 * the node and an address coild could not know, so deleting is no loss (docs/node-state.md).
 */
export function isHalfWired(e: PodNetworkEntry): boolean {
  return e.ipv4 === undefined && e.ipv6 === undefined;
}

/** Result of {@link PodNetwork.init}. */
export interface PodNetworkInitResult {
  /** MTU that setups will use by default; undefined = kernel default. */
  mtuBytes: number | undefined;
  /** Families whose `lookup <pod table>` rule was missing and has been added. */
  addedRuleFamilies: Array<4 | 6>;
}

/**
 * Kernel side of pod networking. Calls for different `containerId:ifname` keys may run in
 * parallel; the caller serialises calls for one key (coild's per-container lock, Coil #368).
 * @see docs/compatibility.md#coild-start-up (init), docs/compatibility.md#pod-network-setup
 *   (setup), docs/compatibility.md#add-del-and-check (check/destroy)
 */
export interface PodNetwork {
  /**
   * Enables IPv4/IPv6 forwarding, adds the pod-table rule for each family unless a rule with its
   * priority exists, and detects the MTU. Every step is attempted.
   * @throws AggregateError listing the steps that failed (Coil only logs them)
   */
  init(): Promise<PodNetworkInitResult>;
  /**
   * Creates the veth pair, addresses and routes for one pod interface. Rebuilds the wiring when
   * the key is already set up (idempotent ADD). On failure nothing of this key is left.
   * @param netnsPath CNI_NETNS, an absolute netns file path
   * @throws PodNetworkError
   */
  setup(netnsPath: string, options: PodSetupOptions): Promise<PodNetworkResult>;
  /**
   * Compares the kernel with the expectation.
   * @returns human-readable problems; empty when everything matches (CNI CHECK passes)
   * @throws PodNetworkError when the kernel cannot be read
   */
  check(options: PodCheckOptions): Promise<string[]>;
  /**
   * Disconnects the pod interface: on return its routes are gone, the host veth is down, and
   * list/check no longer see it; the veth pair itself is deleted shortly after, in a batch with
   * other destroyed ones (see {@link reap}). A missing link is success, so DEL may repeat.
   * @throws PodNetworkError
   */
  destroy(containerId: string, ifname: string): Promise<void>;
  /**
   * Deletes the veths of destroyed pods now and waits (shutdown, tests). `init()` does it too,
   * for leftovers of a previous run.
   * @throws PodNetworkError
   */
  reap(): Promise<void>;
  /**
   * Every pod interface on the host: each link whose coil alias names a pool, with its pod-table
   * routes. Left out: links retired to the reaper (a DEL's veth waiting for its group delete, which
   * is no pod's any more however long it waits) and egress-only aliases (`COIL::<uid>:<ifname>`).
   *
   * A snapshot, stale as soon as it returns: a DEL may retire a listed veth, a failed ADD roll one
   * back, an ADD wire one the snapshot lacks. So only two readers may act on it directly:
   * start-up recovery, which runs before coild serves any CNI call or starts a loop (nothing else
   * changes the host then), and the invariant checker, which reads at quiescent points. Any other
   * decision about one key (GC adopting or freeing it) is taken under that key's lock, after
   * {@link inspect} has read the key's link again (gc.ts).
   * @throws PodNetworkError
   */
  list(): Promise<PodNetworkEntry[]>;
  /**
   * One key's pod interface as the host holds it now, read afresh; the same test as {@link list}.
   * Call it under the key's lock, so that no ADD or DEL of the key can change the answer before
   * the caller acts on it.
   * @param hostIfname the link to read; default {@link hostVethName}. Pass the name a listing
   *   reported for links Coil (Go) named at random before a migration.
   * @returns undefined when the host holds no pod interface of the key: no link, a link retired to
   *   the reaper (a DEL ran), or a link whose alias names another key
   * @throws PodNetworkError when the kernel cannot be read
   */
  inspect(containerId: string, ifname: string, hostIfname?: string): Promise<PodNetworkEntry | undefined>;
}

/** Why a PodNetwork call failed: bad input, a foreign link in the way, or the kernel refused. */
export type PodNetworkErrorKind = 'invalid-argument' | 'name-collision' | 'kernel';

/** A failed PodNetwork call; `cause` is the NetlinkError (with the failing command and stderr). */
export class PodNetworkError extends Error {
  readonly kind: PodNetworkErrorKind;
  readonly containerId: string;
  readonly ifname: string;

  constructor(message: string, o: { kind: PodNetworkErrorKind; containerId: string; ifname: string; cause?: unknown }) {
    super(message, o.cause === undefined ? undefined : { cause: o.cause });
    this.name = 'PodNetworkError';
    this.kind = o.kind;
    this.containerId = o.containerId;
    this.ifname = o.ifname;
  }
}

/**
 * Host veth name: `veth` + the first 11 hex digits of SHA-1(`<containerId>:<ifname>`), 15 bytes,
 * the kernel's limit. Deterministic, so a stale link of the same pod is found by name without
 * listing every link, and the `veth` prefix matches Calico's FELIX_INTERFACEPREFIX convention.
 */
export function hostVethName(containerId: string, ifname: string): string {
  return `veth${hash('sha1', `${containerId}:${ifname}`, 'hex').slice(0, 11)}`;
}

/**
 * The host veth alias `COIL:<pool>:<containerID>:<ifname>` (Coil's format,
 * docs/compatibility.md#pod-network-setup).
 */
export function formatAlias(pool: string, containerId: string, ifname: string): string {
  return `${ALIAS_PREFIX}${pool}:${containerId}:${ifname}`;
}

/** Parses {@link formatAlias}'s output; undefined for anything else. Pool may be '' (egress-only). */
export function parseAlias(alias: string): { pool: string; containerId: string; ifname: string } | undefined {
  if (!alias.startsWith(ALIAS_PREFIX)) return undefined;
  const parts = alias.slice(ALIAS_PREFIX.length).split(':');
  const pool = parts[0];
  const ifname = parts.at(-1);
  if (parts.length < 3 || pool === undefined || ifname === undefined || ifname === '') return undefined;
  const containerId = parts.slice(1, -1).join(':');
  return containerId === '' ? undefined : { pool, containerId, ifname };
}
