/**
 * The local lab — the README's main job. Today it starts a real control plane (etcd,
 * kube-apiserver, kube-controller-manager), installs Coil's CRDs and applies the seed
 * documents' sample objects, then prints what the cluster holds and waits until Ctrl-C,
 * when it removes every process and file it made.
 *
 *   npm run lab               # runs until Ctrl-C
 *   npm run lab -- --once     # shows the state and tears down at once (used by tests)
 */
import { readFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as k8s from '@kubernetes/client-node';
import { parseAllDocuments } from 'yaml';
import { coilCrds } from '../src/api/v2/crd.js';
import { ControlPlane, REPO_ROOT } from '../test/envtest/control-plane.js';
import { kubectl, toolsDir } from '../test/envtest/tools.js';

/** Applies every document of config/samples/*.yaml, creating their namespaces first. */
async function applySamples(cp: ControlPlane): Promise<number> {
  const dir = join(REPO_ROOT, 'config/samples');
  const objects = k8s.KubernetesObjectApi.makeApiClient(cp.kubeConfig);
  const core = cp.kubeConfig.makeApiClient(k8s.CoreV1Api);
  const namespaces = new Set<string>();
  let count = 0;
  for (const file of (await readdir(dir)).filter((f) => f.endsWith('.yaml')).sort()) {
    for (const doc of parseAllDocuments(await readFile(join(dir, file), 'utf8'))) {
      const obj = doc.toJS() as k8s.KubernetesObject;
      const ns = obj.metadata?.namespace;
      if (ns && !namespaces.has(ns)) {
        namespaces.add(ns);
        await core.createNamespace({ body: { metadata: { name: ns } } });
      }
      await objects.create(obj);
      count++;
    }
  }
  return count;
}

async function main(): Promise<void> {
  const once = process.argv.includes('--once');
  const started = Date.now();
  console.log('lab: starting etcd, kube-apiserver, kube-controller-manager ...');
  const cp = await ControlPlane.start({ controllerManager: true, crds: coilCrds() });
  let stopping = false;
  const down = async () => {
    if (stopping) return;
    stopping = true;
    console.log('\nlab: tearing down ...');
    await cp.stop();
    console.log('lab: down, nothing left behind');
    process.exit(0);
  };
  process.on('SIGINT', () => void down());
  process.on('SIGTERM', () => void down());
  try {
    console.log(`lab: control plane ready in ${Date.now() - started} ms at ${cp.server}`);
    const n = await applySamples(cp);
    console.log(`lab: applied ${n} sample objects from config/samples`);
    console.log(await kubectl(cp.kubeconfigPath, ['get', 'coil', '-A']));
    console.log(`lab: export KUBECONFIG=${cp.kubeconfigPath}; kubectl is in ${toolsDir()}`);
  } catch (err) {
    console.error('lab: failed:', err);
    await down();
  }
  if (once) await down();
  else console.log('lab: running; Ctrl-C to tear down');
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await main();
