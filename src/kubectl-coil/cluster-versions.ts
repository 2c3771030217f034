/**
 * `kubectl coil version`: the tool's own version and the cluster's — coil-controller's and each
 * node's coild — read from their Pods through the API server: each Pod's image (what runs) and
 * its `app.kubernetes.io/version` label (the chart's appVersion that deployed it), with its
 * readiness. The read is a list of Nodes and a list of Pods by label, rights the chart's
 * `coil-ipam-view` already grants (rbac.ts); coild itself is not asked, so a coild that does not
 * answer still shows its version, with READY false once its readiness probe has failed, and a node
 * without a coild Pod shows one row saying so (README, "Operate").
 */
import type { V1Node, V1Pod } from '@kubernetes/client-node';
import { Kinds } from '../api/v2/kinds.js';
import type { Client } from '../runtime/client.js';
import { COILD_SELECTOR } from './cluster.js';
import { formatObject, kubectlTable } from './output.js';
import { KUBECTL_COIL_VERSION } from './version.js';

/** The labels of coil-controller's Pods (charts/coil/templates/controller.yaml). */
export const CONTROLLER_SELECTOR = 'app.kubernetes.io/name=coil,app.kubernetes.io/component=coil-controller';

/** One program's Pod, or a node's lack of one. */
export interface ProgramVersion {
  readonly component: 'coil-controller' | 'coild';
  /** The Pod's node; '' for a controller Pod not yet scheduled. */
  readonly node: string;
  /** The Pod; absent for a node with no coild Pod. */
  readonly pod?: string;
  /** The Pod's `app.kubernetes.io/version` label, when it has one. */
  readonly version?: string;
  /** The image of the program's container. */
  readonly image?: string;
  /** `true`/`false` (the Pod's Ready condition), the Pod's phase when not Running, or why there is no Pod. */
  readonly ready: string;
}

/** What `version` prints as an object. */
export interface Versions {
  readonly client: { readonly version: string };
  readonly server?: { readonly programs: readonly ProgramVersion[] };
}

function programVersion(component: ProgramVersion['component'], pod: V1Pod): ProgramVersion {
  const container = pod.spec?.containers.find((c) => c.name === component) ?? pod.spec?.containers[0];
  const version = pod.metadata?.labels?.['app.kubernetes.io/version'];
  const phase = pod.status?.phase ?? 'Unknown';
  const ready = pod.metadata?.deletionTimestamp
    ? 'Terminating'
    : phase !== 'Running'
      ? phase
      : String(pod.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false);
  return { component, node: pod.spec?.nodeName ?? '', pod: pod.metadata?.name ?? '', ...(version && { version }), ...(container?.image && { image: container.image }), ready };
}

/**
 * The versions of coil's programs in `namespace`: every coil-controller Pod, and per Node its
 * coild Pods (or one row saying it has none), sorted by node.
 * @throws ApiError when a list fails (403 without the rights named above)
 */
export async function readVersions(client: Client, namespace: string): Promise<ProgramVersion[]> {
  const [controllers, coilds, nodes] = await Promise.all([
    client.list(Kinds.Pod, { namespace, labelSelector: CONTROLLER_SELECTOR }),
    client.list(Kinds.Pod, { namespace, labelSelector: COILD_SELECTOR }),
    client.list(Kinds.Node),
  ]);
  const byNode = (a: ProgramVersion, b: ProgramVersion) => a.node.localeCompare(b.node) || (a.pod ?? '').localeCompare(b.pod ?? '');
  const rows = controllers.map((p) => programVersion('coil-controller', p)).sort(byNode);
  const coildRows = coilds.map((p) => programVersion('coild', p));
  const withCoild = new Set(coildRows.map((r) => r.node));
  for (const n of nodes as V1Node[]) {
    const name = n.metadata?.name ?? '';
    if (name && !withCoild.has(name)) coildRows.push({ component: 'coild', node: name, ready: `no coild Pod in namespace ${namespace}` });
  }
  return [...rows, ...coildRows.sort(byNode)];
}

/** The client's line: `kubectl-coil 0.2.0`. */
export const clientLine = (): string => `kubectl-coil ${KUBECTL_COIL_VERSION}\n`;

/** The programs' table (kubectl's printer). */
export function formatPrograms(programs: readonly ProgramVersion[]): string {
  const rows = programs.map((p) => [p.component, p.node || '-', p.pod ?? '-', p.version ?? '-', p.image ?? '-', p.ready]);
  return kubectlTable([['COMPONENT', 'NODE', 'POD', 'VERSION', 'IMAGE', 'READY'], ...rows]);
}

/** `-o json|yaml`: the client's version and, unless `--client`, the programs'. */
export function formatVersions(programs: readonly ProgramVersion[] | undefined, output: 'json' | 'yaml'): string {
  const versions: Versions = { client: { version: KUBECTL_COIL_VERSION }, ...(programs && { server: { programs } }) };
  return formatObject(versions, output);
}
