import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { rt } from '../rt-request.js';
import { buildFouPortRequest, decodeFouPort, fouDumpBody, getFamilyBody, parseFamilyId, type FouPortRequest } from './genetlink.js';

const hex = (b: Uint8Array): string => Buffer.from(b).toString('hex');

describe('genetlink: the fou family', () => {
  test('FOU_CMD_ADD carries what `ip fou add port 5555 ipproto 4` sends: port big-endian, type direct, AF_INET, ipproto', () => {
    const m = buildFouPortRequest(rt.fouPortAdd({ family: 4, port: 5555, ipproto: 4 }) as FouPortRequest, 7, 0x1a);
    assert.equal(hex(m), [
      '34000000', '1a00', '0500', '07000000', '00000000', // nlmsghdr: 52 bytes, type = family id, REQUEST|ACK, seq 7
      '01010000', // genlmsghdr: FOU_CMD_ADD, version 1
      '0600' + '0100' + '15b3' + '0000', // FOU_ATTR_PORT 5555 (0x15b3, network order)
      '0500' + '0400' + '01' + '000000', // FOU_ATTR_TYPE FOU_ENCAP_DIRECT
      '0500' + '0200' + '02' + '000000', // FOU_ATTR_AF AF_INET
      '0500' + '0300' + '04' + '000000', // FOU_ATTR_IPPROTO 4
    ].join(''));
    const del = buildFouPortRequest(rt.fouPortDel({ family: 6, port: 5555, ipproto: 41 }) as FouPortRequest, 8, 0x1a);
    assert.equal(del[16], 2); // FOU_CMD_DEL
    assert.equal(del[16 + 4 + 8 + 8 + 4], 10); // AF_INET6
    assert.equal(del[16 + 4 + 8 + 8 + 8 + 4], 41);
  });

  test('refuses a port or ipproto iproute2 refuses', () => {
    assert.throws(() => buildFouPortRequest({ kind: 'fou-port', verb: 'add', family: 4, port: 0, ipproto: 4 }, 1, 0x1a), RangeError);
    assert.throws(() => buildFouPortRequest({ kind: 'fou-port', verb: 'add', family: 4, port: 65536, ipproto: 4 }, 1, 0x1a), RangeError);
    assert.throws(() => buildFouPortRequest({ kind: 'fou-port', verb: 'add', family: 4, port: 5555, ipproto: 0 }, 1, 0x1a), RangeError);
  });

  test('CTRL_CMD_GETFAMILY asks for "fou" by name; the answer\'s CTRL_ATTR_FAMILY_ID is read', () => {
    assert.equal(hex(getFamilyBody('fou')), '03010000' + '0800' + '0200' + '666f7500');
    // An answer: genlmsghdr, CTRL_ATTR_FAMILY_NAME "fou", CTRL_ATTR_FAMILY_ID 0x1a.
    const answer = Buffer.from('01020000' + '0800' + '0200' + '666f7500' + '0600' + '0100' + '1a00' + '0000', 'hex');
    assert.equal(parseFamilyId(answer), 0x1a);
    assert.equal(parseFamilyId(Buffer.from('01020000', 'hex')), undefined);
  });

  test('a FOU_CMD_GET answer decodes as `ip -json fou show` prints it', () => {
    assert.equal(hex(fouDumpBody()), '03010000');
    const entry = (af: string, ipproto: string) => Buffer.from('01010000' + '0600' + '0100' + '15b3' + '0000' + '0500' + '0200' + af + '000000'
      + '0500' + '0300' + ipproto + '000000' + '0500' + '0400' + '01' + '000000', 'hex');
    assert.deepEqual(decodeFouPort(entry('02', '04')), { port: 5555, ipproto: 4, family: 'inet' });
    assert.deepEqual(decodeFouPort(entry('0a', '29')), { port: 5555, ipproto: 41, family: 'inet6' });
  });
});
