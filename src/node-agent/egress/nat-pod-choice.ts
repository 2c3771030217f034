/**
 * Which NAT pod of an Egress a client pod's tunnel points at: rendezvous hashing (highest random
 * weight) of the client's address against each NAT pod's address, over the NAT pods that may take
 * new flows. Every client ranks every NAT pod on its own, so
 * - losing a NAT pod moves only the clients that had it first (each to its own second choice,
 *   spread evenly over the others);
 * - adding one would move only the clients that now rank it first (about 1/n of them); with the
 *   client's current NAT pod given ({@link chooseNatPod}), it moves none: established
 *   connections stay where they are, and the new pod takes new clients;
 * and two coild on two nodes agree without talking to each other. Pure: no I/O, no clock.
 * @see docs/egress-failover.md#choosing-a-nat-pod
 */
import { createHash } from 'node:crypto';

/** What this node knows of one NAT pod (one address of one endpoint of the Egress's Service). */
export interface NatPodView {
  /** The NAT pod's address (plain), the tunnel's remote when chosen. */
  address: string;
  /**
   * EndpointSlice `conditions.serving` (`ready` when a slice predates `serving`): the pod takes
   * traffic. False while a pod starts and after its process ended.
   */
  serving: boolean;
  /** EndpointSlice `conditions.terminating`: the pod is being deleted — it gets no new flows. */
  terminating: boolean;
  /** This node's probe through the tunnel: `unknown` until the first answer or the first failure. */
  health: 'up' | 'down' | 'unknown';
}

/**
 * The rendezvous weight of `natPod` for `client`: the first 8 bytes of SHA-256 over both
 * addresses, as an unsigned 64-bit integer. SHA-256 rather than a fast hash because the weights
 * must be uniform over addresses that differ in one byte, and a few hundred hashes per change
 * cost microseconds.
 */
export function rendezvousWeight(client: string, natPod: string): bigint {
  return createHash('sha256').update(`${client}\u0000${natPod}`).digest().readBigUInt64BE(0);
}

/**
 * The candidate `client` ranks first; ties (never seen in practice) go to the lower address.
 * @returns undefined when `candidates` is empty
 */
export function rendezvousChoice(client: string, candidates: Iterable<string>): string | undefined {
  let best: string | undefined;
  let bestWeight = -1n;
  for (const c of candidates) {
    const w = rendezvousWeight(client, c);
    if (w > bestWeight || (w === bestWeight && best !== undefined && c < best)) {
      best = c;
      bestWeight = w;
    }
  }
  return best;
}

/** Whether a NAT pod may take new flows: serving, not terminating, and not failing this node's probe. */
export function takesNewFlows(p: Readonly<NatPodView>): boolean {
  return p.serving && !p.terminating && p.health !== 'down';
}

/**
 * Whether a client whose tunnel points at `p` stays there, so its established connections are
 * never moved (a move resets them: the new NAT pod has neither their conntrack entries nor their
 * source address). It stays
 * - while `p` takes new flows (a NAT pod added later gets only new clients, as kube-proxy's
 *   ClientIP affinity keeps the tunnel's flow);
 * - while `p` is terminating but still serves and answers (the drain: its connections finish there);
 * - while `p` is not ready but not terminating and still answers the probe: its NAT process
 *   crashed and is being restarted, or hung and failed its readiness probe, while its data path
 *   — kernel state in the pod's netns: FoU port, NAT rules and conntrack, peer links — still
 *   works, as the answered probe proves. Kubernetes takes such an endpoint out of the Service
 *   (Coil's path then moves the tunnel and resets its connections); coil keeps it for its
 *   established clients and sends new ones elsewhere (docs/egress-failover.md#the-nat-process-killed-or-hung).
 * A NAT pod that stops answering (`down`) or leaves the slice loses its clients at once.
 */
export function keepsClient(p: Readonly<NatPodView>): boolean {
  if (p.health === 'down') return false;
  if (p.serving) return true;
  return !p.terminating && p.health === 'up';
}

/**
 * The NAT pod a client's tunnel points at, or undefined for the Service ClusterIP (Coil's path,
 * where kube-proxy chooses).
 *
 * `current` is the NAT pod the client's tunnel points at now, if any.
 *
 * Order: `current` while it may still carry the client (see {@link keepsClient}); then the pods
 * that take new flows (a pod not yet probed counts: the EndpointSlice already says it is ready,
 * and the probe answers within ~100 ms if not); when none does, terminating pods that still serve
 * and answer the probe (a whole Egress being rolled keeps working); when none of those either,
 * the ClusterIP — then kube-proxy's view of the endpoints decides, which is never worse than Coil's.
 */
