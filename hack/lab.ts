/**
 * The local lab — the README's main job: a real control plane, coil-controller, and 3 nodes
 * (network namespaces) each running coild and BIRD, with 6 pods made through the real `coil`
 * executable; then a cross-node ping. Runs until Ctrl-C, then removes everything it made.
 *
 *   npm run lab                # up, 6 pods, status, wait for Ctrl-C
 *   npm run lab -- --once      # up, 6 pods, status, ping, down (what the e2e test does)
 *   npm run lab -- down        # remove what a killed lab left behind
 */
import 'reflect-metadata';
import { fileURLToPath } from 'node:url';
import { Lab } from './lab/lab.js';

async function main(argv: readonly string[]): Promise<number> {
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

if (process.argv[1] === fileURLToPath(import.meta.url)) await main(process.argv.slice(2));
