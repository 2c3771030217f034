/**
 * PromQL as the tests read it: the expressions of the chart's dashboard and alerts, and the metric
 * names they select, through Prometheus's own PromQL grammar (@prometheus-io/lezer-promql, the
 * parser of the Prometheus UI).
 */
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { parser } from '@prometheus-io/lezer-promql';
import { parseAllDocuments } from 'yaml';
import { dashboardExpressions } from '../../hack/dashboard.js';
import { REPO_ROOT } from '../envtest/control-plane.js';
import { toolPath } from '../envtest/tools.js';

const run = promisify(execFile);

/** Series Prometheus itself makes (not exported by any program). */
export const PROMETHEUS_SERIES: ReadonlySet<string> = new Set(['up']);

/** One alerting rule as the chart renders it. */
export interface AlertRule {
  alert: string;
  expr: string;
  for?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

/**
 * The metric names an expression selects.
 * @throws Error naming the position of a syntax error
 */
export function metricNames(expr: string): string[] {
  const names = new Set<string>();
  let error: number | undefined;
  parser.parse(expr).iterate({
    enter(n) {
      if (n.type.isError) error ??= n.from;
      if (n.type.name === 'Identifier' && n.node.parent?.type.name === 'VectorSelector') names.add(expr.slice(n.from, n.to));
    },
  });
  if (error !== undefined) throw new Error(`PromQL syntax error at ${error}: ${expr}`);
  return [...names];
}

/** The chart's PrometheusRule `spec.groups`, rendered by helm with the rule enabled. */
export async function renderedRuleGroups(): Promise<Array<{ name: string; rules: AlertRule[] }>> {
  const helm = await toolPath('helm');
  const { stdout } = await run(helm, ['template', 'coil', join(REPO_ROOT, 'charts/coil'), '--namespace', 'kube-system', '--set', 'monitoring.prometheusRule.enabled=true'], { maxBuffer: 64 << 20 });
  const rule = parseAllDocuments(stdout).map((d) => d.toJS() as { kind?: string; spec?: { groups: Array<{ name: string; rules: AlertRule[] }> } }).find((d) => d?.kind === 'PrometheusRule');
  if (!rule?.spec) throw new Error('the chart rendered no PrometheusRule');
  return rule.spec.groups;
}

/** Every metric name the dashboard's panels and the alerts query. */
export async function queriedMetricNames(): Promise<string[]> {
  const exprs = [...dashboardExpressions(), ...(await renderedRuleGroups()).flatMap((g) => g.rules.map((r) => r.expr))];
  return [...new Set(exprs.flatMap(metricNames))].sort();
}
