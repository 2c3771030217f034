/**
 * The tunnel half of an egress pod: FoU receive ports, the rule `iif <out> lookup 118` (prio
 * 2000) that sends de-NATed replies back into the tunnels, and per client address a peer link
 * plus a /32 or /128 route in table 118 (proto 30). The client set is synced declaratively, so a
 * client that went away loses its link and route (Coil only deletes on pod events and forgets
 * everything at restart).
 *
 * Concurrency: `sync` calls must not overlap (the client watcher runs one at a time).
 * @see docs/compatibility.md#the-nat-pod, Coil #227, #287
 */
import { EGRESS_WIDE_TABLE_ID, PROTOCOL_ID } from '../api/v2/keys.js';
import { addressFamily } from '../netlink/cidr.js';
import { ensureFouPeer, fouPeerLinkName, initFou, readFouPeers } from '../netlink/fou.js';
import type { IpRunner } from '../netlink/iproute2/ip-runner.js';
import { rt, type RtApplier, type RtReader } from '../netlink/rt-request.js';
import { syncPolicyRules, syncTableRoutes, type TableRoute } from '../netlink/fib-rules.js';

/** Priority of the `iif <out> lookup 118` rule (Coil's). */
export const EGRESS_RETURN_RULE_PRIORITY = 2000;

/** Constructor options of {@link FouServer}. */
export interface FouServerOptions {
  /** Runs the programs no netlink family replaces: `modprobe` and the sysctls of initFou. */
  ip: IpRunner;
  /**
   * Applies the typed requests and reads the dumps (FoU ports, peer links, routes of 118, the
   * return rule): coil-egress's NetlinkExecutor (its own rtnetlink and genetlink socket on Bun,
   * `ip` when that is not usable). Default: `ip`.
   */
  kernel?: RtApplier & RtReader;
  /** This pod's addresses (plain). */
  podAddresses: readonly string[];
  port: number;
  /** Per-flow source port on the links back to clients (`--enable-sport-auto`). */
  isSourcePortAuto: boolean;
  outInterface: string;
  /** netns path (tests); undefined = own netns. */
  netns?: string;
  /** See initFou; `null` skips modprobe. */
  modprobePath?: string | null;
}

/** Result of one {@link FouServer.sync}. */
export interface FouSyncResult {
  /** client address → peer link name, for every client served. */
  links: Map<string, string>;
  /** Client addresses skipped because this pod has no address of their family. */
  skipped: string[];
}

/** Egress-side FoU tunnels and return routing. */
export class FouServer {
  private readonly local = new Map<4 | 6, string>();

  constructor(private readonly o: FouServerOptions) {
    for (const a of o.podAddresses) {
      const f = addressFamily(a);
      if (f !== undefined && !this.local.has(f)) this.local.set(f, a);
    }
  }

  /** Where typed requests and dumps go: `kernel`, else the IpRunner (iproute2). */
  private get kernel(): RtApplier & RtReader {
    return this.o.kernel ?? this.o.ip;
  }

  /** Families this pod has addresses of. */
  families(): Array<4 | 6> {
    return [...this.local.keys()];
  }

  /**
   * FoU init plus the return rule per family; idempotent.
   * @throws NetlinkError (e.g. no FoU in the kernel)
   */
  async init(): Promise<void> {
    const netns = this.o.netns;
    await initFou({ kernel: this.kernel, ip: this.o.ip }, { ...(netns ? { netns } : {}), port: this.o.port, families: this.families(),
      ...(this.o.modprobePath !== undefined ? { modprobePath: this.o.modprobePath } : {}) });
    await this.initReturnRule();
  }

  /**
   * The `iif <out> lookup 118` rule (prio 2000) per family, alone: de-NATed replies arriving on the
   * outside interface go back through the client's tunnel, while already-encapsulated traffic
   * (which arrives on the same interface but is addressed to this pod) is delivered locally first.
   * @throws NetlinkError
   */
  async initReturnRule(): Promise<void> {
    const netns = this.o.netns;
    for (const family of this.families()) {
      await syncPolicyRules(this.kernel, { ...(netns ? { netns } : {}), family, minPriority: EGRESS_RETURN_RULE_PRIORITY,
        maxPriority: EGRESS_RETURN_RULE_PRIORITY, desired: [{ priority: EGRESS_RETURN_RULE_PRIORITY, iif: this.o.outInterface, table: EGRESS_WIDE_TABLE_ID }] });
    }
  }

  /**
   * Makes the tunnels equal `clients` (plain addresses; a set, so two pods sharing an address
   * count once and the link stays while any of them lives, Coil #227). New links come up in the
   * batch that adds their route (Coil #287); links of departed clients are deleted.
   * @throws NetlinkError
   */
  async sync(clients: ReadonlySet<string>): Promise<FouSyncResult> {
    const kernel = this.kernel;
    const target = this.o.netns ? { netns: this.o.netns } : {};
    const existing = await readFouPeers(kernel, target);
    const links = new Map<string, string>();
    const skipped: string[] = [];
    const routes: Record<4 | 6, TableRoute[]> = { 4: [], 6: [] };
    for (const client of clients) {
      const family = addressFamily(client);
      const local = family === undefined ? undefined : this.local.get(family);
      if (family === undefined || local === undefined) {
        skipped.push(client);
        continue;
      }
      const { name } = await ensureFouPeer(kernel, { remote: client, local, port: this.o.port, sourcePort: this.o.isSourcePortAuto ? 'auto' : this.o.port }, existing, target);
      links.set(client, name);
      routes[family].push({ dst: `${client}/${family === 4 ? 32 : 128}`, dev: name });
    }
    const wanted = new Set(links.values());
    const stale = existing.filter((l) => !wanted.has(l.name));
    if (stale.length > 0) await kernel.apply(stale.map((l) => rt.linkDel(l.name)), target);
    for (const family of [4, 6] as const) {
      if (!this.local.has(family)) continue;
      const up = routes[family].map((r) => rt.linkSet(r.dev, { up: true }));
      await syncTableRoutes(kernel, { ...target, family, table: EGRESS_WIDE_TABLE_ID, protocol: PROTOCOL_ID, desired: routes[family], beforeAdd: up });
    }
    return { links, skipped };
  }

  /** Name of the link that serves `client`. */
  static linkOf(client: string): string {
    return fouPeerLinkName(client);
  }
}
