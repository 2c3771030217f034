/**
 * `pkg.cnirpc.CNIArgs` (proto/cnirpc.proto, Coil's fields 1–8 plus our field 9), decoded: the
 * one shape both ends of the wire use — the `coil` executable encodes it, coild's handler
 * receives it. Types only.
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
   * `IS_CHAINED: 'true'` when the netconf had a prevResult (Coil's rule:
   * docs/compatibility.md#add-del-and-check, ADD step 1).
   */
  args: Record<string, string>;
  /** CNI_PATH, colon-separated. */
  path: string;
  /** The netconf exactly as the runtime wrote it to the plugin's stdin (JSON bytes). */
  stdinData: Uint8Array;
  /** prevResult addresses without prefix length (`10.64.0.3`, `fd00::3`), as Coil sends them. */
  ips: string[];
  /** prevResult interfaces: name → true when the interface is inside the pod netns. */
  interfaces: Record<string, boolean>;
  /** GC only: the attachments to keep; everything else of this network may be released. */
  validAttachments: CniAttachment[];
}
