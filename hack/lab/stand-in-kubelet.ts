/**
 * A STAND-IN for kubelet + containerd + libcni, used by the stand-in lab (stand-in-lab.ts) and by
 * tests that need a synthetic CNI call no runtime makes: it makes pods the way a node does. A Pod object bound to the node, a
 * network namespace, the conflist's plugins executed as containerd's libcni executes them
 * (ADD in order with prevResult, DEL in reverse with the cached result, `CNI_*` environment,
 * config on stdin, run inside the node's namespace), then the Pod status patched with its IPs.
 *
 * @see CNI spec §"Execution of Network Configurations" (plugin chaining, prevResult)
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import * as k8s from '@kubernetes/client-node';
import { ip, LAB_PREFIX, type LabNode } from './topology.js';

/** A pod made by the stand-in kubelet. */
export interface LabPod {
  readonly name: string;
  readonly namespace: string;
  readonly node: string;
  readonly netns: string;
  readonly containerId: string;
  /** Pod addresses without prefix length. */
  readonly ips: string[];
  /** Milliseconds the CNI ADD chain took. */
  readonly addMs: number;
}

interface CniResult {
  ips?: { address: string }[];
}

/**
 * Told when a plugin of the chain starts (`running` true) and when it has exited (false): the
 * soak lines coild's GC passes up with the moment coild serves a call.
 */
export type PluginObserver = (command: 'ADD' | 'DEL', plugin: string, running: boolean) => void;

/** Options of {@link StandInKubelet}. */
export interface StandInKubeletOptions {
  readonly kubeConfig: k8s.KubeConfig;
  /** The conflist (JSON text) as the chart renders it; each node's coild socket is set per node. */
  readonly netconf: string;
  /** Directory holding the CNI executables (coil, portmap, ...). */
  readonly cniPath: string;
  /** Per-node coild socket path. */
  readonly socketOf: (node: LabNode) => string;
  /** Where ADD results are cached (as libcni caches them under /var/lib/cni). */
  readonly cacheDir: string;
}

/** Runs one CNI plugin; resolves with stdout or rejects with the CNI error JSON text. */
function execPlugin(node: LabNode, path: string, env: Record<string, string>, stdin: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn('nsenter', [`--net=${node.netnsPath}`, path], { env: { PATH: process.env.PATH ?? '', ...env } });
    let out = '';
    let err = '';
    child.stdout.on('data', (c: Buffer) => (out += c));
    child.stderr.on('data', (c: Buffer) => (err += c));
    child.on('error', reject);
    child.on('close', (code) => (code === 0 ? resolve(out) : reject(new Error(`${env.CNI_COMMAND} ${path}: ${out.trim() || err.trim()} (exit ${code})`))));
    child.stdin.end(stdin);
  });
}

/** Creates and deletes pods on stand-in lab nodes. Not safe for concurrent calls on one pod name. */
export class StandInKubelet {
  constructor(private readonly options: StandInKubeletOptions) {}

  private conflist(node: LabNode): { cniVersion: string; name: string; plugins: Record<string, unknown>[] } {
    const list = JSON.parse(this.options.netconf) as { cniVersion: string; name: string; plugins: Record<string, unknown>[] };
    list.plugins = list.plugins.map((p) => (p.type === 'coil' ? { ...p, socket: this.options.socketOf(node) } : p));
    return list;
  }

