/**
 * The local lab — the README's main job: a real control plane, coil-controller, and 3 nodes
 * (network namespaces) each running coild and BIRD, with 6 pods made through the real `coil`
 * executable; then a cross-node ping, and an Egress whose NAT pod runs coil-egress on a node.
 * Runs until Ctrl-C, then removes everything it made.
 *
 *   npm run lab                # up, 6 pods, status, wait for Ctrl-C
 *   npm run lab -- --once      # up, 6 pods, status, ping, down (what the e2e test does)
 *   npm run lab -- down        # remove what a killed lab left behind
 */
import 'reflect-metadata';
import { fileURLToPath } from 'node:url';
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import * as k8s from '@kubernetes/client-node';
import { checkInvariants } from '../test/invariants/check.js';
import { collectView } from '../test/invariants/collect.js';
import { kubectl } from '../test/envtest/tools.js';
import { Lab, LAB_DIR } from './lab/lab.js';
import { labNodes, listLabNetns } from './lab/topology.js';

const run = promisify(execFile);

async function main(argv: readonly string[]): Promise<number> {
  if (argv.includes('check')) return checkRunningLab();
  if (argv.includes('down')) {
    await Lab.down();
    console.log('lab: down');
    return 0;
  }
  const once = argv.includes('--once');
  const t0 = performance.now();
  const log = (m: string) => console.log(`lab: ${m} (${((performance.now() - t0) / 1000).toFixed(1)} s)`);
  const lab = await Lab.up({ log });
  let stopping = false;
  const down = async (code: number) => {
    if (stopping) return;
    stopping = true;
    console.log('lab: tearing down ...');
    await lab.stop();
    console.log('lab: down, nothing left behind');
    process.exit(code);
  };
  process.on('SIGINT', () => void down(0));
  process.on('SIGTERM', () => void down(0));
  try {
    log('lab is up; making 6 pods');
    for (let i = 0; i < 6; i++) {
      const node = lab.nodes[i % lab.nodes.length]!;
      const pod = await lab.addPod(node, `pod-${i + 1}`);
      log(`${pod.name} on ${node.name}: ${pod.ips.join(', ')} (CNI ADD ${pod.addMs.toFixed(0)} ms)`);
    }
    await lab.waitForBgp();
    log('BGP converged');
    const [a, b] = [lab.pods.get('pod-1')!, lab.pods.get('pod-2')!];
    const ok = await lab.ping(a, b.ips[0]!);
    log(`ping ${a.name} (${a.node}) -> ${b.name} (${b.node}) ${b.ips[0]}: ${ok ? 'ok' : 'FAILED'}`);
    log('running Egress internet-egress/nat (its NAT pod as a netns on coillab-n1)');
    const egress = await lab.runEgress('internet-egress', 'nat', ['0.0.0.0/0']);
    console.log(await kubectl(lab.cp.kubeconfigPath, ['get', 'egress,deployment,service,pod', '-n', 'internet-egress', '-o', 'wide']));
    log(`coil-egress /readyz: ${egress.readyz.trim()}`);
    console.log(await lab.status());
    console.log(`KUBECONFIG=${lab.cp.kubeconfigPath}`);
    if (once) await down(ok ? 0 : 1);
    else console.log('lab: running; Ctrl-C tears it down');
  } catch (err) {
    console.error('lab: failed:', err);
    await down(1);
  }
  return 0;
}

/** `npm run lab -- check`: the invariant checker against a lab running in another shell. */
async function checkRunningLab(): Promise<number> {
  const kubeConfig = new k8s.KubeConfig();
  kubeConfig.loadFromFile(join(LAB_DIR, 'admin.kubeconfig'));
  const nodes = labNodes((await listLabNetns()).filter((n) => /^coillab-n\d+$/.test(n)).length);
  const view = await collectView({
    kubeConfig, nodes, cniCacheDir: join(LAB_DIR, 'cni-cache'),
    fetchIpam: async (node) => {
      const script = "fetch('http://127.0.0.1:9385/ipam').then(r=>r.text()).then(t=>process.stdout.write(t)).catch(()=>{})";
      const { stdout } = await run('nsenter', [`--net=/run/netns/${node}`, process.execPath, '-e', script]).catch(() => ({ stdout: '' }));
      return stdout.startsWith('{') ? stdout : undefined;
    },
  });
  const violations = checkInvariants(view);
  console.log(`${view.pods.length} pods, ${view.blocks.length} blocks, ${nodes.length} nodes: ${violations.length} invariant violations`);
  for (const v of violations) console.log(`  ${v.invariant}: ${v.detail}`);
  return violations.length === 0 ? 0 : 1;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) process.exitCode = await main(process.argv.slice(2));
