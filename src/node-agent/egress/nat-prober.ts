/**
 * Probes NAT pods through the FoU path from the node (probe-packet.ts says what a probe is),
 * every `intervalMs` (100 ms) each, and keeps each pod's health: `down` after `failAfter` (2)
 * probes in a row went unanswered until the next was due, `up` again at the first answer. So a
 * NAT pod that stops forwarding is declared down 200–300 ms after its loss, against Kubernetes'
 * seconds (a crash) to 40–50 s (a lost node). An answer counts as long as it arrives before the
 * `failAfter`-th tick after its probe, so a round trip of up to ~`failAfter × intervalMs` (200 ms)
 * is never a failure; the round trips measured under load stay far below that
 * (docs/egress-failover.md#when-a-nat-pod-is-down).
 *
 * One UDP socket per family, bound to an ephemeral port on the wildcard address; the inner
 * packet's address is the one the kernel picks as source towards each NAT pod, so the reflected
 * answer comes back to this socket. Answers carry a random nonce of this prober, so stray
 * datagrams and another prober's answers are ignored.
 *
 * Concurrency: single-threaded (one timer, one message handler); {@link setTargets} may be called
 * at any time.
 * @see docs/egress-failover.md#the-probe
 */
import { randomBytes } from 'node:crypto';
import { createSocket, type Socket } from 'node:dgram';
import type Logger from 'bunyan';
import { canonicalAddress } from '../../ipam/ip-address.js';
import { addressFamily } from '../../netlink/cidr.js';
import type { Runnable } from '../../runtime/runnable.js';
import { innerProbePacket, parseProbePayload, probePayload } from './probe-packet.js';

/** A NAT pod's health as this node's probe sees it. */
export type ProbeHealth = 'up' | 'down' | 'unknown';

/** Constructor options of {@link NatProber}. */
export interface NatProberOptions {
  /** The NAT pods' FoU port (coild `--egress-port`). */
  port: number;
  /** Probe period per NAT pod, ms. Default 100. */
  intervalMs?: number;
  /** Unanswered probes in a row that make a NAT pod `down`. Default 2 (docs/egress-failover.md#when-a-nat-pod-is-down). */
  failAfter?: number;
  /** Called on every change of a NAT pod's health (not for the initial `unknown`). */
  onHealth?: (address: string, health: ProbeHealth, previous: ProbeHealth) => void;
  /** Called with each answered probe's round trip, ms. */
  onRtt?: (address: string, ms: number) => void;
  logger: Logger;
  /** Wildcard addresses to bind, per family (tests bind loopback). */
  bind?: Partial<Record<4 | 6, string>>;
}

interface Target {
  id: number;
  address: string;
  family: 4 | 6;
  /** The source address towards the NAT pod, once resolved. */
  local?: string;
  resolving: boolean;
  sent: number;
  sentAtMs: Map<number, number>;
  answered: number;
  misses: number;
  health: ProbeHealth;
}

/** Per-NAT-pod health by probes through the tunnel. */
export class NatProber implements Runnable {
  private readonly nonce = randomBytes(8);
  private readonly targets = new Map<string, Target>();
  private readonly byId = new Map<number, Target>();
  private readonly sockets = new Map<4 | 6, Promise<Socket>>();
  private nextId = 1;

  constructor(private readonly o: NatProberOptions) {}

  /** Probes exactly `addresses` from now on (plain; canonicalised); a dropped one forgets its health. */
  setTargets(addresses: Iterable<string>): void {
    const want = new Set<string>();
    for (const a of addresses) if (addressFamily(a) !== undefined) want.add(canonicalAddress(a));
    for (const [a, t] of this.targets) {
      if (!want.has(a)) {
        this.targets.delete(a);
        this.byId.delete(t.id);
      }
    }
    for (const a of want) {
      if (this.targets.has(a)) continue;
      const t: Target = { id: this.nextId++, address: a, family: addressFamily(a)!, resolving: false, sent: 0, sentAtMs: new Map(), answered: 0, misses: 0, health: 'unknown' };
      this.targets.set(a, t);
      this.byId.set(t.id, t);
    }
  }

  /** The health of a NAT pod; `unknown` for one not probed (yet). */
  health(address: string): ProbeHealth {
    const a = addressFamily(address) === undefined ? address : canonicalAddress(address);
    return this.targets.get(a)?.health ?? 'unknown';
  }

