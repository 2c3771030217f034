/**
 * What `kubectl coil` reads from a cluster, all through the API server: the IPAM objects, Nodes,
 * Pods, and coild's view of each node — coild's `GET /ipam` on its health port, reached through
 * the `pods/proxy` subresource of the coild Pod on that node, so an admin never logs in to a node
 * and the API server's authentication and RBAC apply (README, "Operate").
 *
 * coild's `/ipam` answers only a bearer token the API server accepts and allows `get` on `/ipam`,
 * and the pod proxy forwards no credential of the caller. So the tool asks the API server for a
 * short-lived token (10 min) of the ServiceAccount `coil-ipam-reader` in coil's namespace — allowed
 * to whoever holds the chart's ClusterRole `coil-ipam-view` (`create serviceaccounts/token` on that
 * name), recorded in the audit log — and sends it in the `X-Coil-Authorization` header, which the
 * proxy passes on. The admin's own credentials (a client certificate, an OIDC token) never leave
 * the API server, and the token coild sees can do nothing but read `/ipam`
 * (docs/observability.md#access).
 */
import type { V1Node, V1Pod } from '@kubernetes/client-node';
import type { AddressBlock } from '../api/v2/addressblock.js';
import type { AddressPool } from '../api/v2/addresspool.js';
import type { BlockRequest } from '../api/v2/blockrequest.js';
import { Kinds } from '../api/v2/kinds.js';
import type { NodeViewFacts } from '../ipam/ipam-check.js';
import { nodeViewFacts } from '../api/v2/ipam-facts.js';
import type { ApiTransport } from '../runtime/api-transport.js';
import type { Client } from '../runtime/client.js';
import { ApiError } from '../runtime/errors.js';
import { COIL_AUTHORIZATION_HEADER } from '../runtime/http-auth.js';

/** The labels of coild's Pods (charts/coil/templates/coild.yaml). */
export const COILD_SELECTOR = 'app.kubernetes.io/name=coil,app.kubernetes.io/component=coild';

/** The cluster's identity: the UID of its kube-system Namespace (calicoctl's clusterGUID). */
export interface ClusterId {
  readonly uid: string;
  /** The API server URL the tool talked to (informative; never compared). */
  readonly server: string;
}

/** A node whose coild view could not be read, and why. */
export interface UnreachableCoild {
  readonly node: string;
  readonly pod?: string;
  readonly reason: string;
}

/** One read of the cluster. */
export interface ClusterRead {
  readonly cluster: ClusterId;
  readonly pools: AddressPool[];
  readonly blocks: AddressBlock[];
  readonly nodes: V1Node[];
  readonly pods: V1Pod[];
  readonly requests: BlockRequest[];
  /** coild's views, when asked for; one per node whose coild answered. */
  readonly views?: NodeViewFacts[];
  readonly unreachable?: UnreachableCoild[];
}

/** @throws ApiError when kube-system cannot be read */
export async function clusterId(client: Client, server: string): Promise<ClusterId> {
  const ns = await client.get(Kinds.Namespace, { name: 'kube-system' });
  if (!ns?.metadata?.uid) throw new Error('cannot read Namespace kube-system, whose UID names the cluster');
  return { uid: ns.metadata.uid, server };
}

/** The path of coild's health endpoint `path` on `pod`, through the API server's pod proxy. */
export function coildProxyPath(namespace: string, pod: string, port: number, path: string): string {
  return `/api/v1/namespaces/${encodeURIComponent(namespace)}/pods/${encodeURIComponent(pod)}:${port}/proxy${path}`;
}

/** coild's running Pod on each node, by node name. */
export async function coildPods(client: Client, namespace: string): Promise<Map<string, V1Pod>> {
  const pods = await client.list(Kinds.Pod, { namespace, labelSelector: COILD_SELECTOR });
  const byNode = new Map<string, V1Pod>();
  for (const p of pods) {
    const node = p.spec?.nodeName;
    if (!node || p.metadata?.deletionTimestamp || p.status?.phase !== 'Running') continue;
    byNode.set(node, p);
  }
  return byNode;
}

/** The ServiceAccount whose tokens read coild's `/ipam` (charts/coil/templates/rbac.yaml). */
export const IPAM_READER_SERVICE_ACCOUNT = 'coil-ipam-reader';

/** Lifetime asked of a reader token: the least the API server grants (10 min). */
const READER_TOKEN_SECONDS = 600;

/**
 * A token of {@link IPAM_READER_SERVICE_ACCOUNT} (TokenRequest).
 * @throws Error naming the missing right when the API server refuses (403), ApiError otherwise
 */
