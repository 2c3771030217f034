/**
 * The contract between coild's gRPC server shell (grpc-server.ts) and the CNI logic behind it.
 * The server decodes `pkg.cnirpc.CNIArgs` into {@link CniArgs}, calls one {@link CniHandler}
 * method, and maps a thrown error with `toCniError()` (cni-error.ts).
 *
 * @see docs/compatibility.md#the-cni-grpc-api (messages), docs/compatibility.md#add-del-and-check
 * @see CNI spec SPEC.md "Result" (the 1.1.0 result shape)
 */

import type { CniArgs, CniAttachment } from '../../cnirpc/cni-args.js';

export type { CniArgs, CniAttachment };

/** A CNI 1.1.0 interface entry. */
export interface CniInterface {
  name: string;
  mac?: string;
  mtu?: number;
  /** netns path when the interface is inside the pod; absent for host-side interfaces. */
  sandbox?: string;
}

/** A CNI 1.1.0 IP entry: `address` is a CIDR string, `interface` an index into `interfaces`. */
export interface CniIpConfig {
  address: string;
  gateway?: string;
  interface?: number;
}

/** A CNI route: `dst` is a CIDR string, `gw` an address string. */
export interface CniRoute {
  dst: string;
  gw?: string;
  mtu?: number;
  priority?: number;
  table?: number;
  scope?: number;
}

/** CNI DNS settings. */
export interface CniDns {
  nameservers?: string[];
  domain?: string;
  search?: string[];
  options?: string[];
}

/**
 * The result of ADD, in CNI 1.1.0 form. The `coil` executable converts it to the netconf's
 * `cniVersion` (0.3.1 / 0.4.0 / 1.0.0 / 1.1.0) before printing it.
 */
export interface CniResult {
  cniVersion: string;
  interfaces?: CniInterface[];
  ips?: CniIpConfig[];
  routes?: CniRoute[];
  dns?: CniDns;
}

/**
 * What coild implements behind the gRPC server. Calls for different containers may run
 * concurrently; the implementation serialises per container ID where it needs to.
 *
 * Every method reports failure by throwing: a `CniError` (cni-error.ts) carries its CNI code;
 * anything else reaches the runtime as CNI 999 (INTERNAL).
 * @see docs/compatibility.md#add-del-and-check; CNI spec SPEC.md "CNI operations"
 */
export interface CniHandler {
  /** ADD: allocate and wire; must be idempotent per container ID + ifname. */
  add(args: CniArgs): Promise<CniResult>;
  /** DEL: release; succeeds when nothing is left (runtimes repeat DEL). */
  del(args: CniArgs): Promise<void>;
  /** CHECK: throw when the attachment is not as ADD left it. */
  check(args: CniArgs): Promise<void>;
  /** GC (CNI 1.1): release every attachment of this network not in `args.validAttachments`. */
  gc(args: CniArgs): Promise<void>;
  /** STATUS (CNI 1.1): throw a `CniError` with code 50 when ADD cannot succeed now. */
  status(args: CniArgs): Promise<void>;
}
