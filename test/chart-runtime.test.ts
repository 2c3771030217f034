/**
 * What the chart gives the container runtime and the node lifecycle, rendered with the real helm:
 * the conflist's cniVersion (1.1.0 by default, so containerd 2 sends coil CNI STATUS; 1.0.0 for
 * containerd 1.6: docs/real-nodes.md#cni-11-on-containerd-2), and coild's tolerations against every
 * taint Kubernetes puts on a node, so a node that turns NotReady while coild restarts keeps coild.
 * test/e2e/containerd-cni.test.ts shows both on real nodes.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import type * as k8s from '@kubernetes/client-node';
import { parseAllDocuments } from 'yaml';
import { REPO_ROOT } from './envtest/control-plane.js';
import { toolPath } from './envtest/tools.js';
import { NODE_LIFECYCLE_TAINTS, tolerates } from './support/tolerations.js';

const run = promisify(execFile);

type Doc = { kind?: string; metadata?: { name?: string }; data?: Record<string, string>; spec?: { template?: { spec?: { tolerations?: k8s.V1Toleration[] } } } };

/** `helm template` of the chart; a value `json:path=value` is passed with --set-json. */
async function render(set: string[]): Promise<Doc[]> {
  const flags = set.flatMap((s) => (s.startsWith('json:') ? ['--set-json', s.slice(5)] : ['--set', s]));
  const { stdout } = await run(await toolPath('helm'), ['template', 'coil', join(REPO_ROOT, 'charts/coil'), '--namespace', 'kube-system', ...flags], { maxBuffer: 64 << 20 });
  return parseAllDocuments(stdout).map((d) => d.toJS() as Doc).filter(Boolean);
}

const conflistVersion = (docs: Doc[]) => (JSON.parse(docs.find((d) => d.kind === 'ConfigMap' && d.metadata?.name === 'coil-config')!.data!.cni_netconf!) as { cniVersion: string }).cniVersion;
const coildTolerations = (docs: Doc[]) => docs.find((d) => d.kind === 'DaemonSet' && d.metadata?.name === 'coild')!.spec!.template!.spec!.tolerations ?? [];

test("the conflist is cniVersion 1.1.0 by default; cni.netconf.cniVersion=1.0.0 serves containerd 1.6; another version is refused", async () => {
  assert.equal(conflistVersion(await render([])), '1.1.0');
  assert.equal(conflistVersion(await render(['cni.netconf.cniVersion=1.0.0'])), '1.0.0');
  await assert.rejects(render(['cni.netconf.cniVersion=1.2.0']), /cniVersion/);
});

test("coild tolerates every taint Kubernetes puts on a node (NotReady, unreachable, pressure, cordon), and the check sees a missing toleration", async () => {
  const tolerations = coildTolerations(await render([]));
  for (const taint of NODE_LIFECYCLE_TAINTS) assert.ok(tolerations.some((t) => tolerates(t, taint)), `coild tolerates ${taint.key}:${taint.effect}`);
  // Without the chart's tolerations the NotReady node's NoExecute taint would evict coild.
  const none = coildTolerations(await render(['json:coild.tolerations=[]']));
  assert.ok(!none.some((t) => tolerates(t, { key: 'node.kubernetes.io/not-ready', effect: 'NoExecute' })));
});

test('tolerates() follows Kubernetes: effect, Exists with and without a key, Equal with its value', () => {
  const taint = { key: 'k', value: 'v', effect: 'NoExecute' };
  assert.equal(tolerates({ operator: 'Exists' }, taint), true);
  assert.equal(tolerates({ operator: 'Exists', effect: 'NoSchedule' }, taint), false);
  assert.equal(tolerates({ operator: 'Exists', key: 'k' }, taint), true);
  assert.equal(tolerates({ operator: 'Exists', key: 'other' }, taint), false);
  assert.equal(tolerates({ key: 'k', value: 'v' }, taint), true);
  assert.equal(tolerates({ key: 'k', value: 'w', effect: 'NoExecute' }, taint), false);
});
