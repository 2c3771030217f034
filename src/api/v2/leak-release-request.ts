/**
 * A request to free one leaked allocation, made through the API server: an annotation on the
 * AddressBlock that holds the address (docs/ipam-recovery.md#releasing-a-leak). `kubectl coil ipam
 * release` adds it — a `patch` of the AddressBlock, which RBAC governs (the chart's ClusterRole
 * `coil-ipam-admin`) and the API server's audit log records — and the coild of the block's node,
 * which watches its blocks anyway, acts on it and writes the outcome into the same annotation.
 *
 * Key `release.coil.cybozu.com/<h>`, `<h>` the 16 hex digits of the 64-bit FNV-1a hash of
 * `<containerId>/<ifname>` (a container ID alone is 64 characters, the most an annotation name may
 * have is 63; only admins write these, so a hash that no adversary is kept from colliding does); value JSON {@link LeakReleaseRequest}, with `outcome` once coild answered. coil's own
 * annotation (Coil v2.15 has none such and ignores it); the CRDs' fields are unchanged.
 */
/** Prefix of the request annotations' keys. */
export const ANN_RELEASE_PREFIX = 'release.coil.cybozu.com/';

/** coild's answer, written into the annotation. */
export interface LeakReleaseOutcome {
  readonly released: boolean;
  readonly reason: string;
  /** The node whose coild answered. */
  readonly node: string;
  /** RFC 3339. */
  readonly time: string;
}

/** The annotation's value: one attachment and the addresses the caller saw it hold. */
export interface LeakReleaseRequest {
  readonly containerId: string;
  readonly ifname: string;
  readonly ipv4?: string;
  readonly ipv6?: string;
  readonly outcome?: LeakReleaseOutcome;
}

/** The annotation key of the request for one attachment. */
export function leakReleaseKey(containerId: string, ifname: string): string {
  let h = 0xcbf29ce484222325n;
  for (const byte of new TextEncoder().encode(`${containerId}/${ifname}`)) h = ((h ^ BigInt(byte)) * 0x100000001b3n) & 0xffffffffffffffffn;
  return ANN_RELEASE_PREFIX + h.toString(16).padStart(16, '0');
}

const text = (v: unknown): v is string => typeof v === 'string' && v !== '' && v.length <= 256;

/**
 * Reads an annotation value.
 * @returns the request, or undefined when it is not one (not JSON, no container ID or interface,
 *   no address, a field not text of 1–256 characters)
 */
export function parseLeakReleaseRequest(value: string | undefined): LeakReleaseRequest | undefined {
  let b: unknown;
  try {
    b = JSON.parse(value ?? '');
  } catch {
    return undefined;
  }
  if (typeof b !== 'object' || b === null) return undefined;
  const r = b as Record<string, unknown>;
  if (!text(r.containerId) || !text(r.ifname)) return undefined;
  if ((r.ipv4 !== undefined && !text(r.ipv4)) || (r.ipv6 !== undefined && !text(r.ipv6))) return undefined;
  if (r.ipv4 === undefined && r.ipv6 === undefined) return undefined;
  const o = r.outcome as Record<string, unknown> | undefined;
  const outcome = typeof o === 'object' && o !== null && typeof o.released === 'boolean'
    ? { released: o.released, reason: String(o.reason ?? ''), node: String(o.node ?? ''), time: String(o.time ?? '') }
    : undefined;
  return {
    containerId: r.containerId, ifname: r.ifname,
    ...(r.ipv4 !== undefined && { ipv4: r.ipv4 as string }), ...(r.ipv6 !== undefined && { ipv6: r.ipv6 as string }),
    ...(outcome && { outcome }),
  };
}

/** The request annotations on an object: key → raw value. */
export function leakReleaseAnnotations(annotations: Readonly<Record<string, string>> | undefined): [string, string][] {
  return Object.entries(annotations ?? {}).filter(([k]) => k.startsWith(ANN_RELEASE_PREFIX));
}