  /** Probes until `signal` aborts; closes its sockets then. */
  async run(signal: AbortSignal): Promise<void> {
    const interval = this.o.intervalMs ?? 100;
    const timer = setInterval(() => this.tick(), interval);
    try {
      this.tick();
      await new Promise<void>((resolve) => {
        if (signal.aborted) resolve();
        else signal.addEventListener('abort', () => resolve(), { once: true });
      });
    } finally {
      clearInterval(timer);
      for (const s of this.sockets.values()) (await s.catch(() => undefined))?.close();
      this.sockets.clear();
    }
  }

  /** One round: counts the previous probe of each target as missed when unanswered, sends the next. */
  private tick(): void {
    const failAfter = this.o.failAfter ?? 2;
    for (const t of this.targets.values()) {
      if (t.sent > t.answered) {
        t.misses++;
        if (t.misses >= failAfter) this.setHealth(t, 'down');
      }
      void this.send(t);
    }
  }

  private async send(t: Target): Promise<void> {
    try {
      const socket = await this.socket(t.family);
      if (t.local === undefined) {
        if (t.resolving) return;
        t.resolving = true;
        try {
          t.local = await sourceAddressTowards(t.address, this.o.port, t.family);
        } finally {
          t.resolving = false;
        }
      }
      if (this.targets.get(t.address) !== t) return;
      const seq = ++t.sent;
      t.sentAtMs.set(seq, performance.now());
      if (t.sentAtMs.size > 16) t.sentAtMs.delete(seq - 16);
      const inner = innerProbePacket(t.local, socket.address().port, probePayload({ nonce: this.nonce, target: t.id, seq }));
      await new Promise<void>((resolve, reject) => socket.send(inner, this.o.port, t.address, (err) => (err ? reject(err) : resolve())));
    } catch (err) {
      // An unreachable NAT pod is what the probe is for: the miss is counted at the next tick —
      // also when there is not even a route to it (then no probe was numbered yet).
      if (t.local === undefined) t.sent = t.answered + 1;
      this.o.logger.trace({ err, natPod: t.address }, 'NAT pod probe not sent');
    }
  }

  private socket(family: 4 | 6): Promise<Socket> {
    let s = this.sockets.get(family);
    if (!s) {
      s = new Promise<Socket>((resolve, reject) => {
        const sock = createSocket({ type: family === 4 ? 'udp4' : 'udp6', ...(family === 6 ? { ipv6Only: true } : {}) });
        sock.on('message', (msg) => this.onMessage(msg));
        sock.once('error', reject);
        sock.bind({ port: 0, address: this.o.bind?.[family] ?? (family === 4 ? '0.0.0.0' : '::') }, () => {
          sock.off('error', reject);
          sock.on('error', (err) => this.o.logger.warn({ err }, 'NAT pod probe socket error'));
          resolve(sock);
        });
      });
      s.catch(() => this.sockets.delete(family));
      this.sockets.set(family, s);
    }
    return s;
  }

  private onMessage(msg: Buffer): void {
    const id = parseProbePayload(msg, this.nonce);
    const t = id && this.byId.get(id.target);
    if (!id || !t || id.seq <= t.answered || id.seq > t.sent) return;
    t.answered = id.seq;
    t.misses = 0;
    const at = t.sentAtMs.get(id.seq);
    if (at !== undefined) this.o.onRtt?.(t.address, performance.now() - at);
    this.setHealth(t, 'up');
  }

  private setHealth(t: Target, health: ProbeHealth): void {
    if (t.health === health) return;
    const previous = t.health;
    t.health = health;
    this.o.logger.info({ natPod: t.address, health, previous }, 'NAT pod health changed');
    this.o.onHealth?.(t.address, health, previous);
  }
}

/**
 * The source address the kernel picks towards `address` (a connected UDP socket's local address;
 * connect sends nothing).
 * @throws Error when there is no route
 */
export async function sourceAddressTowards(address: string, port: number, family: 4 | 6): Promise<string> {
  const s = createSocket(family === 4 ? 'udp4' : 'udp6');
  try {
    await new Promise<void>((resolve, reject) => {
      s.once('error', reject);
      s.connect(port, address, () => resolve());
    });
    return s.address().address;
  } finally {
    s.close();
  }
}
