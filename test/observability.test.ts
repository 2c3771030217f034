/**
 * The chart's dashboard and alerts, checked without a cluster:
 * - every panel and alert expression parses as PromQL (Prometheus's grammar);
 * - the rendered PrometheusRule passes `promtool check rules`, and `promtool test rules` shows each
 *   alert firing on the series that should fire it (and not on healthy ones);
 * - the dashboard ConfigMap carries the sidecar label and the generated JSON.
 * That every queried metric is exported by a running program is test/netns/metrics-drift.test.ts.
 *
 * promtool comes from hack/setup.sh; without it this skips, except under CI=true, where it fails.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { promisify } from 'node:util';
import { parseAllDocuments, stringify } from 'yaml';
import { dashboardExpressions } from '../hack/dashboard.js';
import { REPO_ROOT } from './envtest/control-plane.js';
import { promtoolPath, toolPath } from './envtest/tools.js';
import { prerequisite } from './support/prerequisite.js';
import { metricNames, renderedRuleGroups } from './support/promql.js';

const run = promisify(execFile);

const promtool = await promtoolPath();
const skip = prerequisite(promtool ? undefined : 'promtool is missing: run hack/setup.sh (npm test does)');

/** An alert's unit test: input series (promtool's expanding notation, 1m apart) and what fires when. */
interface AlertCase {
  alert: string;
  series: Array<{ series: string; values: string }>;
  evalTime: string;
  /** The labels of each firing alert (besides alertname and severity, which are checked too). */
  firing: Array<Record<string, string>>;
}

