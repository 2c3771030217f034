/**
 * The wiring of one pod interface as two lists of typed rtnetlink requests, one per side, exactly
 * as Coil's `SetupIPAM` (docs/compatibility.md#pod-network-setup) except for the IPv6 gateway (see
 * RtnetlinkPodNetwork). Pure: builds requests, runs nothing. (Below, each request in iproute2 words.)
 */
import { rt, type RtRequest } from '../../netlink/rt-request.js';
import { IPV6_GATEWAY } from './pod-network.js';
import type { ValidSetup } from './pod-network-validate.js';

/** Host-side parameters of {@link hostWiring}. */
export interface HostWiringOptions {
  hostIfname: string;
  /** Pod netns file path; the veth peer is created directly in it (iproute2 opens paths with `/`). */
  netnsPath: string;
  /** MAC of the host veth. */
  mac: string;
  /** MAC of the pod-side veth. */
  podMac: string;
  podTableId: number;
  protocolId: number;
  /** MTU of both ends; undefined = kernel default. */
  mtuBytes?: number;
}

/**
 * Host side. Request 1 is `link add`: a failure there created nothing, a failure later leaves a
 * veth the caller must delete.
 *   link add <host> … type veth peer name <ifname> … netns <pod>
 *   link set dev <host> alias COIL:<pool>:<containerID>:<ifname> up
 *   addr add <nodeIPv4>/32 dev <host>                       (IPv4)
 *   addr add fe80::1/64 dev <host> nodad                    (IPv6 gateway)
 *   addr add <nodeIPv6>/128 dev <host> nodad                (IPv6, when the node has one)
 *   route add <podIPv4>/32 dev <host> scope link proto 30 table 116
 *   route add <podIPv6>/128 dev <host> proto 30 table 116
 */
export function hostWiring(v: ValidSetup, o: HostWiringOptions): RtRequest[] {
  const dev = o.hostIfname;
  const common = { dev, table: o.podTableId, protocol: o.protocolId };
  return [
    rt.veth({ name: dev, peerName: v.ifname, peerNetns: o.netnsPath, mac: o.mac, peerMac: o.podMac, ...(o.mtuBytes ? { mtuBytes: o.mtuBytes } : {}) }),
    rt.linkSet(dev, { alias: v.alias, up: true }),
    ...(v.ipv4 && v.hostIPv4 ? [rt.addrAdd({ cidr: `${v.hostIPv4}/32`, dev })] : []),
    ...(v.ipv6 ? [rt.addrAdd({ cidr: `${IPV6_GATEWAY}/64`, dev, isNoDad: true })] : []),
    ...(v.ipv6 && v.hostIPv6 ? [rt.addrAdd({ cidr: `${v.hostIPv6}/128`, dev, isNoDad: true })] : []),
    ...(v.ipv4 ? [rt.routeAdd({ ...common, dst: `${v.ipv4}/32`, scope: 'link' })] : []),
    ...(v.ipv6 ? [rt.routeAdd({ ...common, dst: `${v.ipv6}/128` })] : []),
  ];
}

/**
 * Pod side, applied inside the pod netns after {@link hostWiring}:
 *   link set dev <ifname> up
 *   addr add <podIPv4>/32 dev <ifname>
 *   addr add <podIPv6>/128 dev <ifname> nodad
 *   route add <nodeIPv4>/32 dev <ifname> scope link
 *   route add default via <nodeIPv4> dev <ifname>
 *   route add ::/0 via fe80::1 dev <ifname>
 */
export function podWiring(v: ValidSetup): RtRequest[] {
  const dev = v.ifname;
  return [
    rt.linkSet(dev, { up: true }),
    ...(v.ipv4 ? [rt.addrAdd({ cidr: `${v.ipv4}/32`, dev })] : []),
    ...(v.ipv6 ? [rt.addrAdd({ cidr: `${v.ipv6}/128`, dev, isNoDad: true })] : []),
    ...(v.ipv4 && v.hostIPv4 ? [rt.routeAdd({ dst: `${v.hostIPv4}/32`, dev, scope: 'link' }), rt.routeAdd({ dst: 'default', via: v.hostIPv4, dev })] : []),
    ...(v.ipv6 ? [rt.routeAdd({ dst: '::/0', via: IPV6_GATEWAY, dev })] : []),
  ];
}
