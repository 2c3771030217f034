/**
 * No drift between the chart's dashboard/alerts and the programs: every metric a panel or an alert
 * queries is exported by a running coil program — coil-controller and coild of the netns lab
 * after real CNI ADDs and an Egress, and the real coil-egress in an egress pod netns — read from
 * their /metrics. (Series Prometheus makes itself, `up`, are the only exception.) Root only;
 * skipped with the reason otherwise.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import { Kinds } from '../../src/api/v2/kinds.js';
import { eventually, freePort } from '../envtest/control-plane.js';
import { PROMETHEUS_SERIES, queriedMetricNames } from '../support/promql.js';
import { prerequisite } from '../support/prerequisite.js';
import { NodeLab, labLogsOnFailure, coilEgressCommand, labSkipReason, type LabNode } from './node-lab.js';
import { wire } from './egress-peer.js';

/** Metric family names of a /metrics text (histogram series as `_bucket`, `_sum`, `_count`). */
function exported(text: string): Set<string> {
  const names = new Set<string>();
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]/.exec(line);
    if (m) names.add(m[1]!);
  }
  return names;
}

/**
 * coild's series that exist only while a client pod of the node names an Egress — which needs FoU,
 * or while the node routes an Egress's shared SNAT address to its NAT pod (snat-routes.test.ts),
 * absent from this machine's kernel, so ADD of such a pod fails here. Their names are checked
 * against coild's registry in src/node-agent/egress/egress-watcher.test.ts (steering), and the FoU
 * VM's egress-failover test runs them.
 */
const NEEDS_AN_EGRESS_CLIENT = new Set(['coil_coild_egress_nat_pods_healthy', 'coil_coild_egress_snat_routed']);

describe('dashboard and alerts query only what the programs export', { skip: prerequisite(labSkipReason()) }, () => {
  let lab: NodeLab;
  let node: LabNode;
  const controllerMetrics = { port: 0 };
  const printLogsIfFailed = labLogsOnFailure();

  before(async () => {
    controllerMetrics.port = await freePort();
    lab = await NodeLab.start({ controllerArgs: [`--metrics-addr=127.0.0.1:${controllerMetrics.port}`] });
    await lab.createPool('default', { subnets: [{ ipv4: '10.120.0.0/24' }], blockSizeBits: 2 });
    await lab.createNamespace('lab');
    await lab.createNamespace('internet');
    node = await lab.addNode('node-m', '10.250.4.1');
    await lab.startCoild(node, ['--low-water-mark=0']);
  });
  after(async () => {
    await printLogsIfFailed(lab);
    await lab?.stop();
  });

  it('every queried metric is exported by coil-controller, coild or coil-egress', async () => {
    for (let i = 0; i < 2; i++) {
      const pod = await lab.createPod(node, 'lab', `m${i}`);
      const r = await lab.runCoil(node, 'ADD', pod);
      assert.equal(r.code, 0, r.stdout);
      assert.equal((await lab.runCoil(node, 'DEL', pod)).code, 0);
    }
    await lab.admin.create(Kinds.Egress, { metadata: { namespace: 'internet', name: 'nat' }, spec: { destinations: ['0.0.0.0/0'], replicas: 2, sessionAffinity: 'ClientIP' } });
    await eventually(async () => (await lab.admin.get(Kinds.Deployment, { namespace: 'internet', name: 'nat' })) !== undefined);

    const egressMetrics = await egressAgentMetrics(lab);
    const scrape = async (port: number) => (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    const have = new Set([...exported(await scrape(controllerMetrics.port)), ...exported(await scrape(node.metricsPort)), ...exported(egressMetrics)]);
    const missing = (await queriedMetricNames()).filter((n) => !have.has(n) && !PROMETHEUS_SERIES.has(n) && !NEEDS_AN_EGRESS_CLIENT.has(n));
    assert.deepEqual(missing, [], 'queried by the dashboard or an alert, exported by no program');
  });
});

/** Runs the real coil-egress in an egress pod netns (this kernel may lack FoU: NAT and metrics still run) and returns its /metrics. */
async function egressAgentMetrics(lab: NodeLab): Promise<string> {
  const ns = await lab.netnsOf('egress-m');
  const x = await lab.netnsOf('egress-m-x');
  await wire(lab.ip, ns, 'eth0', x, 'eth0');
  await lab.ip.batch([['addr', 'add', '198.51.100.1/24', 'dev', 'eth0']], { netns: ns.path });
  const port = await freePort();
  // As the image runs it: on Bun, its bundle (node-lab.ts coilEgressCommand).
  const egress = coilEgressCommand();
  const child = spawn('ip', ['netns', 'exec', ns.name, ...egress.argv, '--kubeconfig', lab.cp.kubeconfigPath,
    `--metrics-addr=127.0.0.1:${port}`, '--health-addr=0', '--secure-endpoints=false', '--metrics-interval-seconds=1'], {
    env: { ...process.env, COIL_POD_NAMESPACE: 'internet', COIL_EGRESS_NAME: 'nat', COIL_POD_ADDRESSES: '198.51.100.1', HOSTNAME: 'nat-0', ...egress.env }, stdio: ['ignore', 'ignore', 'ignore'],
  });
  try {
    // The port lives in the netns: read it from there.
    const get = async (): Promise<string> => (await lab.ip.exec([process.execPath, '-e', `fetch('http://127.0.0.1:${port}/metrics').then((r) => r.text()).then((t) => process.stdout.write(t))`], { netns: ns.path })).stdout;
    return await eventually(async () => {
      const text = await get().catch(() => '');
      return /coil_egress_nftables_masqueraded_packets_total\{/.test(text) && /coil_egress_nf_conntrack_entries_count\{/.test(text) ? text : false;
    }, { timeoutMs: 30_000 });
  } finally {
    child.kill('SIGTERM');
    await new Promise((r) => child.on('exit', r));
  }
}
