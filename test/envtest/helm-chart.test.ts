/**
 * charts/coil with the real helm binary: lint, template, and install / upgrade / uninstall
 * against a real kube-apiserver (server-side validation of every object).
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { cp as copy, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import * as k8s from '@kubernetes/client-node';
import { parseAllDocuments } from 'yaml';
import { ControlPlane, REPO_ROOT, eventually } from './control-plane.js';
import { kubectl, toolPath } from './tools.js';

const run = promisify(execFile);
const CHART = join(REPO_ROOT, 'charts/coil');
const CRDS = ['addresspools', 'addressblocks', 'blockrequests', 'egresses'].map((p) => `${p}.coil.cybozu.com`);
const EGRESS_CRD_0_1_0 = join(REPO_ROOT, 'test/envtest/fixtures/coil-0.1.0-egresses-crd.yaml');

type Crd = {
  metadata: { labels?: Record<string, string>; annotations?: Record<string, string> };
  spec: { versions: { schema: { openAPIV3Schema: { properties: { spec: { properties: Record<string, unknown> } } } } }[] };
};
/** The CRD `name` as the API server has it. */
async function readCrd(kubeconfig: string, name: string): Promise<Crd> {
  return JSON.parse(await kubectl(kubeconfig, ['get', 'crd', name, '-o', 'json'])) as Crd;
}
/** The Egress CRD's `spec` properties as the API server serves them. */
async function egressSpecFields(kubeconfig: string): Promise<string[]> {
  return Object.keys((await readCrd(kubeconfig, 'egresses.coil.cybozu.com')).spec.versions[0]!.schema.openAPIV3Schema.properties.spec.properties).sort();
}

async function helm(args: readonly string[], kubeconfig?: string): Promise<string> {
  const bin = await toolPath('helm');
  const env = { ...process.env, HELM_CACHE_HOME: '/tmp/coil-helm/cache', HELM_CONFIG_HOME: '/tmp/coil-helm/config', HELM_DATA_HOME: '/tmp/coil-helm/data' };
  try {
    const { stdout } = await run(bin, kubeconfig ? [`--kubeconfig=${kubeconfig}`, ...args] : args, { env, maxBuffer: 64 << 20 });
    return stdout;
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    throw new Error(e.stderr?.trim() || e.message, { cause: err });
  }
}

function kinds(manifest: string): string[] {
  return parseAllDocuments(manifest)
    .map((d) => d.toJS() as { kind?: string; metadata?: { name?: string } } | null)
    .filter((o): o is { kind: string; metadata: { name: string } } => !!o?.kind)
    .map((o) => `${o.kind}/${o.metadata.name}`)
    .sort();
}

