/**
 * The contract between coild's gRPC server shell (grpc-server.ts) and the CNI logic behind it.
 * The server decodes `pkg.cnirpc.CNIArgs` into {@link CniArgs}, calls one {@link CniHandler}
 * method, and maps a thrown error with `toCniError()` (cni-error.ts).
 *
 * @see ../shared/reference/coil-behaviour.md §5.1 (messages), §5.7 (ADD/DEL/CHECK semantics)
 * @see CNI spec SPEC.md "Result" (the 1.1.0 result shape)
 */

/** One CNI 1.1 GC attachment: the runtime still uses this (containerID, ifname). */
export interface CniAttachment {
  containerId: string;
  ifname: string;
}

/**
 * A decoded `CNIArgs`. Proto3 defaults are filled in: absent strings are `''`, absent lists
 * and maps empty.
 */
export interface CniArgs {
  /** CNI_CONTAINERID (empty for GC and STATUS). */
  containerId: string;
  /** CNI_NETNS: a path such as `/var/run/netns/cni-…` or `/proc/<pid>/ns/net`. */
  netns: string;
  /** CNI_IFNAME, usually `eth0`. */
  ifname: string;
  /**
   * Parsed CNI_ARGS: `K8S_POD_NAMESPACE`, `K8S_POD_NAME`, `K8S_POD_INFRA_CONTAINER_ID`, and
   * `IS_CHAINED: 'true'` when the netconf had a prevResult (Coil's rule, §5.7 ADD step 1).
   */
  args: Record<string, string>;
  /** CNI_PATH, colon-separated. */
  path: string;
  /** The netconf exactly as the runtime wrote it to the plugin's stdin (JSON bytes). */
  stdinData: Buffer;
  /** prevResult addresses without prefix length (`10.64.0.3`, `fd00::3`), as Coil sends them. */
  ips: string[];
  /** prevResult interfaces: name → true when the interface is inside the pod netns. */
  interfaces: Record<string, boolean>;
  /** GC only: the attachments to keep; everything else of this network may be released. */
  validAttachments: CniAttachment[];
}

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
 * @see coil-behaviour.md §5.7; CNI spec SPEC.md "CNI operations"
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