export function chooseNatPod(client: string, pods: readonly Readonly<NatPodView>[], current?: string): string | undefined {
  const cur = current === undefined ? undefined : pods.find((p) => p.address === current);
  if (cur && keepsClient(cur)) return cur.address;
  const fresh = pods.filter(takesNewFlows);
  if (fresh.length > 0) return rendezvousChoice(client, fresh.map((p) => p.address));
  const draining = pods.filter((p) => p.serving && p.health === 'up');
  return rendezvousChoice(client, draining.map((p) => p.address));
}

/**
 * Whether a NAT pod the client is draining from still carries the flows pinned to it: it serves
 * (its NAT process runs: coil-egress keeps serving while it drains, until its established flows
 * ended or its `--drain-timeout`) and answers this node's probe. A NAT pod that stops serving,
 * leaves the slice or stops answering ends the drain: its link goes, and what was left of its
 * flows falls through to the tunnel's current NAT pod.
 */
export function drainsFlows(p: Readonly<NatPodView>): boolean {
  return p.serving && p.health !== 'down';
}

/** Where a client's tunnel points and which NAT pods it drains from (their links stay). */
export interface NatPodPlacement {
  /** The NAT pod new flows go to; undefined for the ClusterIP. */
  natPod: string | undefined;
  /** NAT pods the client's pinned flows still go to, none of them `natPod`. */
  draining: string[];
}

/**
 * {@link chooseNatPod} with the per-flow drain (docs/egress-failover.md#draining): when `current`
 * is terminating but still serves and answers, and another NAT pod takes new flows, the tunnel
 * moves there (rendezvous) at once and `current` joins `draining`, so only the flows pinned to
 * it stay. A NAT pod stays in `draining` while {@link drainsFlows}. Without another NAT pod to go
 * to, the client stays on the terminating one entirely, as {@link chooseNatPod} says.
 * @param draining the NAT pods the client drains from now
 */
export function placeClient(client: string, pods: readonly Readonly<NatPodView>[], current?: string, draining: readonly string[] = []): NatPodPlacement {
  const view = (a: string): Readonly<NatPodView> | undefined => pods.find((p) => p.address === a);
  const cur = current === undefined ? undefined : view(current);
  const fresh = pods.filter(takesNewFlows);
  const natPod = cur && cur.terminating && drainsFlows(cur) && fresh.length > 0
    ? rendezvousChoice(client, fresh.map((p) => p.address))
    : chooseNatPod(client, pods, current);
  const out = new Set<string>();
  for (const a of [...draining, ...(current !== undefined ? [current] : [])]) {
    const v = view(a);
    if (a !== natPod && v && drainsFlows(v)) out.add(a);
  }
  return { natPod, draining: [...out] };
}

/**
 * The one active NAT pod of an Egress with a shared SNAT address (`spec.snatAddresses`), of one
 * family: every client of the Egress goes there, and its node routes the address to it
 * (docs/egress-failover.md#sessions-kept-the-shared-snat-address). Two NAT pods active on one
 * address at once break connections (two clients with the same port become one 4-tuple at the
 * server, and the answers reach only one of the pods), so the choice is a function of the Egress
 * and the NAT pods' states alone — no client, no current placement — and every coild that sees
 * the same states picks the same pod: rendezvous of the Egress key over the pods that take new
 * flows, else over the terminating pods that still serve and answer (a whole Egress rolled).
 *
 * What it costs: a NAT pod added becomes the active one with probability 1/n, and then every
 * client moves to it (its flows are picked up there, as at a loss: kept, after a stall of the
 * client's next retransmission); a draining NAT pod keeps no flows (they move and are picked up).
 * @param egress `<namespace>/<name>`
 * @param pods the NAT pods of one family
 * @returns the active NAT pod's address, undefined when none serves (then the ClusterIP)
 */
export function activeNatPod(egress: string, pods: readonly Readonly<NatPodView>[]): string | undefined {
  const fresh = pods.filter(takesNewFlows);
  if (fresh.length > 0) return rendezvousChoice(egress, fresh.map((p) => p.address));
  return rendezvousChoice(egress, pods.filter((p) => p.serving && p.health === 'up').map((p) => p.address));
}

/**
 * After a coild restart, the NAT pod a client's tunnel pointed at, from the remotes of its peer
 * links (`inKernel`): the one that still takes new flows, else one that keeps its client
 * ({@link keepsClient}); the other remotes among `pods` are the NAT pods it was draining from.
 */
export function recoverPlacement(pods: readonly Readonly<NatPodView>[], inKernel: readonly string[]): { current: string | undefined; draining: string[] } {
  const known = inKernel.filter((r) => pods.some((p) => p.address === r));
  const ok = (f: (p: Readonly<NatPodView>) => boolean) => known.find((r) => f(pods.find((p) => p.address === r)!));
  const current = ok(takesNewFlows) ?? ok(keepsClient);
  return { current, draining: known.filter((r) => r !== current) };
}
