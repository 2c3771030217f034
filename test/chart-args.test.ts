/**
 * The flags the Helm chart passes are flags the programs accept: renders charts/coil with the
 * real helm (default and non-default values), then feeds each container's args to that
 * program's own flag parser. Catches a chart that would crash-loop a program on upgrade.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { parseAllDocuments } from 'yaml';
import { parseConfig as parseControllerConfig } from '../src/controller/config.js';
import { parseConfig as parseCoildConfig } from '../src/node-agent/config.js';
import { toolPath } from './envtest/tools.js';

const run = promisify(execFile);
const root = fileURLToPath(new URL('../../', import.meta.url));

type Container = { name: string; args?: string[] };
type Doc = { kind?: string; metadata?: { name?: string }; spec?: { template?: { spec?: { containers?: Container[] } } } };

/** Renders the chart; a value `json:path=value` is passed with --set-json. */
async function render(set: string[]): Promise<Doc[]> {
  const helm = await toolPath('helm');
  const flags = set.flatMap((s) => (s.startsWith('json:') ? ['--set-json', s.slice(5)] : ['--set', s]));
  const { stdout } = await run(helm, ['template', 'coil', join(root, 'charts/coil'), '--namespace', 'kube-system', ...flags], { maxBuffer: 64 << 20 });
  return parseAllDocuments(stdout).map((d) => d.toJS() as Doc).filter(Boolean);
}

const argsOf = (docs: Doc[], kind: string, name: string): string[] =>
  docs.find((d) => d.kind === kind && d.metadata?.name === name)!.spec!.template!.spec!.containers![0]!.args ?? [];

for (const [label, set] of [
  ['default values', []],
  ['egress only, custom ports and periods', ['ipam.enabled=false', 'json:cni.netconf.plugins=[{"type":"ptp","ipam":{"type":"host-local"}},{"type":"coil","socket":"/run/coild.sock"}]',
    'egress.fouPort=6000', 'coild.coolingPeriod=45s', 'controller.gcInterval=10m', 'coild.clearRoutesOnShutdown=false']],
  ['a dual-stack default pool', ['defaultPool.create=true', 'defaultPool.blockSizeBits=4', 'json:defaultPool.subnets=[{"ipv4":"10.244.0.0/16","ipv6":"fd00:10:244::/112"}]']],
] as [string, string[]][]) {
  test(`coil-controller accepts the chart's args (${label})`, async () => {
    const args = argsOf(await render(set), 'Deployment', 'coil-controller');
    assert.doesNotThrow(() => parseControllerConfig(args, { COIL_POD_NAMESPACE: 'kube-system', COIL_POD_NAME: 'coil-controller-x' }), `args: ${args.join(' ')}`);
  });

  test(`coild accepts the chart's args (${label})`, async () => {
    const args = argsOf(await render(set), 'DaemonSet', 'coild');
    const cfg = parseCoildConfig(args, { COIL_NODE_NAME: 'n1' });
    assert.equal(cfg.enableIpam, !set.includes('ipam.enabled=false'), `args: ${args.join(' ')}`);
  });
}

test('defaultPool.create=true becomes the controller\'s --default-pool (no hook object), with the values as given', async () => {
  const docs = await render(['defaultPool.create=true', 'json:defaultPool.subnets=[{"ipv4":"10.244.0.0/16","ipv6":"fd00:10:244::/112"}]']);
  assert.ok(!docs.some((d) => d.kind === 'AddressPool'), 'no AddressPool in the release: a hook would meet the webhook before it serves');
  const cfg = parseControllerConfig(argsOf(docs, 'Deployment', 'coil-controller'), {});
  assert.deepEqual(cfg.defaultPool, { blockSizeBits: 5, subnets: [{ ipv4: '10.244.0.0/16', ipv6: 'fd00:10:244::/112' }] });
  assert.equal(parseControllerConfig(argsOf(await render([]), 'Deployment', 'coil-controller'), {}).defaultPool, undefined);
});

test('egress-only mode with coil first in the conflist is refused when rendering, saying what to do', async () => {
  await assert.rejects(render(['ipam.enabled=false']), /coil must be chained after the CNI plugin that gives pods their addresses/);
});

test('uninstall: coild knows its Pod and conflist; a post-delete hook Job (host network) runs release-finalizers', async () => {
  const docs = (await render([])) as (Doc & { metadata?: { annotations?: Record<string, string> }; spec?: { template?: { spec?: { hostNetwork?: boolean; containers?: (Container & { command?: string[]; env?: { name: string }[] })[] } } } })[];
  const coild = docs.find((d) => d.kind === 'DaemonSet')!.spec!.template!.spec!.containers![0]!;
  const cfg = parseCoildConfig(coild.args ?? [], { COIL_NODE_NAME: 'n1', COIL_POD_NAMESPACE: 'kube-system', COIL_POD_NAME: 'coild-x' });
  assert.equal(cfg.cniConfFile, '/host/etc/cni/net.d/10-coil.conflist');
  assert.ok(['COIL_POD_NAMESPACE', 'COIL_POD_NAME'].every((n) => coild.env?.some((e) => e.name === n)));
  const job = docs.find((d) => d.kind === 'Job' && d.metadata?.name === 'coil-uninstall')!;
  assert.equal(job.metadata?.annotations?.['helm.sh/hook'], 'post-delete');
  assert.equal(job.spec?.template?.spec?.hostNetwork, true, 'coil\'s pod network is gone when it runs');
  assert.deepEqual(job.spec?.template?.spec?.containers?.[0]?.command?.slice(0, 2), ['coil-controller', 'release-finalizers']);
});

test('coil-controller (hostNetwork, fixed ports) rolls one replica at a time, never a surge pod that no node could take', async () => {
  const docs = (await render([])) as (Doc & { spec?: { strategy?: { type?: string; rollingUpdate?: { maxSurge?: number; maxUnavailable?: number } } } })[];
  const deployment = docs.find((d) => d.kind === 'Deployment' && d.metadata?.name === 'coil-controller')!;
  assert.deepEqual(deployment.spec?.strategy, { type: 'RollingUpdate', rollingUpdate: { maxSurge: 0, maxUnavailable: 1 } });
});