describe('Helm chart charts/coil', () => {
  let cp: ControlPlane;

  before(async () => {
    cp = await ControlPlane.start();
  });
  after(() => cp?.stop());

  test('helm lint passes', async () => {
    const out = await helm(['lint', CHART, '--strict']);
    assert.match(out, /1 chart\(s\) linted, 0 chart\(s\) failed/);
  });

  test('helm template renders every program, RBAC and webhook object', async () => {
    const objects = kinds(await helm(['template', 'coil', CHART, '--namespace', 'kube-system']));
    for (const expected of [
      'ClusterRole/coil-controller', 'ClusterRole/coild', 'ClusterRole/coil-egress', 'ClusterRoleBinding/coil-controller',
      'ClusterRoleBinding/coild', 'ConfigMap/coil-config', 'DaemonSet/coild', 'Deployment/coil-controller',
      'MutatingWebhookConfiguration/coil-mutating-webhook-configuration', 'Role/coil-leader-election',
      'Secret/coil-webhook-server-cert', 'Service/coil-webhook-service', 'ServiceAccount/coil-controller', 'ServiceAccount/coild',
      'ValidatingWebhookConfiguration/coil-validating-webhook-configuration',
    ]) {
      assert.ok(objects.includes(expected), `${expected} rendered (got ${objects.join(', ')})`);
    }
  });

  test('the CRDs are templates that helm uninstall keeps, not crds/ (which helm upgrade never updates)', async () => {
    const docs = parseAllDocuments(await helm(['template', 'coil', CHART, '--namespace', 'kube-system', '--set', 'ipam.enabled=false', '--set', 'egress.enabled=false', '--set-json', 'cni.netconf.plugins=[{"type":"ptp"},{"type":"coil"}]']))
      .map((d) => d.toJS() as { kind?: string; metadata: { name: string; annotations?: Record<string, string> } } | null)
      .filter((o) => o?.kind === 'CustomResourceDefinition');
    assert.deepEqual(docs.map((d) => d!.metadata.name).sort(), [...CRDS].sort(), 'all four, whatever is enabled');
    for (const d of docs) assert.equal(d!.metadata.annotations?.['helm.sh/resource-policy'], 'keep', d!.metadata.name);
    await assert.rejects(readFile(join(CHART, 'crds/coil.cybozu.com_egresses.yaml')), { code: 'ENOENT' }, 'no crds/ folder beside the templates');
  });

  test('values.schema.json rejects a bad value naming it', async () => {
    await assert.rejects(helm(['template', 'coil', CHART, '--set', 'cni.confName=coil.conf']), /cni\.confName/);
    await assert.rejects(helm(['template', 'coil', CHART, '--set', 'defaultPool.blockSizeBits=40']), /defaultPool\.blockSizeBits/);
  });

  test('IPAM off renders no AddressPool webhook and no IPAM rules for the programs', async () => {
    const out = await helm(['template', 'coil', CHART, '--set', 'ipam.enabled=false', '--set-json', 'cni.netconf.plugins=[{"type":"ptp"},{"type":"coil"}]']);
    const docs = parseAllDocuments(out).map((d) => d.toJS() as { kind?: string; metadata?: { name?: string }; rules?: { resources: string[] }[]; webhooks?: { name: string }[] } | null);
    const webhooks = docs.flatMap((d) => d?.webhooks ?? []).map((w) => w.name);
    assert.ok(!webhooks.some((w) => w.includes('addresspool')), `no AddressPool webhook (${webhooks.join(', ')})`);
    for (const role of docs.filter((d) => d?.kind === 'ClusterRole' && ['coil-controller', 'coild'].includes(d.metadata?.name ?? ''))) {
      const resources = role!.rules!.flatMap((r) => r.resources);
      assert.ok(!resources.includes('addressblocks') && !resources.includes('blockrequests'), `${role!.metadata!.name}: ${resources.join(',')}`);
    }
  });

  test('helm install with defaultPool.create=true succeeds without --wait (no hook meets the unserved webhook)', async () => {
    // No kubelet here: coil-controller never runs, so its webhook never answers — as in the first
    // seconds of a real install. The chart's old post-install hook failed exactly so.
    const ns = 'coil-nowait';
    await kubectl(cp.kubeconfigPath, ['create', 'namespace', ns]);
    try {
      await helm(['install', 'coil', CHART, '--namespace', ns, '--set', 'defaultPool.create=true', '--set-json', 'defaultPool.subnets=[{"ipv4":"10.244.0.0/16"}]'], cp.kubeconfigPath);
      const dep = await cp.kubeConfig.makeApiClient(k8s.AppsV1Api).readNamespacedDeployment({ name: 'coil-controller', namespace: ns });
      assert.ok(dep.spec?.template.spec?.containers[0]?.args?.includes('--default-pool={"blockSizeBits":5,"subnets":[{"ipv4":"10.244.0.0/16"}]}'));
    } finally {
      // --no-hooks: no kubelet here runs the post-delete hook's Job (helm would wait 5 min for it);
      // test/e2e/real-nodes.test.ts runs it on real nodes.
      await helm(['uninstall', 'coil', '--namespace', ns, '--wait', '--no-hooks'], cp.kubeconfigPath).catch(() => undefined);
      await kubectl(cp.kubeconfigPath, ['delete', 'namespace', ns, '--wait=false']);
      // Kept by the uninstall and marked as this namespace's release: the next test installs in kube-system.
      await kubectl(cp.kubeconfigPath, ['delete', 'crd', ...CRDS]);
    }
  });

  test('helm install creates every object, upgrade applies changed values, uninstall removes them', async () => {
    const ns = 'kube-system';
    await helm(['install', 'coil', CHART, '--namespace', ns], cp.kubeconfigPath);
    const apps = cp.kubeConfig.makeApiClient(k8s.AppsV1Api);
    const ds = await apps.readNamespacedDaemonSet({ name: 'coild', namespace: ns });
    assert.equal(ds.spec?.template.spec?.hostNetwork, true);
    assert.equal(ds.spec?.template.spec?.hostPID, true);
    assert.equal(ds.spec?.template.spec?.containers[0]?.volumeMounts?.find((m) => m.name === 'run')?.mountPropagation, 'HostToContainer');
    const dep = await apps.readNamespacedDeployment({ name: 'coil-controller', namespace: ns });
    assert.equal(dep.spec?.replicas, 2);
    const crds = await kubectl(cp.kubeconfigPath, ['get', 'crd', '-o', 'name']);
    assert.match(crds, /addresspools\.coil\.cybozu\.com/, 'the chart installed the CRDs');

    const secretBefore = await cp.kubeConfig.makeApiClient(k8s.CoreV1Api).readNamespacedSecret({ name: 'coil-webhook-server-cert', namespace: ns });
    await helm(['upgrade', 'coil', CHART, '--namespace', ns, '--set', 'controller.replicas=3', '--set', 'coild.coolingPeriod=45s'], cp.kubeconfigPath);
    const upgraded = await apps.readNamespacedDeployment({ name: 'coil-controller', namespace: ns });
    assert.equal(upgraded.spec?.replicas, 3);
    const dsUp = await apps.readNamespacedDaemonSet({ name: 'coild', namespace: ns });
    assert.ok(dsUp.spec?.template.spec?.containers[0]?.args?.includes('--cooling-period=45s'));
    const secretAfter = await cp.kubeConfig.makeApiClient(k8s.CoreV1Api).readNamespacedSecret({ name: 'coil-webhook-server-cert', namespace: ns });
    assert.equal(secretAfter.data?.['ca.crt'], secretBefore.data?.['ca.crt'], 'the upgrade keeps the webhook CA');
    const validating = await cp.kubeConfig.makeApiClient(k8s.AdmissionregistrationV1Api)
      .readValidatingWebhookConfiguration({ name: 'coil-validating-webhook-configuration' });
    assert.equal(validating.webhooks?.[0]?.clientConfig.caBundle, secretAfter.data?.['ca.crt'], 'caBundle matches the Secret CA');

    await helm(['uninstall', 'coil', '--namespace', ns, '--wait', '--no-hooks'], cp.kubeconfigPath); // no kubelet: see above
    await eventually(async () => {
      await assert.rejects(apps.readNamespacedDaemonSet({ name: 'coild', namespace: ns }));
      return true;
    });
    const roles = await kubectl(cp.kubeconfigPath, ['get', 'clusterrole', '-l', 'app.kubernetes.io/name=coil', '-o', 'name']);
    assert.equal(roles.trim(), '', 'no ClusterRole left');
    for (const name of CRDS) {
      const crd = await readCrd(cp.kubeconfigPath, name);
      assert.equal(crd.metadata.annotations?.['meta.helm.sh/release-name'], 'coil', `${name} kept, still marked as the release's`);
    }
  });

  test("helm upgrade brings the CRDs up to date; from 0.1.0's crds/ after README's adoption; uninstall keeps them, a reinstall adopts them", async () => {
    const ns = 'kube-system';
    const kc = cp.kubeconfigPath;
    // 0.1.0's state: the CRDs as its crds/ left them (no helm marks; the Egress CRD without
    // spec.snatAddresses) and a release of a chart whose CRDs are in crds/.
    await kubectl(kc, ['delete', 'crd', ...CRDS]);
    const old = await mkdtemp(join(tmpdir(), 'coil-chart-0.1.0-'));
    try {
      await copy(CHART, old, { recursive: true });
      await rm(join(old, 'templates/crds'), { recursive: true });
      await mkdir(join(old, 'crds'));
      for (const name of CRDS.filter((n) => n !== 'egresses.coil.cybozu.com')) {
        const file = `coil.cybozu.com_${name.split('.')[0]}.yaml`;
        await writeFile(join(old, 'crds', file), await readFile(join(CHART, 'templates/crds', file)));
      }
      await writeFile(join(old, 'crds/coil.cybozu.com_egresses.yaml'), await readFile(EGRESS_CRD_0_1_0));
      await helm(['install', 'coil', old, '--namespace', ns], kc);
    } finally {
      await rm(old, { recursive: true, force: true });
    }
    assert.equal((await readCrd(kc, 'egresses.coil.cybozu.com')).metadata.annotations?.['meta.helm.sh/release-name'], undefined, 'crds/ leaves no helm mark');
    assert.ok(!(await egressSpecFields(kc)).includes('snatAddresses'), "0.1.0's Egress CRD");

    // Without adoption helm refuses, before it changes anything.
    await assert.rejects(helm(['upgrade', 'coil', CHART, '--namespace', ns, '--reset-then-reuse-values'], kc),
      /CustomResourceDefinition "[a-z]+\.coil\.cybozu\.com" in namespace "" exists and cannot be imported into the current release: invalid ownership metadata/);
    assert.ok(!(await egressSpecFields(kc)).includes('snatAddresses'), 'the refused upgrade changed nothing');

    // README's commands, as written there.
    const readme = await readFile(join(REPO_ROOT, 'README.md'), 'utf8');
    const adopt = /\*\*From 0\.1\.0[\s\S]*?```sh\n([\s\S]*?)```/.exec(readme)?.[1];
    assert.ok(adopt?.includes('kubectl label crd'), "README's adoption commands");
    await run('bash', ['-euo', 'pipefail', '-c', adopt!], { env: { ...process.env, KUBECONFIG: kc, PATH: `${dirname(await toolPath('kubectl'))}:${process.env.PATH}` } });
    await helm(['upgrade', 'coil', CHART, '--namespace', ns, '--reset-then-reuse-values'], kc);
    assert.ok((await egressSpecFields(kc)).includes('snatAddresses'), 'helm upgrade updated the Egress CRD');
    for (const name of CRDS) {
      const crd = await readCrd(kc, name);
      assert.equal(crd.metadata.annotations?.['helm.sh/resource-policy'], 'keep', name);
      assert.equal(crd.metadata.labels?.['app.kubernetes.io/managed-by'], 'Helm', name);
    }

    await helm(['uninstall', 'coil', '--namespace', ns, '--wait', '--no-hooks'], kc); // no kubelet: see above
    for (const name of CRDS) await readCrd(kc, name); // kept
    await helm(['install', 'coil', CHART, '--namespace', ns], kc);
    const manifest = await helm(['get', 'manifest', 'coil', '--namespace', ns], kc);
    assert.deepEqual(kinds(manifest).filter((k) => k.startsWith('CustomResourceDefinition/')), CRDS.map((n) => `CustomResourceDefinition/${n}`).sort(), 'the reinstall adopted the kept CRDs');
    await helm(['uninstall', 'coil', '--namespace', ns, '--wait', '--no-hooks'], kc);
  });
});
