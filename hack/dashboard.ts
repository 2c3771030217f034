/**
 * The Grafana dashboard of coil, written to charts/coil/dashboards/coil.json by hack/generate.ts
 * (and shipped by the chart as a ConfigMap for Grafana's dashboard sidecar, templates/dashboard.yaml).
 *
 * Coil's panels (its `v2/dashboard/coil.json`: blocks per pool, allocated/max, reconcile time, CNI
 * calls handled, process CPU and memory — Node's heap and event-loop lag where Coil shows Go's
 * heap and goroutines) plus ours: CNI ADD/DEL latency, BlockRequest wait and age, addresses per
 * node (allocated, free, cooling), egress replicas and clients, NAT and INVALID counters,
 * conntrack use. Every series a panel queries is exported by a coil program
 * (test/observability.test.ts checks it against the running programs' /metrics).
 *
 * Selectors use only coil's own metric names and labels, plus `container` (set by Prometheus
 * Operator's Pod/ServiceMonitors, e.g. the chart's) to tell the programs' process metrics apart.
 */

interface Target {
  expr: string;
  legendFormat: string;
}

interface PanelSpec {
  title: string;
  description: string;
  type?: 'timeseries' | 'bargauge';
  unit?: string;
  targets: Target[];
  /** Width in grid columns (24 per row); default 12. */
  w?: number;
}

const DATASOURCE = { type: 'prometheus', uid: '${datasource}' };
const PANEL_HEIGHT = 8;

