/**
 * Typed netlink requests: what the pod-network layer wants of the kernel (a veth pair, link
 * settings, addresses, routes), what an egress tunnel's move does (a FoU peer link, `route
 * replace`) and what FoU needs besides (receive ports: the generic netlink family `fou`; the
 * flow-based receive devices), stated once as data. Executors apply them: rtnetlink.ts (and
 * genetlink.ts for the `fou` family) builds the
 * netlink messages for the netlink agent or coild's own socket (rtnetlink-socket.ts), and
 * rt-format.ts writes the same request as an `ip -batch` line for the iproute2 fallback and the
 * equivalence tests. Pure: no I/O, JSON-serialisable (the agent receives them as JSON lines).
 *
 * Each request means what the iproute2 line of rt-format.ts means, defaults included (a route
 * without `protocol` is RTPROT_BOOT, a gatewayless one gets scope link).
 * @see https://man7.org/linux/man-pages/man7/rtnetlink.7.html
 */

/** A route or address scope (rtnetlink `rt_scope_t`). */
export type RtScope = 'global' | 'link' | 'host';

/** One request; link names are resolved to ifindexes in the target netns when applied. */
export type RtRequest =
  /** RTM_NEWLINK veth pair; the peer is created in `peer.netnsPath` (a netns file path) when given. */
  | { kind: 'link-add-veth'; name: string; mtu?: number; mac?: string; peer: { name: string; mtu?: number; mac?: string; netnsPath?: string } }
  /** RTM_NEWLINK on an existing link: alias, MTU, up/down, link group, a new name (`name`). */
  | { kind: 'link-set'; dev: string; alias?: string; mtu?: number; up?: boolean; group?: number; name?: string }
  /** RTM_DELLINK of one link, or of every link in `group`. */
  | { kind: 'link-del'; dev?: string; group?: number }
  /**
   * RTM_NEWLINK of a FoU peer link (fou.ts): `remote` and `local` are plain addresses of one
   * family — ipip for IPv4, ip6tnl mode ip6ip6 without the encapsulation-limit option for IPv6 —
   * with FoU encapsulation to UDP port `encapDport` from `encapSport` (0: per flow, `auto`).
   * Created down.
   */
  | { kind: 'link-add-fou'; name: string; mtu?: number; remote: string; local: string; ttl: number; encapSport: number; encapDport: number }
  /**
   * RTM_NEWLINK of a flow-based ("external", IFLA_IPTUN_COLLECT_METADATA) tunnel device: ipip for
   * family 4, ip6tnl for 6. It receives the FoU packets whose outer source matches no peer link
   * (fou.ts FLOW_DEVICE). Created down.
   */
  | { kind: 'link-add-external'; name: string; family: 4 | 6 }
  /**
   * FOU_CMD_ADD / FOU_CMD_DEL of the generic netlink family `fou`: a UDP receive `port` whose
   * payload, once the UDP header is stripped, is IP protocol `ipproto` (4 = IPIP, 41 = IPv6),
   * listening on `family`'s sockets. Direct encapsulation (not GUE).
   */
  | { kind: 'fou-port'; verb: 'add' | 'del'; family: 4 | 6; port: number; ipproto: number }
  /** RTM_NEWADDR / RTM_DELADDR; `cidr` is `<address>/<bits>`. */
  | { kind: 'addr'; verb: 'add' | 'del'; cidr: string; dev: string; scope?: RtScope; isNoDad?: boolean }
  /**
   * RTM_NEWROUTE / RTM_DELROUTE; `dst` is `<address>/<bits>`, or `default` (family from `via`).
   * `replace` creates the route or replaces the one of the same destination (NLM_F_CREATE |
   * NLM_F_REPLACE), with `add`'s defaults. `prefsrc` (RTA_PREFSRC, a plain address), `metric`
   * (RTA_PRIORITY) and `isOnlink` (RTNH_F_ONLINK) copy a route as the kernel holds it.
   */
  | { kind: 'route'; verb: 'add' | 'del' | 'replace'; dst: string; via?: string; dev?: string; scope?: RtScope; protocol?: number; table?: number; prefsrc?: string; metric?: number; isOnlink?: boolean }
  /**
   * RTM_NEWRULE / RTM_DELRULE: a FIB rule of `family` at `priority` looking up `table`, with the
   * selectors coil uses — destination prefix (`dst`, `<address>/<bits>`), input interface
   * (`iif`), firewall mark (`fwmark`, under `fwmask`; the kernel's default mask is all ones). A
   * `del` removes the rule matching the selectors given.
   */
  | { kind: 'rule'; verb: 'add' | 'del'; family: 4 | 6; priority: number; table: number; dst?: string; iif?: string; fwmark?: number; fwmask?: number };

