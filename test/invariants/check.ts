/**
 * Invariants of coil's address management, checked over one observed state of a cluster.
 * Pure: the caller collects the view (collect.ts does it for the lab).
 *
 * 1. address-unique      no address is held by two pods, nor allocated twice by coild
 * 2. blocks-disjoint     no two AddressBlocks overlap
 * 3. pod-in-node-block   every pod address lies in a block of the pod's node
 * 4. block-node-exists   every block belongs to an existing Node
 * 5. veth-known          every coil veth on a node belongs to a known pod
 * 6. allocation-has-veth every coild allocation has its veth (no leaked address)
 * 7. block-has-user      (after GC only) every non-reserved block holds at least one allocation
 */
import { cidrContainsAddress, parseAddress, parseCidr } from '../../src/ipam/cidr.js';
import { checkNoOverlap } from '../../src/ipam/invariants.js';

export interface BlockObservation { name: string; node: string; pool: string; ipv4?: string; ipv6?: string; reserved: boolean }
export interface PodObservation { namespace: string; name: string; node: string; ips: string[]; containerId?: string }
export interface VethObservation { hostIfname: string; containerId: string; ifname: string; pool: string }
export interface AllocationObservation { containerId: string; ifname: string; block: string; ipv4?: string; ipv6?: string }
export interface NodeObservation {
  name: string;
  /** Host-side veths carrying a `COIL:` alias. */
  veths: VethObservation[];
  /** coild's allocations (GET /ipam); undefined when coild did not answer. */
  allocations?: AllocationObservation[];
}

/** One observed state. */
export interface ClusterView {
  nodeNames: string[];
  blocks: BlockObservation[];
  pods: PodObservation[];
  nodes: NodeObservation[];
}

export interface Violation {
  invariant: string;
  detail: string;
}

function inBlock(address: string, block: BlockObservation): boolean {
  const a = parseAddress(address);
  const cidr = a.family === 4 ? block.ipv4 : block.ipv6;
  return cidr !== undefined && cidrContainsAddress(parseCidr(cidr), a);
}

/**
 * Checks every invariant; `afterGc` adds block-has-user (valid only once GC and the release
 * grace period have run). @returns the violations, empty when all hold.
 */
export function checkInvariants(view: ClusterView, options: { afterGc?: boolean } = {}): Violation[] {
  const out: Violation[] = [];
  const v = (invariant: string, detail: string) => out.push({ invariant, detail });

  const owner = new Map<string, string>();
  for (const pod of view.pods) {
    for (const ip of pod.ips) {
      const who = `${pod.namespace}/${pod.name}`;
      const prev = owner.get(ip);
      if (prev) v('address-unique', `${ip} held by pods ${prev} and ${who}`);
      else owner.set(ip, who);
    }
  }
  const allocated = new Map<string, string>();
  for (const node of view.nodes) {
    for (const a of node.allocations ?? []) {
      for (const ip of [a.ipv4, a.ipv6].filter((x): x is string => !!x)) {
        const who = `${node.name}:${a.containerId.slice(0, 12)}:${a.ifname}`;
        const prev = allocated.get(ip);
        if (prev) v('address-unique', `${ip} allocated to ${prev} and ${who}`);
        else allocated.set(ip, who);
      }
    }
  }

  for (const o of checkNoOverlap(view.blocks.flatMap((b) => [b.ipv4, b.ipv6].filter((c): c is string => !!c).map((cidr) => ({ label: b.name, cidr }))))) {
    v('blocks-disjoint', JSON.stringify(o));
  }

  for (const pod of view.pods) {
    const blocks = view.blocks.filter((b) => b.node === pod.node);
    for (const ip of pod.ips) {
      if (!blocks.some((b) => inBlock(ip, b))) v('pod-in-node-block', `${pod.namespace}/${pod.name} ${ip} is in no block of ${pod.node}`);
    }
  }

  const nodes = new Set(view.nodeNames);
  for (const b of view.blocks) if (!nodes.has(b.node)) v('block-node-exists', `${b.name} belongs to missing node ${b.node}`);

  const knownContainers = new Set(view.pods.map((p) => p.containerId).filter(Boolean));
  for (const node of view.nodes) {
    for (const veth of node.veths) {
      if (!knownContainers.has(veth.containerId)) v('veth-known', `${node.name} ${veth.hostIfname} (container ${veth.containerId.slice(0, 12)}) belongs to no pod`);
    }
    const veths = new Set(node.veths.map((x) => `${x.containerId}:${x.ifname}`));
    for (const a of node.allocations ?? []) {
      if (!veths.has(`${a.containerId}:${a.ifname}`)) v('allocation-has-veth', `${node.name} ${a.ipv4 ?? a.ipv6} (container ${a.containerId.slice(0, 12)}) has no veth`);
    }
  }

  if (options.afterGc) {
    const used = view.nodes.flatMap((n) => (n.allocations ?? []).map((a) => a.block));
    for (const b of view.blocks) if (!b.reserved && !used.includes(b.name)) v('block-has-user', `${b.name} on ${b.node} holds no allocation`);
  }
  return out;
}
