/**
 * kubelet and kube-proxy of a real lab node (v1.36, built by hack/build-node.sh): their
 * configuration and command lines (pure). Each runs inside the node's namespaces and talks to the
 * apiserver through the node's relay at 127.0.0.1:6443 (node-relay in kube-node.ts).
 */
import { CONTAINERD_SOCKET } from './containerd.js';

/** What differs between nodes. */
export interface KubeletSpec {
  readonly nodeName: string;
  readonly nodeIp: string;
  /** The node's cgroup (kubelet's cgroupRoot). */
  readonly cgroupRoot: string;
  /** CA of client certificates (the apiserver's, for `kubectl exec` and logs). */
  readonly clientCaFile: string;
  readonly tlsCertFile: string;
  readonly tlsKeyFile: string;
  /** Pods the node takes (kubelet's default is 110; the lab takes more for its system pods). */
  readonly maxPods: number;
}

/**
 * KubeletConfiguration (JSON, which kubelet reads as YAML) for a lab node. Settings this machine
 * needs, or the lab chooses:
 * - `failCgroupV1: false`, `cgroupDriver: cgroupfs`: the machine has cgroup v1 and no systemd;
 * - `cgroupRoot`: one per node, so nodes never share pod cgroups;
 * - `resolvConf: ""`: pods get no nameserver, so nothing in them resolves names outside the lab;
 * - eviction and image garbage collection effectively off: the disk is shared with other work,
 *   and an image removed from a node could not be pulled back (there is no registry);
 * - authentication by client certificate of the lab's CA only (the apiserver's), authorization
 *   always allow: only the apiserver reaches kubelet, through the lab's own network.
 */
export function kubeletConfig(spec: KubeletSpec): Record<string, unknown> {
  return {
    apiVersion: 'kubelet.config.k8s.io/v1beta1',
    kind: 'KubeletConfiguration',
    failCgroupV1: false,
    cgroupDriver: 'cgroupfs',
    cgroupRoot: spec.cgroupRoot,
    containerRuntimeEndpoint: `unix://${CONTAINERD_SOCKET}`,
    address: spec.nodeIp,
    port: 10250,
    readOnlyPort: 0,
    healthzBindAddress: '127.0.0.1',
    healthzPort: 10248,
    tlsCertFile: spec.tlsCertFile,
    tlsPrivateKeyFile: spec.tlsKeyFile,
    authentication: { anonymous: { enabled: false }, webhook: { enabled: false }, x509: { clientCAFile: spec.clientCaFile } },
    authorization: { mode: 'AlwaysAllow' },
    maxPods: spec.maxPods,
    podLogsDirectory: '/var/log/pods',
    resolvConf: '',
    clusterDomain: 'cluster.local',
    failSwapOn: false,
    serializeImagePulls: false,
    imageGCHighThresholdPercent: 100,
    imageGCLowThresholdPercent: 99,
    evictionHard: { 'memory.available': '10Mi', 'nodefs.available': '1%', 'imagefs.available': '1%', 'nodefs.inodesFree': '1%' },
    // Status every 10 s (the default) but a fast sync of pod changes.
    syncFrequency: '10s',
  };
}

/** kubelet's command line. */
export function kubeletArgv(bin: string, spec: { nodeName: string; nodeIp: string; configFile: string; kubeconfig: string }): string[] {
  return [
    bin,
    `--config=${spec.configFile}`,
    `--kubeconfig=${spec.kubeconfig}`,
    '--root-dir=/var/lib/kubelet',
    `--hostname-override=${spec.nodeName}`,
    `--node-ip=${spec.nodeIp}`,
    '--v=1',
  ];
}

/**
 * kube-proxy's command line, iptables mode. The conntrack flags of 0 leave the kernel's conntrack
 * settings alone: they are not per network namespace, and writing nf_conntrack_max from a node's
 * namespace is refused here.
 */
export function kubeProxyArgv(bin: string, spec: { nodeName: string; kubeconfig: string }): string[] {
  return [
    bin,
    `--kubeconfig=${spec.kubeconfig}`,
    `--hostname-override=${spec.nodeName}`,
    '--proxy-mode=iptables',
    '--conntrack-max-per-core=0',
    '--conntrack-tcp-timeout-established=0',
    '--conntrack-tcp-timeout-close-wait=0',
    '--metrics-bind-address=127.0.0.1:10249',
    '--healthz-bind-address=127.0.0.1:10256',
    '--v=1',
  ];
}