const CASES: AlertCase[] = [
  { alert: 'CoilPoolNearExhaustion', evalTime: '20m', firing: [{ pool: 'default' }],
    series: [{ series: 'coil_controller_allocated_blocks{pool="default"}', values: '95x30' }, { series: 'coil_controller_max_blocks{pool="default"}', values: '100x30' },
      { series: 'coil_controller_allocated_blocks{pool="roomy"}', values: '10x30' }, { series: 'coil_controller_max_blocks{pool="roomy"}', values: '100x30' }] },
  { alert: 'CoilPoolExhausted', evalTime: '10m', firing: [{ pool: 'full' }],
    series: [{ series: 'coil_controller_allocated_blocks{pool="full"}', values: '8x20' }, { series: 'coil_controller_max_blocks{pool="full"}', values: '8x20' }] },
  { alert: 'CoilBlockRequestsFailing', evalTime: '10m', firing: [{ pool: 'full' }],
    series: [{ series: 'coil_coild_block_requests_total{pool="full",result="failed",instance="n1:9384"}', values: '0 0 1 1 2 2 2 2 2 2 2' },
      { series: 'coil_coild_block_requests_total{pool="ok",result="allocated",instance="n1:9384"}', values: '0+1x10' }] },
  { alert: 'CoilBlockRequestWaiting', evalTime: '10m', firing: [{ instance: 'n1:9384', pool: 'default' }],
    series: [{ series: 'coil_coild_block_request_oldest_pending_seconds{pool="default",instance="n1:9384"}', values: '0+60x10' },
      { series: 'coil_coild_block_request_oldest_pending_seconds{pool="default",instance="n2:9384"}', values: '0x10' }] },
  { alert: 'CoilOrphanBlocks', evalTime: '20m', firing: [{ kind: 'orphan-block' }],
    series: [{ series: 'coil_controller_ipam_findings{kind="orphan-block",instance="c1:9386"}', values: '2x20' }, { series: 'coil_controller_ipam_findings{kind="orphan-block",instance="c2:9386"}', values: '2x20' },
      { series: 'coil_controller_ipam_findings{kind="block-stuck-deleting",instance="c1:9386"}', values: '0x20' }] },
  { alert: 'CoilBlocksStuckDeleting', evalTime: '20m', firing: [{ kind: 'block-stuck-deleting' }],
    series: [{ series: 'coil_controller_ipam_findings{kind="block-stuck-deleting",instance="c1:9386"}', values: '1x20' }, { series: 'coil_controller_ipam_findings{kind="orphan-block",instance="c1:9386"}', values: '0x20' }] },
  { alert: 'CoilBlockRequestsStale', evalTime: '10m', firing: [{ kind: 'stale-blockrequest' }],
    series: [{ series: 'coil_controller_ipam_findings{kind="stale-blockrequest",instance="c1:9386"}', values: '0 0 1x10' }, { series: 'coil_controller_ipam_findings{kind="orphan-block",instance="c1:9386"}', values: '0x10' }] },
  { alert: 'CoilPodAddressConflict', evalTime: '10m', firing: [{ kind: 'duplicate-pod-ip' }, { kind: 'pod-ip-without-block' }],
    series: [{ series: 'coil_controller_ipam_findings{kind="duplicate-pod-ip",instance="c1:9386"}', values: '1x10' }, { series: 'coil_controller_ipam_findings{kind="pod-ip-without-block",instance="c1:9386"}', values: '0 0 0 3x10' },
      { series: 'coil_controller_ipam_findings{kind="stale-blockrequest",instance="c1:9386"}', values: '0x10' }] },
  { alert: 'CoildDown', evalTime: '10m', firing: [{ container: 'coild', instance: 'n1:9384' }],
    series: [{ series: 'up{container="coild",instance="n1:9384"}', values: '0x10' }, { series: 'up{container="coild",instance="n2:9384"}', values: '1x10' }] },
  { alert: 'CoildNotReady', evalTime: '15m', firing: [{ instance: 'n1:9384' }],
    series: [{ series: 'coil_coild_ready{instance="n1:9384"}', values: '0x15' }, { series: 'coil_coild_ready{instance="n2:9384"}', values: '1x15' }] },
  { alert: 'CoildRestarting', evalTime: '20m', firing: [{ container: 'coild', instance: 'n1:9384' }],
    series: [{ series: 'process_start_time_seconds{container="coild",instance="n1:9384"}', values: '100 100 200 200 300 300 400 400 400 400 400 400 400 400 400 400 400 400 400 400 400' },
      { series: 'process_start_time_seconds{container="coild",instance="n2:9384"}', values: '100x20' }] },
  { alert: 'CoilEgressPodsUnavailable', evalTime: '15m', firing: [{ namespace: 'internet', egress: 'nat' }],
    series: [{ series: 'coil_controller_egress_available_replicas{namespace="internet",egress="nat"}', values: '1x15' }, { series: 'coil_controller_egress_desired_replicas{namespace="internet",egress="nat"}', values: '2x15' },
      { series: 'coil_controller_egress_available_replicas{namespace="internet",egress="fine"}', values: '2x15' }, { series: 'coil_controller_egress_desired_replicas{namespace="internet",egress="fine"}', values: '2x15' }] },
  { alert: 'CoilEgressDown', evalTime: '10m', firing: [{ namespace: 'internet', egress: 'nat' }],
    series: [{ series: 'coil_controller_egress_available_replicas{namespace="internet",egress="nat"}', values: '0x10' }, { series: 'coil_controller_egress_desired_replicas{namespace="internet",egress="nat"}', values: '2x10' }] },
  { alert: 'CoilEgressNoHealthyNatPodSeen', evalTime: '5m', firing: [{ instance: 'n1:9384', namespace: 'internet', egress: 'nat' }],
    series: [{ series: 'coil_coild_egress_nat_pods_healthy{namespace="internet",egress="nat",instance="n1:9384"}', values: '3 0 0 0 0 0' },
      { series: 'coil_coild_egress_nat_pods_healthy{namespace="internet",egress="nat",instance="n2:9384"}', values: '3 3 3 3 3 3' },
      { series: 'coil_coild_egress_nat_pods_healthy{namespace="internet",egress="blip",instance="n1:9384"}', values: '2 0 2 2 2 2' }] },
  { alert: 'CoilEgressSharedAddressRoutedTwice', evalTime: '5m', firing: [{ namespace: 'internet', egress: 'nat', address: '203.0.113.10' }],
    series: [{ series: 'coil_coild_egress_snat_routed{namespace="internet",egress="nat",address="203.0.113.10",instance="n1:9384"}', values: '1x5' },
      { series: 'coil_coild_egress_snat_routed{namespace="internet",egress="nat",address="203.0.113.10",instance="n2:9384"}', values: '_ _ 1x3' },
      { series: 'coil_coild_egress_snat_routed{namespace="internet",egress="moved",address="203.0.113.20",instance="n1:9384"}', values: '1 1 stale' },
      { series: 'coil_coild_egress_snat_routed{namespace="internet",egress="moved",address="203.0.113.20",instance="n2:9384"}', values: '_ _ 1x3' }] },
  { alert: 'CoilEgressConntrackNearLimit', evalTime: '15m', firing: [{ namespace: 'internet', egress: 'nat', pod: 'nat-0' }],
    series: [{ series: 'coil_egress_nf_conntrack_entries_count{namespace="internet",egress="nat",pod="nat-0"}', values: '900x15' }, { series: 'coil_egress_nf_conntrack_entries_limit{namespace="internet",egress="nat",pod="nat-0"}', values: '1000x15' },
      { series: 'coil_egress_nf_conntrack_entries_count{namespace="internet",egress="nat",pod="nat-1"}', values: '100x15' }, { series: 'coil_egress_nf_conntrack_entries_limit{namespace="internet",egress="nat",pod="nat-1"}', values: '1000x15' }] },
];

