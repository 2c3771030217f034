import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { formatRequest } from '../iproute2/rt-format.js';
import { rt, type RtRequest } from '../rt-request.js';
import { buildRequest, kernelMessage, parseAcks, RequestError, type ResolveContext } from './rtnetlink.js';
import { NLMSG_ERROR } from './rtnetlink-uapi.js';

const ctx: ResolveContext = {
  ifindex: (name) => ({ h0: 7, eth0: 2 } as Record<string, number>)[name] ?? 0,
  netnsFd: () => 42,
};

/** The rtattrs of a message from `offset`: [type, payload] pairs (not nested). */
function attrs(msg: Uint8Array, offset: number): Array<[number, Buffer]> {
  const b = Buffer.from(msg);
  const out: Array<[number, Buffer]> = [];
  for (let off = offset; off + 4 <= b.length;) {
    const len = b.readUInt16LE(off);
    out.push([b.readUInt16LE(off + 2), b.subarray(off + 4, off + len)]);
    off += (len + 3) & ~3;
  }
  return out;
}

describe('typed requests', () => {
  it('refuse values no request may carry, with EINVAL, before any message is built', () => {
    for (const r of [
      rt.veth({ name: 'h0', peerName: 'p0', peerNetns: 'pod1' }),
      rt.linkSet('a-name-far-too-long', { up: true }),
      rt.addrAdd({ cidr: 'not-an-ip/32', dev: 'h0' }),
      rt.routeAdd({ dst: 'default', dev: 'h0' }),
      rt.routeAdd({ dst: '10.0.0.0/8', via: 'fe80::1', dev: 'h0' }),
      rt.routeAdd({ dst: '10.0.0.0/8', dev: 'h0', protocol: 300 }),
      rt.veth({ name: 'h0', peerName: 'p0', mac: 'zz:00:00:00:00:01' }),
    ] as RtRequest[]) {
      assert.throws(() => buildRequest(r, 1, ctx), (e: unknown) => e instanceof RequestError && e.errno === 22, JSON.stringify(r));
    }
  });

  it('read in iproute2 words (rt-format.ts) as the lines ip -batch takes', () => {
    assert.deepEqual(formatRequest(rt.veth({ name: 'veth0123', peerName: 'eth0', peerNetns: '/run/netns/p', mac: '02:00:00:00:00:01', peerMac: '02:00:00:00:00:02', mtuBytes: 1450 })).join(' '),
      'link add veth0123 mtu 1450 address 02:00:00:00:00:01 type veth peer name eth0 mtu 1450 address 02:00:00:00:00:02 netns /run/netns/p');
    assert.equal(formatRequest(rt.linkSet('veth0123', { up: false, group: 1129269580 })).join(' '), 'link set dev veth0123 down group 1129269580');
    assert.equal(formatRequest(rt.linkDelGroup(1129269580)).join(' '), 'link del group 1129269580');
  });
});

