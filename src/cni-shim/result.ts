/**
 * Converts coild's CNI result (1.1.0 form) to the `cniVersion` the runtime asked for, as the Go
 * library's `types.PrintResult` does. 1.x results differ only in `cniVersion`; 0.3.x/0.4.0
 * (`types/040`) put `version: "4"|"6"` on every IP and know fewer interface and route fields.
 *
 * @see CNI spec SPEC.md "Result"; the 0.4.0 spec's "Result" section
 * @see docs/compatibility.md#the-cni-executable (results built as 1.1.0, then converted)
 */
import { utf8Text } from './bytes.js';
import { ErrorCode, PluginError } from './plugin-error.js';

/** An interface entry (1.1.0 superset). */
export interface ResultInterface {
  name: string;
  mac?: string;
  mtu?: number;
  sandbox?: string;
  socketPath?: string;
  pciID?: string;
}

/** An IP entry: `address` is a CIDR string; `version` exists only in 0.3.x/0.4.0 output. */
export interface ResultIp {
  version?: '4' | '6';
  address: string;
  gateway?: string;
  interface?: number;
}

/** A route: `dst` CIDR, `gw` address; the other fields are 1.1.0 additions. */
export interface ResultRoute {
  dst: string;
  gw?: string;
  mtu?: number;
  advmss?: number;
  priority?: number;
  table?: number;
  scope?: number;
}

/** A CNI result in any supported version. */
export interface CniResultJson {
  cniVersion: string;
  interfaces?: ResultInterface[];
  ips?: ResultIp[];
  routes?: ResultRoute[];
  dns?: { nameservers?: string[]; domain?: string; search?: string[]; options?: string[] };
}

/**
 * Decodes the JSON bytes of `AddResponse.result`.
 * @throws PluginError 6 (decoding failure) when they are not a JSON object with array `ips`/
 *   `interfaces`/`routes` (when present) — as Coil's shim reports an undecodable result.
 */
export function decodeResult(bytes: Uint8Array): CniResultJson {
  let value: unknown;
  try {
    value = JSON.parse(utf8Text(bytes));
  } catch (err) {
    throw new PluginError(ErrorCode.DECODING_FAILURE, 'failed to decode the result from coild', String(err), { cause: err });
  }
  return asResult(value);
}

/**
 * Checks that a parsed value has the shape of a result (used for prevResult too).
 * @throws PluginError 6 when it does not.
 */
export function asResult(value: unknown): CniResultJson {
  const bad = (why: string): PluginError => new PluginError(ErrorCode.DECODING_FAILURE, `invalid CNI result: ${why}`);
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw bad('not an object');
  const r = value as Record<string, unknown>;
  for (const key of ['interfaces', 'ips', 'routes'] as const) {
    if (r[key] !== undefined && !Array.isArray(r[key])) throw bad(`${key} is not an array`);
  }
  for (const ip of (r.ips as unknown[] | undefined) ?? []) {
    if (typeof (ip as { address?: unknown } | null)?.address !== 'string') throw bad('ips[].address is not a string');
  }
  return r as unknown as CniResultJson;
}

/**
 * The result as printed for `cniVersion`.
 * @param result a 0.3.x or later result (coild sends 1.1.0; prevResult is in `cniVersion` already).
 * @param cniVersion one of 0.3.1, 0.4.0, 1.0.0, 1.1.0 (0.3.0 is handled like 0.3.1).
 * @throws PluginError 1 for any other version.
 */
export function convertResult(result: CniResultJson, cniVersion: string): CniResultJson {
  if (cniVersion === '1.0.0' || cniVersion === '1.1.0') return toV1(result, cniVersion);
  if (cniVersion === '0.3.0' || cniVersion === '0.3.1' || cniVersion === '0.4.0') return toV04(result, cniVersion);
  throw new PluginError(ErrorCode.INCOMPATIBLE_CNI_VERSION, `cannot convert a result to version ${cniVersion}`);
}

/** 1.0.0 and 1.1.0 share one shape (`types/100`); `version` on IPs does not exist there. */
function toV1(r: CniResultJson, cniVersion: string): CniResultJson {
  const out: CniResultJson = { cniVersion };
  if (r.interfaces) out.interfaces = each(r.interfaces, (i) => ({ ...i }));
  if (r.ips) out.ips = each(r.ips, ({ version: _version, ...ip }) => ip);
  if (r.routes) out.routes = each(r.routes, (route) => ({ ...route }));
  if (r.dns) out.dns = { ...r.dns };
  return out;
}

/** `types/040`: IP version derived from the address family; only the fields 0.4.0 defines. */
function toV04(r: CniResultJson, cniVersion: string): CniResultJson {
  const out: CniResultJson = { cniVersion };
  if (r.interfaces) {
    out.interfaces = each(r.interfaces, (i) => ({
      name: i.name,
      ...(i.mac !== undefined ? { mac: i.mac } : {}),
      ...(i.sandbox !== undefined ? { sandbox: i.sandbox } : {}),
    }));
  }
  if (r.ips) {
    out.ips = each(r.ips, (ip) => ({
      version: ip.address.includes(':') ? '6' : '4',
      address: ip.address,
      ...(ip.gateway !== undefined ? { gateway: ip.gateway } : {}),
      ...(ip.interface !== undefined ? { interface: ip.interface } : {}),
    }));
  }
  if (r.routes) out.routes = each(r.routes, (route) => ({ dst: route.dst, ...(route.gw !== undefined ? { gw: route.gw } : {}) }));
  if (r.dns) out.dns = { ...r.dns };
  return out;
}

/** Array.prototype.map as a loop (its first call costs the executable ≈ 0.1 ms; see parse.ts). */
function each<T, U>(list: readonly T[], f: (x: T) => U): U[] {
  const out: U[] = [];
  for (let i = 0; i < list.length; i++) out.push(f(list[i] as T));
  return out;
}
