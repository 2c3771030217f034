import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { describe, it } from 'node:test';
import * as protoLoader from '@grpc/proto-loader';
import { encodeCniArgs, type CniArgsMessage } from './cnirpc.js';
import { beginMessage, endMessage, finish, protoBuffer, putString, readFields } from './protobuf.js';

/** coild's own decoder of CNIArgs: proto-loader over proto/cnirpc.proto, as grpc-server.ts loads it. */
const definition = protoLoader.loadSync('cnirpc.proto', {
  keepCase: true, longs: String, enums: Number, defaults: true, arrays: true, objects: true,
  includeDirs: [fileURLToPath(new URL('../../../proto/', import.meta.url))],
});
const add = (definition['pkg.cnirpc.CNI'] as Record<string, { requestDeserialize: (b: Buffer) => unknown }>).Add!;

describe('encodeCniArgs', () => {
  const long = (n: number, c = 'x'): string => c.repeat(n);
  const cases: [string, CniArgsMessage][] = [
    ['short ASCII', {
      containerId: 'c1', netns: '/var/run/netns/p', ifname: 'eth0', args: { K8S_POD_NAME: 'p', K8S_POD_NAMESPACE: 'ns' }, path: '/opt/cni/bin',
      stdinData: new TextEncoder().encode('{"cniVersion":"1.0.0"}'), ips: [], interfaces: {}, validAttachments: [],
    }],
    ['lengths over 127 and 16 383 bytes, in fields and in map entries, multi-byte UTF-8', {
      containerId: long(200, 'a'), netns: long(20_000, 'n'), ifname: 'eth0', args: { K8S_POD_NAME: long(130, 'é'), K8S_POD_NAMESPACE: '日本語🙂', IS_CHAINED: 'true' },
      path: '', stdinData: new Uint8Array(300).fill(7), ips: ['10.64.0.3', 'fd00::3'], interfaces: { eth0: true, [long(140)]: false },
      validAttachments: [{ containerId: long(129, 'b'), ifname: 'eth0' }, { containerId: 'c2', ifname: '' }],
    }],
    ['empty values are left out, as proto3 does', {
      containerId: '', netns: '', ifname: '', args: { EMPTY: '' }, path: '', stdinData: new Uint8Array(0), ips: [], interfaces: {}, validAttachments: [],
    }],
  ];
  for (const [name, m] of cases) {
    it(`is what coild's decoder reads back: ${name}`, () => {
      const got = add.requestDeserialize(Buffer.from(encodeCniArgs(m))) as Record<string, unknown>;
      assert.deepEqual({ ...got, stdin_data: new Uint8Array(got.stdin_data as Buffer) }, {
        container_id: m.containerId, netns: m.netns, ifname: m.ifname, args: { ...m.args }, path: m.path, stdin_data: m.stdinData,
        ips: m.ips, interfaces: { ...m.interfaces },
        valid_attachments: m.validAttachments.map((a) => ({ container_id: a.containerId, ifname: a.ifname })),
      });
    });
  }
});

describe('ProtoBuffer', () => {
  it('writes an embedded message in place and moves it when its length needs more than one byte', () => {
    for (const n of [0, 1, 127, 128, 16_383, 16_384, 70_000]) {
      const b = protoBuffer(n + 64);
      const at = beginMessage(b, 3);
      putString(b, 1, 'y'.repeat(n));
      endMessage(b, at);
      putString(b, 2, 'after');
      const [outer, after] = readFields(finish(b));
      assert.equal(outer?.field, 3);
      const inner = readFields(outer!.value as Uint8Array);
      assert.equal(inner.length, n === 0 ? 0 : 1, `n=${n}`);
      if (n > 0) assert.equal((inner[0]!.value as Uint8Array).length, n);
      assert.deepEqual([after?.field, new TextDecoder().decode(after!.value as Uint8Array)], [2, 'after']);
    }
  });
});
