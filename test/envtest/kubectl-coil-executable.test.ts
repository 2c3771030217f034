/**
 * The self-contained linux/amd64 `kubectl-coil` (hack/kubectl-coil/build.ts) doing real work
 * against a real kube-apiserver, run as on an admin's machine with no JavaScript runtime: PATH holds
 * no `node`, `bun` or `deno` (test/support/runtime-free-path.ts) and the environment nothing else
 * but HOME and the kubeconfig. `version` reads coil-controller's and each coild's Pods (a node
 * without one is named); `ipam show` and `ipam check` read the IPAM objects (no coild answers
 * here: check names the nodes whose coild it could not read, as it does for an unreachable one).
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import { parse } from 'yaml';
import { coilCrds } from '../../src/api/v2/crd.js';
import { FIN_COIL, LABEL_NODE, LABEL_POOL } from '../../src/api/v2/keys.js';
import { Kinds } from '../../src/api/v2/kinds.js';
import type { IpamReport } from '../../src/kubectl-coil/report.js';
import { KUBECTL_COIL_VERSION } from '../../src/kubectl-coil/version.js';
import type { Client } from '../../src/runtime/client.js';
import { buildKubectlCoil } from '../../hack/kubectl-coil/build.js';
import { PLATFORMS } from '../../hack/kubectl-coil/runtimes.js';
import { runtimeFreePath } from '../support/runtime-free-path.js';
import { ControlPlane, REPO_ROOT } from './control-plane.js';
import { adminClient, createNode, createPool } from './controller-support.js';

const run = promisify(execFile);
const NS = 'kube-system';
const LABELS = { 'app.kubernetes.io/name': 'coil', 'app.kubernetes.io/instance': 'coil', 'app.kubernetes.io/version': '0.1.0' };

describe('the kubectl-coil executable against a real API server, with no JavaScript runtime on PATH', () => {
  let cp: ControlPlane;
  let client: Client;
  let dir = '';
  let tool = '';
  let path = '';

  const kubectlCoil = async (...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> => {
    try {
      const r = await run(tool, [...args, `--kubeconfig=${cp.kubeconfigPath}`], { env: { PATH: path, HOME: dir }, cwd: dir });
      return { code: 0, stdout: r.stdout, stderr: r.stderr };
    } catch (e) {
      const x = e as { code: number; stdout: string; stderr: string };
      return { code: x.code, stdout: x.stdout, stderr: x.stderr };
    }
  };
  const program = async (component: 'coild' | 'coil-controller', name: string, node: string, ready: boolean): Promise<void> => {
    await client.create(Kinds.Pod, {
      metadata: { name, namespace: NS, labels: { ...LABELS, 'app.kubernetes.io/component': component } },
      spec: { nodeName: node, hostNetwork: true, containers: [{ name: component, image: 'ghcr.io/coil-ts/coil:0.1.0' }], automountServiceAccountToken: false },
    });
    await client.patchStatus(Kinds.Pod, { namespace: NS, name }, { phase: 'Running', conditions: [{ type: 'Ready', status: ready ? 'True' : 'False' }] });
  };

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'kubectl-coil-executable-'));
    const [built] = await Promise.all([
      buildKubectlCoil(join(dir, 'out'), { platforms: PLATFORMS.filter((p) => p.os === 'linux' && p.arch === 'amd64') }),
      ControlPlane.start({ crds: coilCrds() }).then((c) => (cp = c)),
    ]);
    tool = built.platforms[0]!.executable;
    path = await runtimeFreePath(join(dir, 'path'));
    client = adminClient(cp);
    await cp.request('POST', `/api/v1/namespaces/${NS}/serviceaccounts`, { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'default' } });
    for (const n of ['n1', 'n2', 'n3']) await createNode(client, n);
    await createPool(client, 'default', { subnets: [{ ipv4: '10.100.0.0/24' }] });
    await client.create(Kinds.AddressBlock, { metadata: { name: 'default-0', labels: { [LABEL_POOL]: 'default', [LABEL_NODE]: 'n1' }, finalizers: [FIN_COIL] }, index: 0, ipv4: '10.100.0.0/27' });
    await program('coil-controller', 'coil-controller-a', 'n1', true);
    await program('coild', 'coild-n1', 'n1', true);
    await program('coild', 'coild-n2', 'n2', false);
  });
  after(async () => {
    await cp?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  test('version: its own version, coil-controller\'s and each node\'s coild (a coild not ready, a node without one)', async () => {
    const r = await kubectlCoil('version');
    assert.equal(r.code, 0, r.stderr);
    const lines = r.stdout.trimEnd().split('\n');
    assert.equal(lines[0], `kubectl-coil ${KUBECTL_COIL_VERSION}`);
    assert.match(lines[1]!, /^COMPONENT\s+NODE\s+POD\s+VERSION\s+IMAGE\s+READY$/);
    assert.match(lines[2]!, /^coil-controller\s+n1\s+coil-controller-a\s+0\.1\.0\s+ghcr\.io\/coil-ts\/coil:0\.1\.0\s+true$/);
    assert.match(lines[3]!, /^coild\s+n1\s+coild-n1\s+0\.1\.0\s+ghcr\.io\/coil-ts\/coil:0\.1\.0\s+true$/);
    assert.match(lines[4]!, /^coild\s+n2\s+coild-n2\s+0\.1\.0\s+ghcr\.io\/coil-ts\/coil:0\.1\.0\s+false$/);
    assert.match(lines[5]!, /^coild\s+n3\s+-\s+-\s+-\s+no coild Pod in namespace kube-system$/);
    assert.equal(lines.length, 6);
    const json = JSON.parse((await kubectlCoil('version', '-o', 'json')).stdout) as { client: { version: string }; server: { programs: { component: string; node: string; ready: string }[] } };
    assert.equal(json.client.version, KUBECTL_COIL_VERSION);
    assert.deepEqual(json.server.programs.map((p) => [p.component, p.node, p.ready]), [['coil-controller', 'n1', 'true'], ['coild', 'n1', 'true'], ['coild', 'n2', 'false'], ['coild', 'n3', 'no coild Pod in namespace kube-system']]);
  });

  test('ipam show and ipam check read the cluster', async () => {
    const show = await kubectlCoil('ipam', 'show');
    assert.equal(show.code, 0, show.stderr);
    assert.match(show.stdout, /\ndefault\s+256\s+1\s+8\s+12\.5\s+0\s+256\n/);
    const check = await kubectlCoil('ipam', 'check', '-o', 'json');
    assert.equal(check.code, 0, check.stdout + check.stderr);
    const report = JSON.parse(check.stdout) as IpamReport;
    assert.equal(report.version, KUBECTL_COIL_VERSION);
    assert.deepEqual(report.findings, []);
    assert.match(check.stderr, /warning: coild of node n1 not read/, 'no coild answers here: said, not hidden');
  });

  test("version needs only the chart's coil-ipam-view; without it, one line naming the refusal", async () => {
    const rbac = parse(await readFile(join(REPO_ROOT, 'charts/coil/files/rbac.yaml'), 'utf8')) as { kubectlCoil: { view: object[] } };
    await client.create(Kinds.ClusterRole, { metadata: { name: 'coil-ipam-view' }, rules: rbac.kubectlCoil.view as never });
    await client.create(Kinds.ClusterRoleBinding, { metadata: { name: 'viewer' }, roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'coil-ipam-view' }, subjects: [{ kind: 'User', name: 'viewer', apiGroup: 'rbac.authorization.k8s.io' }] });
    const as = async (user: string): Promise<string> => {
      const pair = await cp.ca.issue(user, `/CN=${user}`, 'client');
      const config = cp.kubeConfig.exportConfig();
      const file = join(dir, `${user}.kubeconfig`);
      const b64 = (x: string) => Buffer.from(x).toString('base64');
      await writeFile(file, config.replace(/"client-certificate-data":"[^"]*"/, `"client-certificate-data":"${b64(pair.certPem)}"`).replace(/"client-key-data":"[^"]*"/, `"client-key-data":"${b64(pair.keyPem)}"`), { mode: 0o600 });
      return file;
    };
    const viewer = await run(tool, ['version', `--kubeconfig=${await as('viewer')}`], { env: { PATH: path, HOME: dir } });
    assert.match(viewer.stdout, /\ncoild\s+n1\s+coild-n1\s/);
    const nobody = await run(tool, ['version', `--kubeconfig=${await as('nobody')}`], { env: { PATH: path, HOME: dir } }).then(() => assert.fail('nobody read the Pods'), (e: { code: number; stdout: string; stderr: string }) => e);
    assert.equal(nobody.code, 1);
    assert.equal(nobody.stdout, `kubectl-coil ${KUBECTL_COIL_VERSION}\n`, "the client's version still comes first");
    assert.match(nobody.stderr, /^kubectl coil: [^\n]*forbidden[^\n]*\n$/i);
  });
});