const ROWS: ReadonlyArray<{ title: string; panels: PanelSpec[] }> = [
  {
    title: 'Address pools',
    panels: [
      {
        title: 'Allocated blocks (pool=$pool)', type: 'bargauge', w: 8,
        description: 'AddressBlocks carved from the pool, against the blocks it can hold (coil-controller).',
        targets: [
          { expr: 'max by (pool) (coil_controller_allocated_blocks{pool=~"$pool"})', legendFormat: '{{pool}} allocated' },
          { expr: 'max by (pool) (coil_controller_max_blocks{pool=~"$pool"})', legendFormat: '{{pool}} max' },
        ],
      },
      {
        title: 'Pool usage (allocated / max)', unit: 'percentunit', w: 16,
        description: 'Share of each pool\'s blocks in use; the CoilPoolNearExhaustion alert fires above its threshold.',
        targets: [{ expr: 'max by (pool) (coil_controller_allocated_blocks{pool=~"$pool"}) / max by (pool) (coil_controller_max_blocks{pool=~"$pool"})', legendFormat: '{{pool}}' }],
      },
    ],
  },
  {
    title: 'IPAM consistency',
    panels: [
      {
        title: 'IPAM findings (kubectl coil ipam check)', w: 24,
        description: 'What `kubectl coil ipam check` would report, per kind, counted by coil-controller from its cache: blocks of gone nodes, blocks stuck deleting, unanswered BlockRequests, full pools, and (when it caches Pods) duplicate Pod IPs and Pod IPs without a block of their node. Leaks are counted by coild. Should be 0.',
        targets: [{ expr: 'max by (kind) (coil_controller_ipam_findings)', legendFormat: '{{kind}}' }],
      },
    ],
  },
  {
    title: 'coil-controller',
    panels: [
      {
        title: 'Reconcile time (p95)', unit: 's',
        description: '95th percentile of reconcile duration per reconciler.',
        targets: [{ expr: 'histogram_quantile(0.95, sum by (le, controller) (rate(controller_runtime_reconcile_time_seconds_bucket{container="coil-controller"}[5m])))', legendFormat: '{{controller}}' }],
      },
      {
        title: 'Reconcile errors', unit: 'ops',
        description: 'Failed reconciles per second, per reconciler (each is retried with backoff).',
        targets: [{ expr: 'sum by (controller) (rate(controller_runtime_reconcile_errors_total{container="coil-controller"}[5m]))', legendFormat: '{{controller}}' }],
      },
    ],
  },
  {
    title: 'coild',
    panels: [
      {
        title: 'Successful CNI calls (per 5 min)',
        description: 'CNI calls coild answered OK, per node (gRPC service pkg.cnirpc.CNI).',
        targets: [{ expr: 'sum by (instance, grpc_method) (rate(grpc_server_handled_total{grpc_service="pkg.cnirpc.CNI", grpc_code="OK"}[5m])) * 300', legendFormat: '{{instance}} {{grpc_method}}' }],
      },
      {
        title: 'Failed CNI calls (per 5 min)',
        description: 'CNI calls coild answered with an error, per node and gRPC code.',
        targets: [{ expr: 'sum by (instance, grpc_method, grpc_code) (rate(grpc_server_handled_total{grpc_service="pkg.cnirpc.CNI", grpc_code!="OK"}[5m])) * 300', legendFormat: '{{instance}} {{grpc_method}} {{grpc_code}}' }],
      },
      {
        title: 'CNI ADD/DEL latency', unit: 's',
        description: 'Time coild spends on an ADD or DEL, locks and block waits included (p50 and p99).',
        targets: [
          { expr: 'histogram_quantile(0.5, sum by (le, command) (rate(coil_coild_cni_duration_seconds_bucket[5m])))', legendFormat: '{{command}} p50' },
          { expr: 'histogram_quantile(0.99, sum by (le, command) (rate(coil_coild_cni_duration_seconds_bucket[5m])))', legendFormat: '{{command}} p99' },
        ],
      },
      {
        title: 'BlockRequest wait', unit: 's',
        description: 'Time from a BlockRequest to its answer (p90), and the age of a request still unanswered.',
        targets: [
          { expr: 'histogram_quantile(0.9, sum by (le, pool) (rate(coil_coild_block_request_wait_seconds_bucket[10m])))', legendFormat: '{{pool}} p90' },
          { expr: 'max by (instance, pool) (coil_coild_block_request_oldest_pending_seconds)', legendFormat: '{{instance}} {{pool}} pending' },
        ],
      },
      {
        title: 'BlockRequests answered', unit: 'ops',
        description: 'Answers to this node\'s BlockRequests per second, by result (failed = pool out of blocks).',
        targets: [{ expr: 'sum by (pool, result) (rate(coil_coild_block_requests_total[10m]))', legendFormat: '{{pool}} {{result}}' }],
      },
      {
        title: 'Free addresses per node',
        description: 'Addresses an ADD could get at once, per node and pool.',
        targets: [{ expr: 'sum by (instance, pool) (coil_coild_free_addresses{pool=~"$pool"})', legendFormat: '{{instance}} {{pool}}' }],
      },
      {
        title: 'Allocated and cooling addresses per node',
        description: 'Addresses held by pods, and freed ones not yet reusable (cooling period).',
        targets: [
          { expr: 'sum by (instance, pool) (coil_coild_allocated_addresses{pool=~"$pool"})', legendFormat: '{{instance}} {{pool}} allocated' },
          { expr: 'sum by (instance, pool) (coil_coild_cooling_addresses{pool=~"$pool"})', legendFormat: '{{instance}} {{pool}} cooling' },
        ],
      },
      {
        title: 'Blocks per node',
        description: 'AddressBlocks each node holds, per pool.',
        targets: [{ expr: 'sum by (instance, pool) (coil_coild_blocks{pool=~"$pool"})', legendFormat: '{{instance}} {{pool}}' }],
      },
    ],
  },
  {
    title: 'Egress',
    panels: [
      {
        title: 'Egress NAT pods (available / desired)',
        description: 'Available NAT pods of each Egress against spec.replicas (coil-controller).',
        targets: [
          { expr: 'max by (namespace, egress) (coil_controller_egress_available_replicas)', legendFormat: '{{namespace}}/{{egress}} available' },
          { expr: 'max by (namespace, egress) (coil_controller_egress_desired_replicas)', legendFormat: '{{namespace}}/{{egress}} desired' },
        ],
      },
      {
        title: 'Egress clients',
        description: 'Client pods each NAT pod serves.',
        targets: [{ expr: 'sum by (namespace, egress) (coil_egress_client_pod_count)', legendFormat: '{{namespace}}/{{egress}}' }],
      },
      {
        title: 'Masqueraded connections', unit: 'cps',
        description: 'New connections masqueraded per second (the NAT rule sees the first packet of each), per Egress and family.',
        targets: [{ expr: 'sum by (namespace, egress, protocol) (rate(coil_egress_nftables_masqueraded_packets_total[5m]))', legendFormat: '{{namespace}}/{{egress}} {{protocol}}' }],
      },
      {
        title: 'INVALID packets dropped', unit: 'pps',
        description: 'Forwarded packets in conntrack state INVALID dropped per second, per Egress and family.',
        targets: [{ expr: 'sum by (namespace, egress, protocol) (rate(coil_egress_nftables_invalid_packets_total[5m]))', legendFormat: '{{namespace}}/{{egress}} {{protocol}}' }],
      },
      {
        title: 'Conntrack use', unit: 'percentunit', w: 24,
        description: 'Conntrack entries of each NAT pod against nf_conntrack_max; the CoilEgressConntrackNearLimit alert fires above its threshold.',
        targets: [{ expr: 'max by (namespace, egress, pod) (coil_egress_nf_conntrack_entries_count) / max by (namespace, egress, pod) (coil_egress_nf_conntrack_entries_limit)', legendFormat: '{{namespace}}/{{egress}} {{pod}}' }],
      },
    ],
  },
  {
    title: 'Processes (container=$container)',
    panels: [
      {
        title: 'CPU time', unit: 'percentunit', w: 8,
        description: 'CPU seconds used per second, per pod.',
        targets: [{ expr: 'sum by (pod) (rate(process_cpu_seconds_total{container=~"$container"}[1m]))', legendFormat: '{{pod}}' }],
      },
      {
        title: 'Resident memory and heap', unit: 'bytes', w: 8,
        description: 'Resident set size and V8 heap in use, per pod.',
        targets: [
          { expr: 'max by (pod) (process_resident_memory_bytes{container=~"$container"})', legendFormat: '{{pod}} rss' },
          { expr: 'max by (pod) (nodejs_heap_size_used_bytes{container=~"$container"})', legendFormat: '{{pod}} heap' },
        ],
      },
      {
        title: 'Event-loop lag (p99)', unit: 's', w: 8,
        description: 'How late the event loop runs (Node\'s measure of an overloaded process; Coil\'s dashboard shows goroutines here).',
        targets: [{ expr: 'max by (pod) (nodejs_eventloop_lag_p99_seconds{container=~"$container"})', legendFormat: '{{pod}}' }],
      },
    ],
  },
];

