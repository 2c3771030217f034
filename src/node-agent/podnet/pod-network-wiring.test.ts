import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { formatBatchLine } from '../../netlink/iproute2/ip-runner.js';
import { formatRequest } from '../../netlink/iproute2/rt-format.js';
import type { RtRequest } from '../../netlink/rt-request.js';

/** A request in iproute2 words (rt-format.ts), as `ip -batch` would read it. */
const text = (r: RtRequest): string => formatBatchLine(formatRequest(r));
import { validateSetup } from './pod-network-validate.js';
import { hostWiring, podWiring } from './pod-network-wiring.js';

const v = validateSetup('/run/netns/p', {
  containerId: 'c1', ifname: 'eth0', pool: 'default', ipv4: '10.0.0.5', ipv6: 'fd00:0::5', hostIPv4: '192.168.0.1', hostIPv6: 'fd01::1',
});

describe('pod network wiring (docs/compatibility.md, "Pod network setup")', () => {
  test('host batch: veth into the pod netns, alias, gateway addresses, table-116 routes with proto 30', () => {
    const lines = hostWiring(v, { hostIfname: 'vethabc', netnsPath: '/run/netns/p', mac: '02:00:00:00:00:01', podMac: '02:00:00:00:00:02', podTableId: 116, protocolId: 30, mtuBytes: 1450 });
    assert.deepEqual(lines.map(text), [
      'link add vethabc mtu 1450 address 02:00:00:00:00:01 type veth peer name eth0 mtu 1450 address 02:00:00:00:00:02 netns /run/netns/p',
      'link set dev vethabc alias COIL:default:c1:eth0 up',
      'addr add 192.168.0.1/32 dev vethabc',
      'addr add fe80::1/64 dev vethabc nodad',
      'addr add fd01::1/128 dev vethabc nodad',
      'route add 10.0.0.5/32 dev vethabc scope link proto 30 table 116',
      'route add fd00::5/128 dev vethabc proto 30 table 116',
    ]);
  });

  test('pod batch: link up, /32 and /128, node IP as IPv4 gateway, fe80::1 as IPv6 gateway', () => {
    assert.deepEqual(podWiring(v).map(text), [
      'link set dev eth0 up',
      'addr add 10.0.0.5/32 dev eth0',
      'addr add fd00::5/128 dev eth0 nodad',
      'route add 192.168.0.1/32 dev eth0 scope link',
      'route add default via 192.168.0.1 dev eth0',
      'route add ::/0 via fe80::1 dev eth0',
    ]);
  });
});
