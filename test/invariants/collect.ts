/**
 * Collects a {@link ClusterView} from a running lab (or any set of netns nodes sharing this
 * machine): AddressBlocks, Nodes and Pods from the apiserver, coil veths from each node's
 * namespace (through coild's own PodNetwork.list(), which skips retired veths), and coild's
 * allocations from its `GET /ipam` introspection endpoint.
 */
import { readFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import * as k8s from '@kubernetes/client-node';
import { RtnetlinkPodNetwork } from '../../src/node-agent/podnet/pod-network-rtnetlink.js';
import type { AllocationObservation, ClusterView } from './check.js';

/** Where to look. */
export interface CollectOptions {
  readonly kubeConfig: k8s.KubeConfig;
  /** Node name → its network namespace path. */
  readonly nodes: readonly { name: string; netnsPath: string }[];
  /** Pod (`namespace/name`) → the container id its CNI ADD carried: {@link standInCniCache} or {@link libcniCache}. */
  readonly containerIds: () => Promise<Map<string, string>>;
  /** Fetches coild's `GET /ipam` body on a node; undefined when coild does not answer. */
  readonly fetchIpam: (node: string) => Promise<string | undefined>;
}

type Block = { metadata: { name: string; labels?: Record<string, string> }; ipv4?: string; ipv6?: string };

/** The stand-in kubelet's CNI cache in `dir`: one file per pod, `{pod: {namespace, name, containerId}}`. */
export async function standInCniCache(dir: string): Promise<Map<string, string>> {
  const ids = new Map<string, string>();
  for (const file of await readdir(dir).catch(() => [] as string[])) {
    const cached = JSON.parse(await readFile(join(dir, file), 'utf8')) as { pod: { namespace: string; name: string; containerId: string } };
    ids.set(`${cached.pod.namespace}/${cached.pod.name}`, cached.pod.containerId);
  }
  return ids;
}

/**
 * libcni's result cache of real nodes (`<dir>/results/<network>-<containerID>-<ifname>`, what
 * containerd's CRI plugin keeps in /var/lib/cni): each holds the ADD's `containerId` and its
 * `cniArgs`, among them K8S_POD_NAMESPACE and K8S_POD_NAME.
 */
export async function libcniCache(dirs: readonly string[]): Promise<Map<string, string>> {
  const ids = new Map<string, string>();
  for (const dir of dirs) {
    const results = join(dir, 'results');
    for (const file of await readdir(results).catch(() => [] as string[])) {
      // A file being written (or removed by a DEL) as we read it is skipped, not fatal.
      let cached: { containerId?: string; cniArgs?: [string, string][] };
      try {
        cached = JSON.parse(await readFile(join(results, file), 'utf8')) as typeof cached;
      } catch {
        continue;
      }
      const args = new Map(cached.cniArgs ?? []);
      const ns = args.get('K8S_POD_NAMESPACE');
      const name = args.get('K8S_POD_NAME');
      if (cached.containerId && ns && name) ids.set(`${ns}/${name}`, cached.containerId);
    }
  }
  return ids;
}

/**
 * `read()`, again while the API server answers 429 or 503 — "storage is (re)initializing" for a
 * moment after it restarts, with Retry-After: 1 (the long soak's invariant check met it right
 * after an apiserver-restart fault, seed 452833933) — for up to `timeoutMs`. Anything else throws.
 */
async function whileApiServerWarms<T>(read: () => Promise<T>, timeoutMs = 60_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await read();
    } catch (err) {
      const code = err instanceof k8s.ApiException ? err.code : undefined;
      if ((code !== 429 && code !== 503) || Date.now() >= deadline) throw err;
      await new Promise((r) => setTimeout(r, 1_000));
    }
  }
}

/** Reads the whole view. */
export async function collectView(options: CollectOptions): Promise<ClusterView> {
  const core = options.kubeConfig.makeApiClient(k8s.CoreV1Api);
  const custom = options.kubeConfig.makeApiClient(k8s.CustomObjectsApi);
  const [nodeList, podList, blockList] = await Promise.all([
    whileApiServerWarms(() => core.listNode()),
    whileApiServerWarms(() => core.listPodForAllNamespaces()),
    whileApiServerWarms(() => custom.listClusterCustomObject({ group: 'coil.cybozu.com', version: 'v2', plural: 'addressblocks' }) as Promise<{ items: Block[] }>),
  ]);
  const containerIds = await options.containerIds();
  const nodes = await Promise.all(options.nodes.map(async (node) => {
    const veths = (await new RtnetlinkPodNetwork({ hostNetns: node.netnsPath }).list()).map((e) => ({
      hostIfname: e.hostIfname, containerId: e.containerId, ifname: e.ifname, pool: e.pool,
    }));
    const body = await options.fetchIpam(node.name);
    const allocations = body ? (JSON.parse(body) as { allocations: AllocationObservation[] }).allocations : undefined;
    return { name: node.name, veths, ...(allocations ? { allocations } : {}) };
  }));
  return {
    nodeNames: nodeList.items.map((n) => n.metadata!.name!),
    blocks: blockList.items.map((b) => ({
      name: b.metadata.name,
      node: b.metadata.labels?.['coil.cybozu.com/node'] ?? '',
      pool: b.metadata.labels?.['coil.cybozu.com/pool'] ?? '',
      ...(b.ipv4 ? { ipv4: b.ipv4 } : {}),
      ...(b.ipv6 ? { ipv6: b.ipv6 } : {}),
      reserved: b.metadata.labels?.['coil.cybozu.com/reserved'] === 'true',
    })),
    pods: podList.items
      .filter((p) => !p.spec?.hostNetwork && p.spec?.nodeName && (p.status?.podIPs?.length ?? 0) > 0)
      .map((p) => {
        const key = `${p.metadata!.namespace}/${p.metadata!.name}`;
        const containerId = containerIds.get(key);
        return {
          namespace: p.metadata!.namespace!, name: p.metadata!.name!, node: p.spec!.nodeName!,
          ips: p.status!.podIPs!.map((i) => i.ip),
          ...(containerId ? { containerId } : {}),
        };
      }),
    nodes,
  };
}
