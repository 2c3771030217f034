/**
 * Pure helpers of the client side: which Egresses a pod names, and the gateways (one per Service
 * ClusterIP) an Egress and its Service make. No I/O.
 * @see docs/compatibility.md#egress-client-opt-in, docs/compatibility.md#client-pod-egress-setup
 *   (steps 1–2)
 */
import type { V1Service } from '@kubernetes/client-node';
import { ANN_EGRESS_PREFIX } from '../../api/v2/keys.js';
import type { Egress } from '../../api/v2/egress.js';
import { formatCidr, tryParseCidr } from '../../ipam/cidr.js';
import { canonicalAddress } from '../../ipam/ip-address.js';
import { addressFamily } from '../../netlink/cidr.js';
import type { EgressGateway } from './egress-client.js';


/** An Egress named by a pod annotation. */
export interface EgressRef {
  namespace: string;
  name: string;
}

/**
 * The Egresses a pod names: annotation `egress.coil.cybozu.com/<namespace>: <name>[,<name>…]`,
 * any number of keys; blanks are ignored; sorted and unique.
 */
export function egressRefsOf(annotations: Readonly<Record<string, string>> | undefined): EgressRef[] {
  const refs = new Map<string, EgressRef>();
  for (const [key, value] of Object.entries(annotations ?? {})) {
    if (!key.startsWith(ANN_EGRESS_PREFIX)) continue;
    const namespace = key.slice(ANN_EGRESS_PREFIX.length);
    if (namespace === '') continue;
    for (const name of value.split(',').map((v) => v.trim()).filter(Boolean)) refs.set(`${namespace}/${name}`, { namespace, name });
  }
  return [...refs.entries()].sort(([a], [b]) => (a < b ? -1 : 1)).map(([, r]) => r);
}

/**
 * One gateway per ClusterIP of the Egress's Service (the Service has the Egress's name), with the
 * Egress destinations of that ClusterIP's family and its shared SNAT address of that family, if
 * any. Headless or IP-less Services give none.
 * Destinations are read as Coil reads them (Go's `net.ParseCIDR`: `10.0.0.1/24` is
 * `10.0.0.0/24`, `10.0.0.0/0024` is `10.0.0.0/24`) and passed on in canonical form, the only
 * form iproute2 reads the same way; text Go would refuse is dropped.
 */
export function gatewaysOf(egress: Readonly<Egress>, service: Readonly<V1Service>): EgressGateway[] {
  const ref = `${egress.metadata?.namespace ?? ''}/${egress.metadata?.name ?? ''}`;
  const ips = service.spec?.clusterIPs ?? (service.spec?.clusterIP ? [service.spec.clusterIP] : []);
  const out: EgressGateway[] = [];
  for (const clusterIp of ips) {
    const family = addressFamily(clusterIp);
    if (family === undefined) continue; // "None" (headless)
    // The webhook refuses bad CIDRs; an object admitted by another webhook may still hold one.
    const destinations = (egress.spec?.destinations ?? []).flatMap((d) => {
      const cidr = tryParseCidr(d);
      return cidr?.family === family ? [formatCidr(cidr)] : [];
    });
    const snatAddress = (egress.spec?.snatAddresses ?? []).find((a) => addressFamily(a) === family);
    out.push({ egress: ref, clusterIp, destinations, isSourcePortAuto: egress.spec?.fouSourcePortAuto === true, ...(snatAddress !== undefined ? { snatAddress: canonicalAddress(snatAddress) } : {}) });
  }
  return out;
}