export async function readerToken(transport: ApiTransport, namespace: string): Promise<string> {
  try {
    const r = await transport.request<{ status?: { token?: string } }>({
      method: 'POST',
      path: `/api/v1/namespaces/${encodeURIComponent(namespace)}/serviceaccounts/${IPAM_READER_SERVICE_ACCOUNT}/token`,
      body: { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenRequest', spec: { expirationSeconds: READER_TOKEN_SECONDS } },
    });
    if (!r?.status?.token) throw new Error(`the API server answered the token request of ServiceAccount ${namespace}/${IPAM_READER_SERVICE_ACCOUNT} without a token`);
    return r.status.token;
  } catch (e) {
    if (e instanceof ApiError && e.code === 403) throw new Error(`forbidden: cannot create a token of ServiceAccount ${namespace}/${IPAM_READER_SERVICE_ACCOUNT} (the chart's ClusterRole coil-ipam-view grants it)`);
    if (e instanceof ApiError && e.code === 404) throw new Error(`ServiceAccount ${namespace}/${IPAM_READER_SERVICE_ACCOUNT} does not exist (the chart makes it when ipam.enabled)`);
    throw e;
  }
}

/**
 * Reads coild's view on `pod`: over HTTPS with `token` (coild's default), else — a coild run with
 * `--secure-endpoints=false`, whose port speaks no TLS — over plain HTTP without it.
 * @throws Error saying why (401/403: the token refused; 404: IPAM off; 503: not recovered yet)
 */
export async function readCoildView(transport: ApiTransport, namespace: string, pod: string, port: number, token?: string): Promise<NodeViewFacts> {
  let body: unknown;
  try {
    body = await transport.request<unknown>({
      method: 'GET', path: coildProxyPath(namespace, `https:${pod}`, port, '/ipam'),
      ...(token !== undefined && { headers: { [COIL_AUTHORIZATION_HEADER]: `Bearer ${token}` } }),
    });
  } catch (e) {
    if (!(e instanceof ApiError && /tls|handshake|first record|EOF|connection reset/i.test(e.message))) throw e;
    body = await transport.request<unknown>({ method: 'GET', path: coildProxyPath(namespace, pod, port, '/ipam') });
  }
  const view = nodeViewFacts(body);
  if (!view) throw new Error(`coild Pod ${pod} answered GET /ipam with something other than its IPAM view`);
  return view;
}

/** Options of {@link readCluster}. */
export interface ReadOptions {
  readonly namespace: string;
  readonly coildPort: number;
  /** Also read coild's view: of every node (`true`), of these nodes, or of none (`false`). */
  readonly views: boolean | readonly string[];
  readonly server: string;
}

/**
 * Lists what the checks need. Lists are not one snapshot: an object may change between two of
 * them, which is why `ipam release` re-reads everything it acts on.
 * @throws ApiError when a list fails
 */
export async function readCluster(client: Client, transport: ApiTransport, o: ReadOptions): Promise<ClusterRead> {
  const [cluster, pools, blocks, nodes, pods, requests] = await Promise.all([
    clusterId(client, o.server),
    client.list(Kinds.AddressPool),
    client.list(Kinds.AddressBlock),
    client.list(Kinds.Node),
    client.list(Kinds.Pod),
    client.list(Kinds.BlockRequest),
  ]);
  const read = { cluster, pools, blocks, nodes, pods, requests };
  if (o.views === false) return read;
  const names = o.views === true ? nodes.map((n) => n.metadata?.name ?? '').filter((n) => n !== '') : o.views;
  return { ...read, ...(await readViews(transport, pods, names, o)) };
}

/** coild's views of `nodes`, found among `pods` (all Pods, as listed). */
export async function readViews(transport: ApiTransport, pods: readonly V1Pod[], nodes: readonly string[], o: Pick<ReadOptions, 'namespace' | 'coildPort'>): Promise<{ views: NodeViewFacts[]; unreachable: UnreachableCoild[] }> {
  const coild = new Map<string, V1Pod>();
  for (const p of pods) {
    if (p.metadata?.namespace !== o.namespace || !matchesCoild(p) || !p.spec?.nodeName || p.metadata.deletionTimestamp || p.status?.phase !== 'Running') continue;
    coild.set(p.spec.nodeName, p);
  }
  const views: NodeViewFacts[] = [];
  const unreachable: UnreachableCoild[] = [];
  // Without a token (no right to one, or no such ServiceAccount) a coild run with
  // --secure-endpoints=false is still read; a secure one then answers 401, reported with this reason.
  let token: string | undefined;
  let tokenProblem: string | undefined;
  try {
    if (coild.size > 0) token = await readerToken(transport, o.namespace);
  } catch (e) {
    tokenProblem = e instanceof ApiError ? `${e.code} ${e.message}` : (e as Error).message;
  }
  await eachLimited(nodes, 8, async (node) => {
    const pod = coild.get(node);
    if (!pod) return void unreachable.push({ node, reason: `no running coild Pod (labels ${COILD_SELECTOR}) in namespace ${o.namespace}` });
    try {
      views.push(await readCoildView(transport, o.namespace, pod.metadata!.name!, o.coildPort, token));
    } catch (e) {
      const reason = e instanceof ApiError ? `GET /ipam: ${e.code} ${e.message}` : (e as Error).message;
      unreachable.push({ node, pod: pod.metadata!.name!, reason: tokenProblem && e instanceof ApiError && e.code === 401 ? `${reason}; no token to send: ${tokenProblem}` : reason });
    }
  });
  views.sort((a, b) => a.node.localeCompare(b.node));
  unreachable.sort((a, b) => a.node.localeCompare(b.node));
  return { views, unreachable };
}

function matchesCoild(p: V1Pod): boolean {
  const l = p.metadata?.labels ?? {};
  return l['app.kubernetes.io/name'] === 'coil' && l['app.kubernetes.io/component'] === 'coild';
}

/** Runs `fn` over `items`, at most `limit` at once. */
export async function eachLimited<T>(items: readonly T[], limit: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) await fn(items[next++]!);
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
}
