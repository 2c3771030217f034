/**
 * A leak on a real node, found and cleared by the real tool: the built `coil` executable wires two
 * pods through a real coild (netns node, real control plane and IPAM controller); one Pod object
 * is then deleted without a CNI DEL, its veth left on the node. `kubectl coil ipam check` reads
 * coild's `GET /ipam` through the apiserver's `pods/proxy` (a coild Pod object names coild's
 * address) and finds exactly that leak; `ipam release` from two reports makes coild tear that veth
 * down and free the address; the running pod keeps its network; a new check is clean.
 *
 * The apiserver proxies only to a global unicast address, so coild's health port is reached on
 * an address of the RFC 2544 benchmarking range added to `lo` for the test (removed after).
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { Kinds } from '../../src/api/v2/kinds.js';
import type { IpamReport } from '../../src/kubectl-coil/report.js';
import { REPO_ROOT } from '../envtest/control-plane.js';
import { prerequisite } from '../support/prerequisite.js';
import { NodeLab, labLogsOnFailure, labSkipReason, type LabNode, type LabPod } from './node-lab.js';

const run = promisify(execFile);
const TOOL = join(REPO_ROOT, 'dist/src/kubectl-coil/main.js');
const COILD_LABELS = { 'app.kubernetes.io/name': 'coil', 'app.kubernetes.io/instance': 'coil', 'app.kubernetes.io/component': 'coild' };

describe('kubectl coil against a real coild: a leaked address found and released', { skip: prerequisite(labSkipReason()) }, () => {
  let lab: NodeLab;
  let node: LabNode;
  let dir = '';
  const address = `198.18.${1 + Math.floor(Math.random() * 250)}.${1 + Math.floor(Math.random() * 250)}`;
  const printLogsIfFailed = labLogsOnFailure();

  const tool = async (...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> => {
    try {
      const r = await run(process.execPath, [TOOL, ...args, `--kubeconfig=${lab.cp.kubeconfigPath}`, ...(args[1] === 'release' ? [] : [`--coild-port=${node.healthPort}`])], { env: { ...process.env, KUBECONFIG: '' } });
      return { code: 0, stdout: r.stdout, stderr: r.stderr };
    } catch (e) {
      const x = e as { code: number; stdout: string; stderr: string };
      return { code: x.code, stdout: x.stdout, stderr: x.stderr };
    }
  };
  /** ADD through the real `coil`, then the Pod's status as the kubelet would write it. @returns its IPv4 address */
  const wire = async (pod: LabPod): Promise<string> => {
    const r = await lab.runCoil(node, 'ADD', pod);
    assert.equal(r.code, 0, r.stdout);
    const ip = (r.json!.ips as { address: string }[])[0]!.address.split('/')[0]!;
    await lab.admin.patchStatus(Kinds.Pod, { namespace: pod.namespace, name: pod.name }, { phase: 'Running', podIP: ip, podIPs: [{ ip }] });
    return ip;
  };

  before(async () => {
    await run('ip', ['addr', 'add', `${address}/32`, 'dev', 'lo']);
    dir = await mkdtemp(join(tmpdir(), 'kubectl-coil-leak-'));
    lab = await NodeLab.start();
    await lab.createPool('default', { subnets: [{ ipv4: '10.100.0.0/16' }], blockSizeBits: 5 });
    await lab.createNamespace('lab');
    node = await lab.addNode('node-a', '10.250.0.1');
    // All addresses of the test's netns (coild runs there): the apiserver's proxy reaches it on `address`.
    await lab.startCoild(node, [`--health-addr=:${node.healthPort}`]);
    await lab.cp.request('POST', '/api/v1/namespaces/kube-system/serviceaccounts', { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'default' } });
    await lab.admin.create(Kinds.Pod, { metadata: { name: 'coild-node-a', namespace: 'kube-system', labels: COILD_LABELS }, spec: { nodeName: 'node-a', hostNetwork: true, containers: [{ name: 'coild', image: 'coil' }], automountServiceAccountToken: false } });
    await lab.admin.patchStatus(Kinds.Pod, { namespace: 'kube-system', name: 'coild-node-a' }, { phase: 'Running', podIP: address, podIPs: [{ ip: address }] });
  });
  after(async () => {
    await printLogsIfFailed(lab);
    await lab?.stop();
    await run('ip', ['addr', 'del', `${address}/32`, 'dev', 'lo']).catch(() => undefined);
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('check finds the leak only, release clears it through coild, the running pod keeps its network', async () => {
    const web = await lab.createPod(node, 'lab', 'web');
    const gone = await lab.createPod(node, 'lab', 'gone');
    await wire(web);
    const leaked = await wire(gone);
    assert.equal((await tool('ipam', 'check')).code, 0, 'clean before the fault');

    // Deleted (no kubelet here: it stays Terminating, its sandbox may still run) is not a leak yet.
    await lab.admin.delete(Kinds.Pod, { namespace: 'lab', name: 'gone' });
    assert.equal((await tool('ipam', 'check')).code, 0, 'a Terminating pod still owns its address');
    // Force-deleted without a DEL reaching coild: its veth and address stay on the node.
    const res = await lab.cp.request('DELETE', '/api/v1/namespaces/lab/pods/gone?gracePeriodSeconds=0');
    assert.equal(res.status, 200, res.body);
    const reports: string[] = [];
    for (const name of ['r1', 'r2']) {
      const r = await tool('ipam', 'check', '-o', 'json');
      assert.equal(r.code, 3, r.stderr);
      const report = JSON.parse(r.stdout) as IpamReport;
      assert.deepEqual(report.nodesChecked, ['node-a']);
      assert.deepEqual(report.findings.map((f) => [f.kind, f.addresses]), [['leaked-address', [leaked]]]);
      assert.equal(report.findings[0]!.allocation?.containerId, gone.containerId);
      await writeFile(join(dir, name), r.stdout);
      reports.push('--from-report', join(dir, name));
    }
    assert.ok((await lab.hostPods(node)).some((p) => p.containerId === gone.containerId), 'the leaked veth is on the node');

    const released = await tool('ipam', 'release', ...reports);
    assert.equal(released.code, 0, released.stdout + released.stderr);
    assert.match(released.stdout, new RegExp(`done\\s+leaked-address\\s+coild on node-a released ${leaked.replaceAll('.', '\\.')}`));
    const host = await lab.hostPods(node);
    assert.ok(!host.some((p) => p.containerId === gone.containerId), 'the leaked veth was torn down');
    assert.ok(host.some((p) => p.containerId === web.containerId), "the running pod's veth stays");
    assert.ok(!(await lab.snapshot(node)).allocations.some((a) => a.containerId === gone.containerId));
    const after = await tool('ipam', 'check');
    assert.equal(after.code, 0, after.stdout);
  });
});
