/**
 * In-memory PodNetwork for tests of coild's CNI service where real namespaces cannot be used
 * (not root). Same input validation and result shape as RtnetlinkPodNetwork; no kernel.
 */
import { createHash } from 'node:crypto';
import {
  IPV6_GATEWAY, PodNetworkError, hostVethName,
  type PodCheckOptions, type PodNetwork, type PodNetworkEntry, type PodNetworkInitResult,
  type PodNetworkResult, type PodSetupOptions,
} from '../../src/node-agent/podnet/pod-network.js';
import { validateSetup } from '../../src/node-agent/podnet/pod-network-validate.js';

/** A pod the fake has wired, with the netns it was given. */
export interface FakePodEntry extends PodNetworkEntry {
  netnsPath: string;
}

/** {@link PodNetwork} held in a Map keyed `<containerId>:<ifname>`. Not for concurrent mutation checks. */
export class FakePodNetwork implements PodNetwork {
  /** Wired pods, readable by tests. */
  readonly pods = new Map<string, FakePodEntry>();
  private readonly setupFailures: Error[] = [];

  /** Makes the next setup throw `err` (wrapped as a kernel PodNetworkError) and wire nothing. */
  failNextSetup(err: Error): void {
    this.setupFailures.push(err);
  }

  async init(): Promise<PodNetworkInitResult> {
    return { mtuBytes: undefined, addedRuleFamilies: [] };
  }

  async setup(netnsPath: string, options: PodSetupOptions): Promise<PodNetworkResult> {
    const v = validateSetup(netnsPath, options);
    const failure = this.setupFailures.shift();
    if (failure) {
      throw new PodNetworkError(`setup of ${v.containerId}:${v.ifname}: injected`, { kind: 'kernel', containerId: v.containerId, ifname: v.ifname, cause: failure });
    }
    const hostIfname = hostVethName(v.containerId, v.ifname);
    this.pods.set(`${v.containerId}:${v.ifname}`, {
      pool: v.pool, containerId: v.containerId, ifname: v.ifname, hostIfname, netnsPath,
      ...(v.ipv4 ? { ipv4: v.ipv4 } : {}), ...(v.ipv6 ? { ipv6: v.ipv6 } : {}),
    });
    return {
      hostIfname,
      interfaces: [{ name: v.ifname, mac: fakeMac(`${hostIfname}/pod`), sandbox: netnsPath }, { name: hostIfname, mac: fakeMac(hostIfname) }],
      ips: [
        ...(v.ipv4 && v.hostIPv4 ? [{ address: `${v.ipv4}/32`, gateway: v.hostIPv4, interface: 0 as const }] : []),
        ...(v.ipv6 ? [{ address: `${v.ipv6}/128`, gateway: IPV6_GATEWAY, interface: 0 as const }] : []),
      ],
    };
  }

  async check(options: PodCheckOptions): Promise<string[]> {
    const pod = this.pods.get(`${options.containerId}:${options.ifname}`);
    if (pod === undefined) return [`host veth ${hostVethName(options.containerId, options.ifname)} not found`];
    return [options.ipv4, options.ipv6]
      .filter((a): a is string => a !== undefined && a !== pod.ipv4 && a !== pod.ipv6)
      .map((a) => `no route to ${a} via ${pod.hostIfname} in table 116`);
  }

  async destroy(containerId: string, ifname: string): Promise<void> {
    this.pods.delete(`${containerId}:${ifname}`);
  }

  async reap(): Promise<void> {}

  async list(): Promise<PodNetworkEntry[]> {
    return [...this.pods.values()].map(({ netnsPath: _, ...entry }) => entry);
  }

  async inspect(containerId: string, ifname: string, hostIfname?: string): Promise<PodNetworkEntry | undefined> {
    const pod = this.pods.get(`${containerId}:${ifname}`);
    if (pod === undefined || (hostIfname !== undefined && pod.hostIfname !== hostIfname)) return undefined;
    const { netnsPath: _, ...entry } = pod;
    return entry;
  }
}

function fakeMac(seed: string): string {
  const b = createHash('sha1').update(seed).digest().subarray(0, 6);
  b[0] = ((b[0] ?? 0) & 0xfe) | 0x02;
  return [...b].map((x) => x.toString(16).padStart(2, '0')).join(':');
}