/** What a route request names: see the `route` kind of {@link RtRequest}. */
export type RouteRequest = Omit<Extract<RtRequest, { kind: 'route' }>, 'kind' | 'verb'>;

/** What a rule request names: see the `rule` kind of {@link RtRequest}. */
export type RuleSelectors = Omit<Extract<RtRequest, { kind: 'rule' }>, 'kind' | 'verb'>;

/** Requests applied in one netns, in order. */
export interface RtBatch {
  /** netns file path; undefined = the executor's own netns. */
  netns?: string;
  requests: readonly RtRequest[];
  /** Apply every request and report each failure (`ip -force`), instead of stopping at the first. */
  force: boolean;
}

/**
 * How one batch went, in the shape `ip [-force] -batch` answers (each failed request's message,
 * then `Command failed -:N` with its 1-based index), so the executor treats both paths alike.
 */
export interface RtBatchResult {
  /** The failures as `ip -batch` would print them (for messages and logs only: never parsed). */
  stderr: string;
  /** 0 = every request applied; 1 = a kernel refusal; 255 = the netns could not be entered. */
  exitCode: number;
  /** Each refused request, typed; empty when the batch failed as a whole (exit 255, a crash). */
  failures: RtFailure[];
}

/** One request of a batch that the kernel (or resolving one of its names) refused. */
export interface RtFailure {
  /** 1-based position of the request in its batch (as `ip -batch` numbers lines). */
  line: number;
  /** Positive errno, e.g. 17 (EEXIST), from the kernel's NLMSG_ERROR or the failed lookup. */
  errno: number;
  /** The kernel's extended-ack text or iproute2's wording for the errno. */
  message: string;
}

/**
 * A read: one rtnetlink dump (RTM_GETLINK, RTM_GETADDR, RTM_GETROUTE, RTM_GETRULE with
 * NLM_F_DUMP; a link by name is a plain RTM_GETLINK), answered in the shapes `ip -json` prints
 * (link.ts, addr.ts, route.ts, rule.ts), so the iproute2 fallback and the test oracle are the same
 * command. Each means the `ip` command of rt-format.ts's formatDump, filters included.
 */
export type RtDump =
  /** `ip -json -d link show [dev D]`: every link, or the one named (ENODEV when missing). */
  | { kind: 'links'; dev?: string }
  /** `ip -json addr show [dev D]`: every link with its addresses of both families. */
  | { kind: 'addrs'; dev?: string }
  /** `ip -<family> -json route show [table T] [dev D]`: table main unless `table`. */
  | { kind: 'routes'; family: 4 | 6; table?: number; dev?: string }
  /** `ip -<family> -json rule show`. */
  | { kind: 'rules'; family: 4 | 6 }
  /** `ip -json route get <address>`: the route the kernel would use (ENETUNREACH when none). */
  | { kind: 'route-get'; address: string }
  /**
   * `ip -json fou show`: the FoU receive ports (FOU_CMD_GET dump of the generic netlink family
   * `fou`; ENOENT when the kernel has no such family: FoU not loaded or not built).
   */
  | { kind: 'fou-ports' };

/**
 * One FoU receive port as `ip -json fou show` prints it (ipfou.c print_fou_mapping): `ipproto`
 * for direct encapsulation, `gue` (null) for GUE; `family` `inet` or `inet6`.
 */
export interface FouPortEntry {
  port: number;
  ipproto?: number;
  gue?: null;
  family: 'inet' | 'inet6';
}

/**
 * What reads dumps: the NetlinkExecutor (rtnetlink, else iproute2) or an IpRunner (iproute2 only:
 * tests' oracle, the egress agent). The readers of link.ts, addr.ts, route.ts and rule.ts take one.
 */
export interface RtReader {
  /** @throws NetlinkError (ENODEV for a `dev` that does not exist) */
  dump<T>(d: RtDump, target?: { netns?: string | undefined }): Promise<T[]>;
}

/**
 * What applies typed requests: the NetlinkExecutor (rtnetlink, else iproute2) or an IpRunner
 * (iproute2 only).
 */
export interface RtApplier {
  /** @throws NetlinkError for the first permanent failure (`failedRequest` = 1-based request index) */
  apply(requests: readonly RtRequest[], options?: { netns?: string | undefined; onError?: 'stop' | 'continue' }): Promise<void>;
}