  private env(command: string, pod: { name: string; namespace: string; netns: string; containerId: string }): Record<string, string> {
    return {
      CNI_COMMAND: command,
      CNI_CONTAINERID: pod.containerId,
      CNI_NETNS: `/run/netns/${pod.netns}`,
      CNI_IFNAME: 'eth0',
      CNI_PATH: this.options.cniPath,
      CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=${pod.namespace};K8S_POD_NAME=${pod.name};K8S_POD_INFRA_CONTAINER_ID=${pod.containerId}`,
    };
  }

  /**
   * Creates Pod `namespace/name` on `node`, wires it through the CNI chain and marks it Running
   * with its IPs.
   * @throws Error with the CNI error when ADD fails (the Pod object and netns are removed).
   */
  async addPod(node: LabNode, name: string, namespace = 'default', options: { observe?: PluginObserver } = {}): Promise<LabPod> {
    const core = this.options.kubeConfig.makeApiClient(k8s.CoreV1Api);
    await core.createNamespacedPod({
      namespace,
      body: { metadata: { name, namespace }, spec: { nodeName: node.name, containers: [{ name: 'main', image: 'lab.invalid/pause' }] } },
    });
    return this.runPod(node, name, namespace, options);
  }

  /**
   * Runs an existing Pod bound to `node` (e.g. one a ReplicaSet made): network namespace, CNI
   * ADD chain, Pod status Running with its IPs (Ready unless `ready` is false).
   * @throws Error with the CNI error when ADD fails (the Pod object and netns are removed).
   */
  async runPod(node: LabNode, name: string, namespace: string, options: { ready?: boolean; observe?: PluginObserver } = {}): Promise<LabPod> {
    const core = this.options.kubeConfig.makeApiClient(k8s.CoreV1Api);
    const netns = `${LAB_PREFIX}${name}`;
    const containerId = createHash('sha256').update(`${namespace}/${name}/${Date.now()}`).digest('hex');
    const pod = { name, namespace, netns, containerId };
    await ip(['netns', 'add', netns]);
    await ip(['-n', netns, 'link', 'set', 'lo', 'up']);
    const list = this.conflist(node);
    const started = performance.now();
    let prev: unknown;
    try {
      for (const plugin of list.plugins) {
        const conf = { cniVersion: list.cniVersion, name: list.name, ...plugin, ...(prev ? { prevResult: prev } : {}) };
        prev = JSON.parse(await this.exec(node, 'ADD', String(plugin.type), pod, conf, options.observe));
      }
    } catch (err) {
      // As a container runtime does after a failed ADD: DEL the whole chain (without
      // prevResult), so whatever the plugins had already allocated is released.
      await this.delChain(node, pod, undefined, options.observe).catch(() => undefined);
      await ip(['netns', 'del', netns]).catch(() => undefined);
      await this.deletePodObject(name, namespace);
      throw err;
    }
    const addMs = performance.now() - started;
    await mkdir(this.options.cacheDir, { recursive: true });
    await writeFile(join(this.options.cacheDir, `${namespace}_${name}.json`), JSON.stringify({ node: node.name, pod, result: prev }));
    const ips = ((prev as CniResult).ips ?? []).map((i) => i.address.split('/')[0]!);
    await this.setStatus(name, namespace, ips, options.ready ?? true);
    return { name, namespace, node: node.name, netns, containerId, ips, addMs };
  }

  /**
   * Patches the Pod status: Running with `ips`, and the Ready condition. Retries while the
   * apiserver is unreachable, as a kubelet's status manager does (~60 s).
   */
  async setStatus(name: string, namespace: string, ips: readonly string[], ready: boolean): Promise<void> {
    for (let attempt = 0; ; attempt++) {
      try {
        await this.patchStatus(name, namespace, ips, ready);
        return;
      } catch (err) {
        if (attempt >= 120) throw err;
        await new Promise((r) => setTimeout(r, 500));
      }
    }
  }

  private async patchStatus(name: string, namespace: string, ips: readonly string[], ready: boolean): Promise<void> {
    const core = this.options.kubeConfig.makeApiClient(k8s.CoreV1Api);
    await core.patchNamespacedPodStatus(
      {
        name,
        namespace,
        body: {
          status: {
            phase: 'Running',
            podIP: ips[0],
            podIPs: ips.map((i) => ({ ip: i })),
            conditions: [{ type: 'Ready', status: ready ? 'True' : 'False' }],
          },
        },
      },
      k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
    );
  }

  /** CNI DEL of every plugin in reverse order (CNI spec: DEL runs the list backwards). */
  private async delChain(node: LabNode, pod: { name: string; namespace: string; netns: string; containerId: string }, prevResult: unknown, observe?: PluginObserver): Promise<void> {
    const list = this.conflist(node);
    for (const plugin of [...list.plugins].reverse()) {
      const conf = { cniVersion: list.cniVersion, name: list.name, ...plugin, ...(prevResult ? { prevResult } : {}) };
      await this.exec(node, 'DEL', String(plugin.type), pod, conf, observe);
    }
  }

  /** Runs one plugin of the chain, telling `observe` when it starts and when it has exited. */
  private async exec(node: LabNode, command: 'ADD' | 'DEL', type: string, pod: { name: string; namespace: string; netns: string; containerId: string }, conf: object, observe?: PluginObserver): Promise<string> {
    observe?.(command, type, true);
    try {
      return await execPlugin(node, join(this.options.cniPath, type), this.env(command, pod), JSON.stringify(conf));
    } finally {
      observe?.(command, type, false);
    }
  }

  /** Tears a pod down: CNI DEL in reverse order, its netns, and the Pod object. Idempotent. */
  async deletePod(node: LabNode, name: string, namespace = 'default', options: { observe?: PluginObserver } = {}): Promise<void> {
    const cacheFile = join(this.options.cacheDir, `${namespace}_${name}.json`);
    const cached = await readFile(cacheFile, 'utf8').then((t) => JSON.parse(t) as { pod: { name: string; namespace: string; netns: string; containerId: string }; result: unknown }).catch(() => undefined);
    if (cached) {
      await this.delChain(node, cached.pod, cached.result, options.observe);
      await ip(['netns', 'del', cached.pod.netns]).catch(() => undefined);
      await rm(cacheFile, { force: true });
    }
    await this.deletePodObject(name, namespace);
  }

  /**
   * Deletes the Pod object, retrying while the apiserver is unreachable (a kubelet keeps
   * trying too): a Pod left behind would hold an address coild has already released.
   * @throws the last error after ~60 s of failures; NotFound counts as deleted.
   */
  private async deletePodObject(name: string, namespace: string): Promise<void> {
    const core = this.options.kubeConfig.makeApiClient(k8s.CoreV1Api);
    for (let attempt = 0; ; attempt++) {
      try {
        await core.deleteNamespacedPod({ name, namespace, gracePeriodSeconds: 0 });
        return;
      } catch (err) {
        if (err instanceof k8s.ApiException && err.code === 404) return;
        if (attempt >= 120) throw err;
        await new Promise((r) => setTimeout(r, 500));
      }
    }
  }
}
