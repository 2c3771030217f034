/**
 * `kubectl coil ipam check`: runs the checks of src/ipam/ipam-check.ts on one read of the cluster
 * (coild's view of every node included) and prints the findings, or with `-o json` the report
 * `ipam release --from-report` takes. Exit status 3 when anything is found.
 */
import { checkIpam, type CheckThresholds, type Finding, type IpamFacts, type PodFacts } from '../ipam/ipam-check.js';
import { blockFacts, nodeRef, podFacts, poolFacts, requestFacts } from '../api/v2/ipam-facts.js';
import type { ClusterRead } from './cluster.js';
import type { Output } from './flags.js';
import { formatObject, kubectlTable, isStructured } from './output.js';
import { REPORT_KIND, type IpamReport } from './report.js';
import { KUBECTL_COIL_VERSION } from './version.js';

/** The facts of one read. */
export function factsOf(read: ClusterRead, nowMs: number): IpamFacts {
  return {
    nowMs,
    pools: read.pools.map(poolFacts),
    blocks: read.blocks.map(blockFacts),
    nodes: read.nodes.map(nodeRef),
    requests: read.requests.map(requestFacts),
    pods: read.pods.map(podFacts).filter((p): p is PodFacts => p !== undefined),
    ...(read.views && { nodeViews: read.views }),
  };
}

/** Checks `read` and builds the report. */
export function buildReport(read: ClusterRead, thresholds: CheckThresholds, nowMs: number): IpamReport {
  return {
    kind: REPORT_KIND,
    tool: `kubectl-coil ${KUBECTL_COIL_VERSION}`,
    version: KUBECTL_COIL_VERSION,
    cluster: read.cluster,
    time: new Date(nowMs).toISOString(),
    thresholds,
    nodesChecked: (read.views ?? []).map((v) => v.node),
    coildUnreachable: read.unreachable ?? [],
    findings: checkIpam(factsOf(read, nowMs), thresholds),
  };
}

const objectText = (f: Finding, wide: boolean): string =>
  f.objects.map((o) => `${o.kind}/${o.namespace ? `${o.namespace}/` : ''}${o.name}${wide ? `(uid=${o.uid},rv=${o.resourceVersion})` : ''}`).join(' ') || '-';

/** What `ipam check` prints. */
export function formatReport(report: IpamReport, output: Output): string {
  if (isStructured(output)) return formatObject(report, output);
  const wide = output === 'wide';
  let text = report.findings.length === 0
    ? `no findings (${report.nodesChecked.length} node(s) checked through coild)\n`
    : kubectlTable([
      ['KIND', 'NODE', ...(wide ? ['OBJECTS'] : []), 'MESSAGE'],
      ...report.findings.map((f) => [f.kind, f.node ?? '-', ...(wide ? [objectText(f, true)] : []), f.message]),
    ]);
  for (const u of report.coildUnreachable) text += `warning: coild of node ${u.node} not read (its leaks are unknown): ${u.reason}\n`;
  return text;
}
