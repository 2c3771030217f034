/**
 * The NAT pods of an Egress as the EndpointSlices of its Service list them. The EndpointSlice
 * controller copies the Service's labels onto its slices, so the Egress controller's labels
 * (`app.kubernetes.io/name=coil`, `app.kubernetes.io/component=egress`, Coil's and ours) select
 * exactly the slices of Egress Services, and `kubernetes.io/service-name` names the Egress.
 * Pure: no I/O.
 * @see docs/egress-failover.md#what-coild-watches
 */
import type { V1EndpointSlice } from '@kubernetes/client-node';
import { canonicalAddress } from '../../ipam/ip-address.js';
import { addressFamily } from '../../netlink/cidr.js';

/** Label selector of the EndpointSlices of Egress Services (coild's cache of the kind). */
export const EGRESS_SLICE_SELECTOR = 'app.kubernetes.io/name=coil,app.kubernetes.io/component=egress';
/** The label by which an EndpointSlice names its Service (Kubernetes' `discovery.k8s.io/v1`). */
export const LABEL_SERVICE_NAME = 'kubernetes.io/service-name';

/** One NAT pod address as the slices list it. */
export interface NatEndpoint {
  /** Plain, canonical address. */
  address: string;
  family: 4 | 6;
  /** `conditions.serving`, else `conditions.ready`, else true (absent means true). */
  serving: boolean;
  /** `conditions.terminating` (absent means false). */
  terminating: boolean;
  /** The Pod behind the endpoint, `<namespace>/<name>`, when the slice names it. */
  pod?: string;
  /** The Node the endpoint runs on (`endpoints[].nodeName`), when the slice names it. */
  nodeName?: string;
}

/**
 * The endpoints of the Service `name` among `slices` (all slices of its namespace may be passed).
 * An address listed twice (two slices during a slice split) counts once, serving if either says so.
 */
export function natEndpointsOf(name: string, slices: Iterable<Readonly<V1EndpointSlice>>): NatEndpoint[] {
  const out = new Map<string, NatEndpoint>();
  for (const s of slices) {
    if (s.metadata?.labels?.[LABEL_SERVICE_NAME] !== name) continue;
    if (s.addressType !== 'IPv4' && s.addressType !== 'IPv6') continue; // FQDN slices name no pod
    for (const e of s.endpoints ?? []) {
      const c = e.conditions ?? {};
      const serving = c.serving ?? c.ready ?? true;
      const terminating = c.terminating ?? false;
      for (const raw of e.addresses ?? []) {
        const family = addressFamily(raw);
        if (family === undefined) continue;
        const address = canonicalAddress(raw);
        const seen = out.get(address);
        const pod = e.targetRef?.kind === 'Pod' && e.targetRef.name ? `${e.targetRef.namespace ?? s.metadata?.namespace ?? ''}/${e.targetRef.name}` : undefined;
        out.set(address, {
          address, family, serving: serving || (seen?.serving ?? false), terminating: seen ? seen.terminating && terminating : terminating,
          ...(pod ? { pod } : seen?.pod ? { pod: seen.pod } : {}),
          ...(e.nodeName ? { nodeName: e.nodeName } : seen?.nodeName ? { nodeName: seen.nodeName } : {}),
        });
      }
    }
  }
  return [...out.values()].sort((a, b) => (a.address < b.address ? -1 : a.address > b.address ? 1 : 0));
}