function panel(p: PanelSpec, id: number, x: number, y: number): object {
  return {
    id, type: p.type ?? 'timeseries', title: p.title, description: p.description, datasource: DATASOURCE,
    gridPos: { h: PANEL_HEIGHT, w: p.w ?? 12, x, y },
    fieldConfig: { defaults: { unit: p.unit ?? 'short' }, overrides: [] },
    options: p.type === 'bargauge' ? { displayMode: 'gradient', orientation: 'horizontal', reduceOptions: { calcs: ['lastNotNull'], fields: '', values: false } } : { legend: { displayMode: 'list', placement: 'bottom' }, tooltip: { mode: 'multi' } },
    targets: p.targets.map((t, i) => ({ refId: String.fromCharCode(65 + i), datasource: DATASOURCE, expr: t.expr, legendFormat: t.legendFormat })),
  };
}

/** The dashboard as Grafana's JSON model. */
export function coilDashboard(): object {
  const panels: object[] = [];
  let id = 1;
  let y = 0;
  for (const row of ROWS) {
    panels.push({ id: id++, type: 'row', title: row.title, collapsed: false, gridPos: { h: 1, w: 24, x: 0, y: y++ }, panels: [] });
    let x = 0;
    for (const p of row.panels) {
      const w = p.w ?? 12;
      if (x + w > 24) {
        x = 0;
        y += PANEL_HEIGHT;
      }
      panels.push(panel(p, id++, x, y));
      x += w;
    }
    y += PANEL_HEIGHT;
  }
  const variable = (name: string, label: string, query: string, includeAll: boolean) => ({
    name, label, type: 'query', datasource: DATASOURCE, query: { query, refId: name }, definition: query, refresh: 2,
    includeAll, multi: includeAll, ...(includeAll ? { allValue: '.*', current: { text: 'All', value: '$__all' } } : {}), sort: 1,
  });
  return {
    title: 'Coil', uid: 'coil', description: 'coil: IPAM, pod network and egress NAT (Coil v2 compatible). Generated by hack/dashboard.ts (npm run generate).', tags: ['coil', 'cni'],
    editable: true, graphTooltip: 1, schemaVersion: 39, time: { from: 'now-6h', to: 'now' }, refresh: '30s',
    templating: {
      list: [
        { name: 'datasource', label: 'Data source', type: 'datasource', query: 'prometheus', current: {}, hide: 0 },
        variable('pool', 'Pool', 'label_values(coil_controller_max_blocks, pool)', true),
        {
          name: 'container', label: 'Program', type: 'custom', query: 'coil-controller,coild,egress', includeAll: true, multi: true, allValue: 'coil-controller|coild|egress',
          current: { text: 'All', value: '$__all' }, options: [],
        },
      ],
    },
    annotations: { list: [] },
    panels,
  };
}

/** Every PromQL expression of the dashboard (for the drift tests). */
export function dashboardExpressions(): string[] {
  return ROWS.flatMap((r) => r.panels.flatMap((p) => p.targets.map((t) => t.expr)));
}
