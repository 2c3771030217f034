import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { NetlinkError, classifyMessage, isNetlinkErrno } from './netlink-error.js';

describe('netlink-error', () => {
  test('classifyMessage recognises iproute2 messages', () => {
    assert.equal(classifyMessage('RTNETLINK answers: File exists'), 'EEXIST');
    assert.equal(classifyMessage('Cannot find device "veth0"'), 'ENODEV');
    assert.equal(classifyMessage('Device "veth0" does not exist.'), 'ENODEV');
    assert.equal(classifyMessage('RTNETLINK answers: No such process'), 'ESRCH');
    assert.equal(classifyMessage('Error: ipv4: FIB table does not exist.'), 'ENOENT');
    assert.equal(classifyMessage('Dump was interrupted and may be inconsistent.'), 'EINTR');
    assert.equal(classifyMessage('RTNETLINK answers: Device or resource busy'), 'EBUSY');
    assert.equal(classifyMessage('Error: Unknown device type.'), 'EOPNOTSUPP'); // no ipip/ip6tnl in this kernel
    assert.equal(classifyMessage('Error: Invalid source port.'), undefined);
  });
  test('NetlinkError keeps the command and puts stderr in cause', () => {
    const e = new NetlinkError('m', { argv: ['ip', '-batch', '-'], command: 'ip link del x', stderr: 'RTNETLINK answers: Device or resource busy\n', exitCode: 1, errno: 'EBUSY' });
    assert.equal((e.cause as Error).message, 'RTNETLINK answers: Device or resource busy');
    assert.equal(e.isTransient, true);
    assert.ok(isNetlinkErrno(e, 'EBUSY', 'EAGAIN'));
    assert.ok(!isNetlinkErrno(new Error('x'), 'EBUSY'));
  });
});
