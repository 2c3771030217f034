/**
 * The report `kubectl coil ipam check -o json` writes and `ipam release --from-report` reads, and
 * the rules release applies before it acts (calicoctl's `ipam release --from-report`, minus its
 * datastore lock: every action here is conditional on the objects themselves):
 * - every report must name this cluster (the UID of its kube-system Namespace), else nothing is done;
 * - only findings that every report names, with the same objects at the same UID and
 *   resourceVersion, are candidates (several reports taken apart in time confirm a leak that
 *   persists, and drop one that was only a moment's view).
 * Pure.
 */
import type { CheckThresholds, Finding } from '../ipam/ipam-check.js';
import type { ClusterId, UnreachableCoild } from './cluster.js';

/** `kind` of a report. */
export const REPORT_KIND = 'IpamCheckReport';

/** A report of `ipam check`. Times are RFC 3339; thresholds in ms and percent. */
export interface IpamReport {
  readonly kind: typeof REPORT_KIND;
  /** The tool that wrote it: `kubectl-coil <version>`. */
  readonly tool: string;
  readonly version: string;
  readonly cluster: ClusterId;
  readonly time: string;
  readonly thresholds: CheckThresholds;
  /** Nodes whose coild view was read; leaks are known only for them. */
  readonly nodesChecked: readonly string[];
  readonly coildUnreachable: readonly UnreachableCoild[];
  readonly findings: readonly Finding[];
}

/** A report that cannot be used. */
export class ReportError extends Error {
  override readonly name = 'ReportError';
}

/**
 * Reads a report from its JSON text.
 * @throws ReportError naming `file` when it is not JSON or not a report
 */
export function parseReport(file: string, text: string): IpamReport {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (e) {
    throw new ReportError(`${file}: not JSON (${(e as Error).message}); write reports with \`kubectl coil ipam check -o json > FILE\``, { cause: e });
  }
  const r = v as Partial<IpamReport>;
  if (typeof v !== 'object' || v === null || r.kind !== REPORT_KIND) throw new ReportError(`${file}: not a report of \`kubectl coil ipam check\` (kind is not ${REPORT_KIND})`);
  if (typeof r.cluster?.uid !== 'string' || r.cluster.uid === '') throw new ReportError(`${file}: the report names no cluster (cluster.uid)`);
  if (!Array.isArray(r.findings)) throw new ReportError(`${file}: the report has no findings list`);
  for (const f of r.findings) {
    if (typeof f?.key !== 'string' || typeof f.kind !== 'string' || !Array.isArray(f.objects)) throw new ReportError(`${file}: a finding lacks key, kind or objects`);
  }
  return r as IpamReport;
}

/**
 * @throws ReportError when a report names another cluster than `clusterUid` (even one: mixing
 *   reports of two clusters is a mistake nothing should be done on)
 */
export function checkSameCluster(reports: readonly { file: string; report: IpamReport }[], clusterUid: string): void {
  for (const { file, report } of reports) {
    if (report.cluster.uid !== clusterUid) {
      throw new ReportError(`${file}: the report is of another cluster (kube-system UID ${report.cluster.uid}, this cluster's is ${clusterUid}); nothing was done`);
    }
  }
}

/**
 * The identity of a finding for intersection: its key, its objects' UIDs and versions, its
 * allocation. A Node counts by UID only: the kubelet rewrites its status every few minutes, which
 * changes nothing a finding says about the node's addresses.
 */
function identity(f: Finding): string {
  return JSON.stringify([f.key, f.objects.map((o) => [o.kind, o.namespace ?? '', o.name, o.uid, o.kind === 'Node' ? '' : o.resourceVersion]), f.allocation ?? null]);
}

/** The findings every report names identically, in the first report's order. */
export function intersectFindings(reports: readonly IpamReport[]): Finding[] {
  if (reports.length === 0) return [];
  const [first, ...rest] = reports;
  const others = rest.map((r) => new Set(r.findings.map(identity)));
  return first!.findings.filter((f) => others.every((s) => s.has(identity(f))));
}