/** One dump and the netns to read it in. */
export interface RtDumpCall {
  /** netns file path; undefined = the executor's own netns. */
  netns?: string;
  dump: RtDump;
}

/**
 * How one dump went: the entries (JSON values in `ip -json`'s shapes), or the errno and message
 * `ip` would have failed with (`exitCode` 255 when the netns could not be entered).
 */
export type RtDumpResult =
  | { entries: unknown[] }
  | { failure: { errno: number; message: string }; exitCode: number };

/**
 * Something that applies batches through rtnetlink: the netlink agent process (netlink-agent.ts)
 * or coild's own socket when it runs on Bun (rtnetlink-inprocess.ts).
 */
export interface RtBackend {
  /** False when this build or runtime cannot apply requests (then the NetlinkExecutor uses `ip`). */
  readonly isUsable: boolean;
  /**
   * Applies the batches in order, up to and including the first that fails.
   * @returns one result per batch that ran, or undefined when the backend died meanwhile (the
   *   caller retries: nothing is known of the batches in flight)
   */
  batches(list: readonly RtBatch[]): Promise<RtBatchResult[] | undefined>;
  /**
   * Reads the dumps, each in its netns. Optional: a backend without it leaves reads to `ip`.
   * @returns one result per call, in order, or undefined when the backend died meanwhile
   */
  dumps?(list: readonly RtDumpCall[]): Promise<RtDumpResult[] | undefined>;
}

/** Options of {@link rt.veth} (and of link.addVeth, the iproute2 form of the same request). */
export interface VethRequest {
  /** Name of the end created in the executor's netns (≤ 15 bytes). */
  name: string;
  /** Name of the peer end. */
  peerName: string;
  /** netns file path the peer is created in; iproute2 opens paths containing `/` as files. */
  peerNetns?: string;
  /** MTU of both ends; undefined = kernel default (1500). */
  mtuBytes?: number;
  /** MAC of `name`; undefined = kernel-random. */
  mac?: string;
  /** MAC of the peer; undefined = kernel-random. */
  peerMac?: string;
}

/** Builders of {@link RtRequest}s. */
export const rt = {
  veth(o: VethRequest): RtRequest {
    const mtu = o.mtuBytes ? { mtu: o.mtuBytes } : {};
    return {
      kind: 'link-add-veth', name: o.name, ...mtu, ...(o.mac ? { mac: o.mac } : {}),
      peer: { name: o.peerName, ...mtu, ...(o.peerMac ? { mac: o.peerMac } : {}), ...(o.peerNetns ? { netnsPath: o.peerNetns } : {}) },
    };
  },
  linkSet(dev: string, o: { alias?: string; up?: boolean; mtu?: number; group?: number; name?: string }): RtRequest {
    return { kind: 'link-set', dev, ...o };
  },
  linkDel(dev: string): RtRequest {
    return { kind: 'link-del', dev };
  },
  linkDelGroup(group: number): RtRequest {
    return { kind: 'link-del', group };
  },
  /** A FoU peer link; see the `link-add-fou` request. */
  fouPeer(o: { name: string; mtu?: number; remote: string; local: string; ttl: number; encapSport: number; encapDport: number }): RtRequest {
    return { kind: 'link-add-fou', ...o };
  },
  /** A flow-based tunnel device; see the `link-add-external` request. */
  linkAddExternal(name: string, family: 4 | 6): RtRequest {
    return { kind: 'link-add-external', name, family };
  },
  /** A FoU receive port; see the `fou-port` request. */
  fouPortAdd(o: { family: 4 | 6; port: number; ipproto: number }): RtRequest {
    return { kind: 'fou-port', verb: 'add', ...o };
  },
  fouPortDel(o: { family: 4 | 6; port: number; ipproto: number }): RtRequest {
    return { kind: 'fou-port', verb: 'del', ...o };
  },
  addrAdd(o: { cidr: string; dev: string; scope?: RtScope; isNoDad?: boolean }): RtRequest {
    return { kind: 'addr', verb: 'add', ...o };
  },
  routeAdd(o: RouteRequest): RtRequest {
    return { kind: 'route', verb: 'add', ...o };
  },
  routeReplace(o: RouteRequest): RtRequest {
    return { kind: 'route', verb: 'replace', ...o };
  },
  routeDel(o: RouteRequest): RtRequest {
    return { kind: 'route', verb: 'del', ...o };
  },
  ruleAdd(o: RuleSelectors): RtRequest {
    return { kind: 'rule', verb: 'add', ...o };
  },
  ruleDel(o: RuleSelectors): RtRequest {
    return { kind: 'rule', verb: 'del', ...o };
  },
} as const;
