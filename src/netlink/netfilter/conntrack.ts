/**
 * The conntrack table of a network namespace, read with conntrack-tools' `conntrack -L -o extended`
 * (the image ships it: hack/build-image.sh). A line is
 *   `ipv4 2 tcp 6 431999 ESTABLISHED src=… dst=… sport=… dport=… src=… dst=… sport=… dport=… [ASSURED] mark=0 use=1`
 * (the first `src=`…`dst=` group is the original direction, the second the reply; `[UNREPLIED]`
 * sits between them when no reply was seen; ICMP has `type= code= id=` instead of ports).
 *
 * Why the tool and not a typed ctnetlink dump: coil's own netlink socket (rtnetlink-socket.ts)
 * speaks NETLINK_ROUTE only and exists on Bun only, while this is read about once a second by a
 * NAT pod that is being deleted (egress-agent/drain.ts), where one process per read costs nothing
 * that matters.
 */
import type { IpRunner } from '../iproute2/ip-runner.js';

/** One direction of a conntrack entry. */
export interface ConntrackTuple {
  readonly src: string;
  readonly dst: string;
  /** TCP/UDP/SCTP ports; undefined for ICMP and others. */
  readonly sport?: number;
  readonly dport?: number;
}

/** One conntrack entry. */
export interface ConntrackEntry {
  readonly family: 4 | 6;
  /** Protocol name as conntrack prints it: `tcp`, `udp`, `icmp`, `icmpv6`, `sctp`, … */
  readonly protocol: string;
  /** Seconds left before the kernel drops the entry unless a packet refreshes it. */
  readonly timeoutS: number;
  /** Protocol state (`ESTABLISHED`, `TIME_WAIT`, … for TCP), undefined when none is printed. */
  readonly state?: string;
  readonly original: ConntrackTuple;
  readonly reply: ConntrackTuple;
  /** `[UNREPLIED]`: no packet seen in the reply direction. */
  readonly isUnreplied: boolean;
  /** `[ASSURED]`: the kernel considers the flow established (UDP: it takes the longer stream timeout). */
  readonly isAssured: boolean;
}

/**
 * Parses `conntrack -L -o extended` output; lines of another shape are skipped. Pure.
 * @returns the entries, in the order given
 */
export function parseConntrack(text: string): ConntrackEntry[] {
  const out: ConntrackEntry[] = [];
  for (const line of text.split('\n')) {
    const t = line.trim().split(/\s+/);
    if (t.length < 6 || (t[0] !== 'ipv4' && t[0] !== 'ipv6')) continue;
    const timeoutS = Number(t[4]);
    if (!Number.isFinite(timeoutS)) continue;
    const tuples: Array<Record<string, string>> = [];
    let state: string | undefined;
    let isUnreplied = false;
    let isAssured = false;
    for (const token of t.slice(5)) {
      if (token === '[UNREPLIED]') isUnreplied = true;
      else if (token === '[ASSURED]') isAssured = true;
      else if (/^[A-Z_]+$/.test(token) && tuples.length === 0) state = token;
      else {
        const eq = token.indexOf('=');
        if (eq < 0) continue;
        const key = token.slice(0, eq);
        if (key === 'src') tuples.push({});
        const cur = tuples[tuples.length - 1];
        if (cur !== undefined && tuples.length <= 2 && !(key in cur)) cur[key] = token.slice(eq + 1);
      }
    }
    const [o, r] = tuples;
    if (!o?.src || !o.dst || !r?.src || !r.dst) continue;
    out.push({ family: t[0] === 'ipv4' ? 4 : 6, protocol: t[2]!, timeoutS, ...(state !== undefined ? { state } : {}), original: tuple(o), reply: tuple(r), isUnreplied, isAssured });
  }
  return out;
}

function tuple(f: Record<string, string>): ConntrackTuple {
  return { src: f.src!, dst: f.dst!, ...(f.sport !== undefined ? { sport: Number(f.sport) } : {}), ...(f.dport !== undefined ? { dport: Number(f.dport) } : {}) };
}

/**
 * Lists the conntrack entries of one family in `target.netns` (undefined = this process's netns).
 * @throws NetlinkError (through the runner) when `conntrack` is missing or the kernel refuses
 */
export async function readConntrack(ip: IpRunner, family: 4 | 6, target: { netns?: string } = {}): Promise<ConntrackEntry[]> {
  const argv = ['conntrack', '-L', '-o', 'extended', '-f', family === 4 ? 'ipv4' : 'ipv6'];
  const { stdout } = await ip.exec(argv, target.netns !== undefined ? { netns: target.netns } : {});
  return parseConntrack(stdout);
}
