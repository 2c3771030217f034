/**
 * The local lab — the README's main job: a Kubernetes cluster of real parts on this machine
 * (hack/lab/cluster.ts): control plane + kube-scheduler, 3 nodes each with its own containerd,
 * kubelet, kube-proxy and BIRD, coil installed with helm from the image hack/build-image.sh built.
 * It then creates a Deployment and a Pod through the API, shows where kubelet started them and
 * which coil addresses they got, and pings across nodes over the routes BIRD learned.
 *
 *   npm run lab                   # up, workload, status; runs until Ctrl-C, then removes everything
 *   npm run lab -- --once         # up, workload, status, ping, down (exit 1 if the ping failed)
 *   npm run lab -- --nodes=5      # another node count
 *   npm run lab -- --ipv4-only    # an IPv4-only default pool (the default is dual stack)
 *   npm run lab -- --kubernetes=1.33   # another Kubernetes release of hack/kubernetes-versions
 *   npm run lab -- --containerd=1.6   # Debian's containerd 1.6 on the nodes (default: containerd 2, built here)
 *   npm run lab -- down           # remove what a killed lab left behind
 *
 * COIL_LAB_PREFIX and COIL_LAB_DIR (default coillab- and /tmp/coil-lab) let a second lab run
 * beside the default one.
 */
import 'reflect-metadata';
import { fileURLToPath } from 'node:url';
import { Cluster, POD_RANGE, POD_RANGE_V6 } from './lab/cluster.js';
import { parseContainerdLine } from './lab/containerd.js';
import { ip } from './lab/topology.js';

const DEMO = 'demo';

async function main(argv: readonly string[]): Promise<number> {
  if (argv.includes('down')) {
    await Cluster.down();
    console.log('lab: down');
    return 0;
  }
  const once = argv.includes('--once');
  const nodes = Number(argv.find((a) => a.startsWith('--nodes='))?.split('=')[1] ?? 3);
  const t0 = performance.now();
  const log = (m: string) => console.log(`lab: ${m} (${((performance.now() - t0) / 1000).toFixed(1)} s)`);
  const dualStack = !argv.includes('--ipv4-only');
  const kubernetes = argv.find((a) => a.startsWith('--kubernetes='))?.split('=')[1];
  const containerd = parseContainerdLine(argv.find((a) => a.startsWith('--containerd='))?.slice('--containerd='.length));
  const cluster = await Cluster.up({ nodes, log, dualStack, containerd, ...(kubernetes ? { kubernetes } : {}) });
  let stopping = false;
  const down = async (code: number) => {
    if (stopping) return;
    stopping = true;
    console.log('lab: tearing down ...');
    await cluster.stop();
    console.log('lab: down, nothing left behind');
    process.exit(code);
  };
  process.on('SIGINT', () => void down(0));
  process.on('SIGTERM', () => void down(0));
  try {
    log('the lab is up: coil-controller and coild run as pods kubelet started');
    console.log(await cluster.kubectl(['get', 'nodes', '-o', 'wide']));
    console.log(await cluster.kubectl(['get', 'pods', '-n', 'kube-system', '-o', 'wide']));

    log(`creating Deployment ${DEMO}/web (${nodes * 2} replicas) and Pod ${DEMO}/client through the API`);
    await cluster.applyWorkload(DEMO, 'web', nodes * 2);
    await cluster.createPod(DEMO, 'client', { nodeName: cluster.nodes[0]!.name });
    const web = await cluster.waitForPods(DEMO, 'app=web', nodes * 2);
    const [client] = await cluster.waitForPods(DEMO, 'app=client', 1);
    log('every pod is Ready with an address from coil');
    console.log(await cluster.kubectl(['get', 'pods', '-n', DEMO, '-o', 'wide']));
    console.log(await cluster.kubectl(['get', 'addressblocks']));
    for (const node of cluster.nodes) {
      for (const family of dualStack ? ['-4', '-6'] : ['-4']) {
        // IPv6 has no table 119 until coild exports a block to it.
        const t119 = (await ip(['-n', node.name, family, 'route', 'show', 'table', '119']).catch(() => '')).trim().split('\n').filter(Boolean).map((l) => l.split(' ')[0]);
        const bgp = (await ip(['-n', node.name, family, 'route', 'show', 'proto', 'bird'])).trim().split('\n').filter(Boolean).map((l) => l.split(' ').slice(0, 3).join(' '));
        console.log(`${node.name} (${family === '-4' ? node.ipv4 : node.spec.node.ipv6}): table 119 ${t119.join(' ') || '-'}; learned over BGP: ${bgp.join(', ') || '-'}`);
      }
    }

    const remote = web.find((p) => p.spec?.nodeName !== client!.spec?.nodeName);
    let ok = true; // with one node there is no cross-node ping to fail
    if (remote) {
      // Every address of each: IPv4, and IPv6 in a dual-stack lab (ping -6).
      const from = (client!.status?.podIPs ?? []).map((a) => a.ip);
      for (const address of (remote.status?.podIPs ?? []).map((a) => a.ip)) {
        await cluster.waitForBgpRoute(client!.spec!.nodeName!, address);
        const answered = await cluster.ping(DEMO, client!.metadata!.name!, address);
        ok &&= answered;
        log(`ping ${DEMO}/client (${client!.spec?.nodeName}, ${from.join(' ')}) -> ${remote.metadata?.name} (${remote.spec?.nodeName}, ${address}) over BGP routes: ${answered ? 'ok' : 'FAILED'}`);
      }
    } else {
      log('every web pod landed on the client\'s node: no cross-node ping to show');
    }
    console.log(`\nKUBECONFIG=${cluster.dir}/admin.kubeconfig   (pods from ${POD_RANGE}${dualStack ? ` and ${POD_RANGE_V6}` : ''}; logs under ${cluster.dir})`);
    if (once) await down(ok ? 0 : 1);
    else console.log('lab: running; Ctrl-C tears it down');
  } catch (err) {
    console.error('lab: failed:', err);
    await down(1);
  }
  return 0;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) process.exitCode = await main(process.argv.slice(2));
