/**
 * A Pod's addresses as the API server shows them — the truth about which running pod owns which
 * address (docs/ipam-recovery.md). Pure; read by the controller and by coild.
 */
import type { V1Pod } from '@kubernetes/client-node';
import { tryCanonicalAddress } from './ip-address.js';

/**
 * The Pod's addresses, canonical: `status.podIPs` (and `status.podIP`); none for a host-network
 * Pod (its addresses are the node's) or a finished one (Succeeded/Failed: nothing runs in it).
 */
export function podAddresses(p: Readonly<V1Pod>): string[] {
  if (p.spec?.hostNetwork || p.status?.phase === 'Succeeded' || p.status?.phase === 'Failed') return [];
  const ips = [...(p.status?.podIPs ?? []).map((i) => i.ip), p.status?.podIP].filter((ip): ip is string => !!ip);
  return [...new Set(ips.flatMap((ip) => tryCanonicalAddress(ip) ?? []))];
}