describe('buildRequest', () => {
  it('builds addr add as iproute2 does: RTM_NEWADDR, CREATE|EXCL|ACK, IFA_LOCAL and IFA_ADDRESS', () => {
    const msg = Buffer.from(buildRequest(rt.addrAdd({ cidr: 'fd00::5/128', dev: 'eth0', isNoDad: true }), 9, ctx));
    assert.equal(msg.readUInt32LE(0), msg.length);
    assert.deepEqual([msg.readUInt16LE(4), msg.readUInt16LE(6), msg.readUInt32LE(8)], [20, 0x1 | 0x4 | 0x200 | 0x400, 9]);
    assert.deepEqual([...msg.subarray(16, 20)], [10, 128, 0x02, 0]); // AF_INET6, /128, IFA_F_NODAD, universe
    assert.equal(msg.readUInt32LE(20), 2); // ifindex of eth0
    const a = attrs(msg, 24);
    assert.deepEqual(a.map(([t]) => t), [2, 1]);
    assert.equal(a[0]![1].toString('hex'), 'fd000000000000000000000000000005');
  });

  it('gives a gatewayless route scope link and proto boot by default, and puts big tables in RTA_TABLE', () => {
    const hostRoute = Buffer.from(buildRequest(rt.routeAdd({ dst: '10.64.0.5/32', dev: 'h0', protocol: 30, table: 116 }), 1, ctx));
    assert.deepEqual([...hostRoute.subarray(16, 24)], [2, 32, 0, 0, 116, 30, 253, 1]);
    const viaMain = Buffer.from(buildRequest(rt.routeAdd({ dst: 'default', via: '10.0.0.1', dev: 'eth0' }), 1, ctx));
    assert.deepEqual([...viaMain.subarray(16, 24)], [2, 0, 0, 0, 254, 3, 0, 1]);
    assert.deepEqual(attrs(viaMain, 28).map(([t]) => t), [5, 4]); // RTA_GATEWAY, RTA_OIF; no RTA_DST for default
    const big = Buffer.from(buildRequest(rt.routeAdd({ dst: '10.1.0.0/16', dev: 'h0', table: 1000 }), 1, ctx));
    assert.equal(big[20], 0);
    assert.deepEqual(attrs(big, 28)[0], [15, Buffer.from([0xe8, 0x03, 0, 0])]);
  });

  it('nests the veth peer with its own name, MAC, MTU and netns fd', () => {
    const msg = Buffer.from(buildRequest(rt.veth({ name: 'h0', peerName: 'eth0', peerNetns: '/run/netns/p', mtuBytes: 1400 }), 1, ctx));
    const top = attrs(msg, 32);
    assert.deepEqual(top.map(([t]) => t), [3, 4, 18]); // IFNAME, MTU, LINKINFO
    const info = attrs(top[2]![1], 0);
    assert.deepEqual([info[0]![0], info[0]![1].toString()], [1, 'veth']);
    const peer = attrs(attrs(info[1]![1], 0)[0]![1], 16); // VETH_INFO_PEER: ifinfomsg + attrs
    assert.deepEqual(peer.map(([t, v]) => [t, t === 3 ? v.toString() : v.readUInt32LE(0)]), [[3, 'eth0\0'], [4, 1400], [28, 42]]);
  });

  it('builds a FoU peer link as link_iptnl.c / link_ip6tnl.c do: kind, tunnel ends, ttl, encap fou with ports in network order', () => {
    const v4 = Buffer.from(buildRequest(rt.fouPeer({ name: 'fou4_0a000064', remote: '10.0.0.100', local: '10.0.0.1', ttl: 225, encapSport: 5555, encapDport: 5556 }), 1, ctx));
    assert.deepEqual([v4.readUInt16LE(4), v4.readUInt16LE(6)], [16, 0x1 | 0x4 | 0x200 | 0x400]); // RTM_NEWLINK, CREATE|EXCL|ACK
    const top = attrs(v4, 32);
    assert.deepEqual(top.map(([t]) => t), [3, 18]);
    const info = attrs(top[1]![1], 0);
    assert.deepEqual([info[0]![0], info[0]![1].toString()], [1, 'ipip']);
    const data = Object.fromEntries(attrs(info[1]![1], 0).map(([t, v]) => [t, v.toString('hex')]));
    // PROTO 0 (any), LINK 0, LOCAL, REMOTE, TTL, TOS 0, PMTUDISC 1, FWMARK 0, ENCAP_TYPE 1 (fou), FLAGS 0, SPORT, DPORT (big-endian)
    assert.deepEqual(data, { 9: '00', 1: '00000000', 2: '0a000001', 3: '0a000064', 4: 'e1', 5: '00', 10: '01', 20: '00000000', 15: '0100', 16: '0000', 17: '15b3', 18: '15b4' });
    const v6 = Buffer.from(buildRequest(rt.fouPeer({ name: 'fou6_01234567', mtu: 1452, remote: 'fd00::100', local: 'fd00::1', ttl: 225, encapSport: 0, encapDport: 5555 }), 1, ctx));
    const top6 = attrs(v6, 32);
    assert.deepEqual(top6.map(([t]) => t), [3, 4, 18]);
    const info6 = attrs(top6[2]![1], 0);
    assert.equal(info6[0]![1].toString(), 'ip6tnl');
    const data6 = Object.fromEntries(attrs(info6[1]![1], 0).map(([t, v]) => [t, v.toString('hex')]));
    // PROTO 41 (ip6ip6), ENCAP_LIMIT 4 with FLAGS IGN_ENCAP_LIMIT (encaplimit none), ENCAP_FLAGS CSUM6, SPORT 0 (auto)
    assert.deepEqual([data6[9], data6[6], data6[8], data6[15], data6[16], data6[17], data6[18], data6[4]], ['29', '04', '01000000', '0100', '0200', '0000', '15b3', 'e1']);
    assert.equal(data6[3], 'fd000000000000000000000000000100');
    assert.equal(formatRequest(rt.fouPeer({ name: 'fou6_01234567', mtu: 1452, remote: 'fd00::100', local: 'fd00::1', ttl: 225, encapSport: 0, encapDport: 5555 })).join(' '),
      'link add name fou6_01234567 mtu 1452 type ip6tnl mode ip6ip6 encaplimit none remote fd00::100 local fd00::1 ttl 225 encap fou encap-sport auto encap-dport 5555');
    for (const bad of [
      rt.fouPeer({ name: 'fou4_0a000064', remote: '10.0.0.100', local: 'fd00::1', ttl: 225, encapSport: 0, encapDport: 5555 }),
      rt.fouPeer({ name: 'fou4_0a000064', remote: '10.0.0.100', local: '10.0.0.1', ttl: 225, encapSport: 70000, encapDport: 5555 }),
      rt.fouPeer({ name: 'fou4_0a000064', remote: '10.0.0.100/32', local: '10.0.0.1', ttl: 225, encapSport: 0, encapDport: 5555 }),
    ]) assert.throws(() => buildRequest(bad, 1, ctx), (e: unknown) => e instanceof RequestError && e.errno === 22, JSON.stringify(bad));
  });

  it('builds route replace as ip route replace: CREATE|REPLACE with add\'s defaults', () => {
    const msg = Buffer.from(buildRequest(rt.routeReplace({ dst: '198.51.100.0/24', dev: 'h0', protocol: 30, table: 118 }), 1, ctx));
    assert.deepEqual([msg.readUInt16LE(4), msg.readUInt16LE(6)], [24, 0x1 | 0x4 | 0x100 | 0x400]);
    assert.deepEqual([...msg.subarray(16, 24)], [2, 24, 0, 0, 118, 30, 253, 1]);
    assert.equal(formatRequest(rt.routeReplace({ dst: '198.51.100.0/24', dev: 'h0', protocol: 30, table: 118 })).join(' '), 'route replace 198.51.100.0/24 dev h0 proto 30 table 118');
  });

  it('fails like ip for a missing link: "Cannot find device", ENODEV', () => {
    assert.throws(() => buildRequest(rt.linkSet('nope', { up: true }), 1, ctx),
      (e: unknown) => e instanceof RequestError && e.errno === 19 && e.message === 'Cannot find device "nope"');
  });
});

describe('parseAcks', () => {
  it('reads the errno and sequence of each NLMSG_ERROR, skipping other messages', () => {
    const msg = (type: number, seq: number, error: number): Buffer => {
      const b = Buffer.alloc(36);
      b.writeUInt32LE(36, 0); b.writeUInt16LE(type, 4); b.writeUInt32LE(seq, 8); b.writeInt32LE(error, 16);
      return b;
    };
    const buf = Buffer.concat([msg(NLMSG_ERROR, 3, 0), msg(16, 4, 0), msg(NLMSG_ERROR, 5, -17)]);
    assert.deepEqual(parseAcks(buf), [{ seq: 3, errno: 0 }, { seq: 5, errno: 17 }]);
    assert.throws(() => parseAcks(buf.subarray(0, 60)), RangeError);
    assert.equal(kernelMessage(17), 'RTNETLINK answers: File exists');
  });
});