describe('dashboard and alerts of the chart', () => {
  test('every dashboard and alert expression parses as PromQL and selects coil series', async () => {
    const exprs = [...dashboardExpressions(), ...(await renderedRuleGroups()).flatMap((g) => g.rules.map((r) => r.expr))];
    for (const e of exprs) assert.ok(metricNames(e).length > 0, e);
  });

  test('the dashboard ConfigMap carries the Grafana sidecar label and the generated JSON', async () => {
    const helm = await toolPath('helm');
    const { stdout } = await run(helm, ['template', 'coil', join(REPO_ROOT, 'charts/coil'), '--namespace', 'kube-system'], { maxBuffer: 64 << 20 });
    const cm = parseAllDocuments(stdout).map((d) => d.toJS() as { kind?: string; metadata?: { name?: string; labels?: Record<string, string> }; data?: Record<string, string> })
      .find((d) => d?.kind === 'ConfigMap' && d.metadata?.name === 'coil-grafana-dashboard');
    assert.equal(cm?.metadata?.labels?.grafana_dashboard, '1');
    assert.deepEqual(JSON.parse(cm!.data!['coil.json']!), JSON.parse(await readFile(join(REPO_ROOT, 'charts/coil/dashboards/coil.json'), 'utf8')));
  });

  test('the alert rules pass promtool check rules, and each alert fires on its case only', { skip }, async () => {
    const groups = await renderedRuleGroups();
    assert.deepEqual(groups.flatMap((g) => g.rules.map((r) => r.alert)).sort(), CASES.map((c) => c.alert).sort(), 'every alert has a case');
    const dir = await mkdtemp(join(tmpdir(), 'coil-rules-'));
    try {
      const rules = join(dir, 'rules.yaml');
      await writeFile(rules, stringify({ groups }));
      const checked = await run(promtool!, ['check', 'rules', rules]);
      assert.match(checked.stdout, /SUCCESS: \d+ rules found/);
      const severity = new Map(groups.flatMap((g) => g.rules.map((r) => [r.alert, r.labels?.severity ?? ''] as const)));
      const tests = CASES.map((c) => ({
        interval: '1m', input_series: c.series,
        alert_rule_test: [{ eval_time: c.evalTime, alertname: c.alert, exp_alerts: c.firing.map((labels) => ({ exp_labels: { severity: severity.get(c.alert), ...labels } })) }],
      }));
      // promtool compares annotations too; the unit tests are about when alerts fire, so they run
      // on the rules without them (check rules above has validated their templates).
      const bare = join(dir, 'bare.yaml');
      await writeFile(bare, stringify({ groups: groups.map((g) => ({ ...g, rules: g.rules.map(({ annotations: _, ...r }) => r) })) }));
      const spec = join(dir, 'tests.yaml');
      await writeFile(spec, stringify({ rule_files: [bare], evaluation_interval: '1m', tests }));
      const tested = await run(promtool!, ['test', 'rules', spec]).catch((e: { stdout?: string; stderr?: string }) => assert.fail(`${e.stdout ?? ''}${e.stderr ?? ''}`));
      assert.match(tested.stdout, /SUCCESS/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
