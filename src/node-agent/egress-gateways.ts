/**
 * Pure helpers of the client side: which Egresses a pod names, and the gateways (one per Service
 * ClusterIP) an Egress and its Service make. No I/O.
 * @see coil-behaviour.md §7.1, §7.3 steps 1–2
 */
import type { V1Service } from '@kubernetes/client-node';
import { ANN_EGRESS_PREFIX, GROUP, VERSION } from '../api/v2/keys.js';
import type { Egress } from '../api/v2/egress.js';
import { defineKind } from '../runtime/kind.js';
import { addressFamily, parseCidr } from '../netlink/cidr.js';
import type { EgressGateway } from './egress-client.js';

/** Kind descriptors coild needs for egress: the Egress CR (cached) and core Services (read by key). */
export const EgressClientKinds = Object.freeze({
  Egress: defineKind<Egress>({ group: GROUP, version: VERSION, kind: 'Egress', plural: 'egresses', namespaced: true }),
  Service: defineKind<V1Service>({ group: '', version: 'v1', kind: 'Service', plural: 'services', namespaced: true }),
});

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
 * Egress destinations of that ClusterIP's family. Headless or IP-less Services give none.
 */
export function gatewaysOf(egress: Readonly<Egress>, service: Readonly<V1Service>): EgressGateway[] {
  const ref = `${egress.metadata?.namespace ?? ''}/${egress.metadata?.name ?? ''}`;
  const ips = service.spec?.clusterIPs ?? (service.spec?.clusterIP ? [service.spec.clusterIP] : []);
  const out: EgressGateway[] = [];
  for (const clusterIp of ips) {
    const family = addressFamily(clusterIp);
    if (family === undefined) continue; // "None" (headless)
    const destinations = (egress.spec?.destinations ?? []).filter((d) => {
      try {
        return parseCidr(d).family === family;
      } catch {
        return false; // the webhook refuses bad CIDRs; an old object may still hold one
      }
    });
    out.push({ egress: ref, clusterIp, destinations, isSourcePortAuto: egress.spec?.fouSourcePortAuto === true });
  }
  return out;
}
