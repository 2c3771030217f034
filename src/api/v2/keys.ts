/**
 * Shared names of the Coil API: group/version, annotation, label, finalizer and index keys,
 * routing table numbers and ports. Values are Coil v2.15's so that manifests, dashboards and
 * BIRD configs written for Coil keep working.
 *
 * @see docs/compatibility.md#coil-v215-in-detail (Coil `v2/pkg/constants/constants.go`)
 */

/** API group of every Coil custom resource. */
export const GROUP = 'coil.cybozu.com';
/** The one served and stored version. */
export const VERSION = 'v2';
/** `apiVersion` field value of Coil objects. */
export const API_VERSION = `${GROUP}/${VERSION}`;

/** Namespace annotation selecting the AddressPool for the namespace's pods. */
export const ANN_POOL = 'coil.cybozu.com/pool';
/** Prefix of the client-pod annotation `egress.coil.cybozu.com/<egress-namespace>: <name>[,<name>]`. */
export const ANN_EGRESS_PREFIX = 'egress.coil.cybozu.com/';

/** Label on AddressBlocks: name of the owning AddressPool. */
export const LABEL_POOL = 'coil.cybozu.com/pool';
/** Label on AddressBlocks: name of the Node holding the block. */
export const LABEL_NODE = 'coil.cybozu.com/node';
/** Label on AddressBlocks: UID of the BlockRequest the block answers (idempotency, Coil #198). */
export const LABEL_REQUEST = 'coil.cybozu.com/request';
/** Label on AddressBlocks reserved by the v1 migration: coild treats them as full. */
export const LABEL_RESERVED = 'coil.cybozu.com/reserved';

/** Finalizer on AddressPools and AddressBlocks. */
export const FIN_COIL = 'coil.cybozu.com';

/** Name of the pool used when a namespace has no {@link ANN_POOL} annotation. */
export const DEFAULT_POOL = 'default';

/** Default `spec.blockSizeBits` of an AddressPool (a block holds 2^5 = 32 addresses). */
export const DEFAULT_BLOCK_SIZE_BITS = 5;
/**
 * Upper bound on `spec.blockSizeBits` (ours; Coil has none). 2^16 addresses per block already
 * exceeds any node's pod capacity; larger values only waste pool space.
 */
export const MAX_BLOCK_SIZE_BITS = 16;

/** Routing table holding the per-pod host routes (coild `--pod-table-id`). */
export const POD_TABLE_ID = 116;
/** Priority of the `lookup 116` policy rule (coild `--pod-rule-prio`). */
export const POD_RULE_PRIO = 2000;
/** Client-pod egress table for narrow (private-range) destinations. */
export const EGRESS_NARROW_TABLE_ID = 117;
/** Client-pod egress table for wide destinations; also the egress pod's return table. */
export const EGRESS_WIDE_TABLE_ID = 118;
/** The kernel's main routing table, where another CNI's pod routes are when coil's IPAM is off. */
export const MAIN_TABLE_ID = 254;
/** Table where coild exports this node's AddressBlocks for an external router (BIRD). */
export const EXPORT_TABLE_ID = 119;
/** Route protocol (author) id of coild's routes (coild `--protocol-id`). */
export const PROTOCOL_ID = 30;

/** FoU UDP port of egress tunnels (coild `--egress-port`, coil-egress `--fou-port`). */
export const FOU_PORT = 5555;

/**
 * Seconds of an Egress pod's termination grace period kept for coil-egress's shutdown after its
 * drain (at most 5 s, as Coil's graceful shutdown): the drain gets the rest (docs/egress-failover.md#draining).
 */
export const EGRESS_DRAIN_MARGIN_S = 5;
/** Kubernetes' default `terminationGracePeriodSeconds`. */
export const DEFAULT_TERMINATION_GRACE_S = 30;
/** Seconds an Egress pod may drain within a grace period of `graceS` seconds: the grace less the margin, at least 0. */
export function egressDrainSeconds(graceS: number): number {
  return Math.max(0, graceS - EGRESS_DRAIN_MARGIN_S);
}

/** Default gRPC UNIX socket of coild (coild `--socket`, netconf `socket`). */
export const DEFAULT_SOCKET_PATH = '/run/coild.sock';

/** Ports of each program: Prometheus metrics and health probes (and webhooks). */
export const PORTS = {
  controllerMetrics: 9386,
  controllerHealth: 9387,
  controllerWebhook: 9443,
  coildMetrics: 9384,
  coildHealth: 9385,
  egressMetrics: 8080,
  egressHealth: 8081,
} as const;

/** Lease name for controller leader election (in the controller's namespace). */
export const LEADER_ELECTION_ID = 'coil-leader';

/** Field index names used with the informer cache. */
export const INDEX_BLOCK_BY_NODE = 'addressblock.node';
export const INDEX_BLOCK_BY_POOL = 'addressblock.pool';
export const INDEX_BLOCK_BY_REQUEST = 'addressblock.request';

/**
 * Netfilter backends of `--backend` (coil-controller, coild, coil-egress), Coil's names: `iptables`
 * runs the iptables/ip6tables commands (whichever variant, legacy or nft, the image's alternatives
 * select), `nftables` loads nft rulesets.
 */
export const NETFILTER_BACKENDS = ['iptables', 'nftables'] as const;
/** One of {@link NETFILTER_BACKENDS}. */
export type NetfilterBackend = (typeof NETFILTER_BACKENDS)[number];
/** Coil's default `--backend`. */
export const DEFAULT_NETFILTER_BACKEND: NetfilterBackend = 'iptables';
/** Priority of the originating-only rules `fwmark <ifindex> lookup 1000+<ifindex>` (Coil's). */
export const ORIGINATING_ONLY_RULE_PRIO = 1000;
/** Base of the originating-only tables: a pod link's routes are copied to table `1000 + ifindex`. */
export const ORIGINATING_ONLY_TABLE_BASE = 1000;
/** Pod field index of the controller: the Pod's addresses (`status.podIPs`), canonical text. */
export const INDEX_POD_BY_IP = 'pod.ip';

/**
 * Annotation on a BlockRequest (ours; Coil's controller ignores it and allocates any block): the
 * block index of the pool the node claims back, because live Pods of that node hold addresses of
 * it while no AddressBlock does (docs/ipam-recovery.md#claim-back).
 */
export const ANN_CLAIM_INDEX = 'coil.cybozu.com/claim-index';
