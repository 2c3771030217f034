import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { PluginError } from './plugin-error.js';
import { convertResult, decodeResult, type CniResultJson } from './result.js';

/** A result as coild produces it: CNI 1.1.0, dual stack, with 1.1-only fields. */
const COILD_RESULT: CniResultJson = {
  cniVersion: '1.1.0',
  interfaces: [{ name: 'eth0', mac: '0a:58:0a:40:00:05', mtu: 1500, sandbox: '/var/run/netns/cni-1' }],
  ips: [
    { address: '10.64.0.5/32', gateway: '10.64.0.1', interface: 0 },
    { address: 'fd02::5/128', interface: 0 },
  ],
  routes: [{ dst: '0.0.0.0/0', gw: '10.64.0.1', mtu: 1400 }],
  dns: { nameservers: ['10.96.0.10'] },
};

describe('convertResult', () => {
  it('1.1.0 is printed unchanged', () => {
    assert.deepEqual(convertResult(COILD_RESULT, '1.1.0'), COILD_RESULT);
  });

  it('1.0.0 changes only cniVersion', () => {
    assert.deepEqual(convertResult(COILD_RESULT, '1.0.0'), { ...COILD_RESULT, cniVersion: '1.0.0' });
  });

  it('0.4.0 adds version "4"/"6" to each IP and keeps only 0.4.0 fields', () => {
    assert.deepEqual(convertResult(COILD_RESULT, '0.4.0'), {
      cniVersion: '0.4.0',
      interfaces: [{ name: 'eth0', mac: '0a:58:0a:40:00:05', sandbox: '/var/run/netns/cni-1' }],
      ips: [
        { version: '4', address: '10.64.0.5/32', gateway: '10.64.0.1', interface: 0 },
        { version: '6', address: 'fd02::5/128', interface: 0 },
      ],
      routes: [{ dst: '0.0.0.0/0', gw: '10.64.0.1' }],
      dns: { nameservers: ['10.96.0.10'] },
    });
  });

  it('0.3.1 has the 0.4.0 shape', () => {
    const r = convertResult(COILD_RESULT, '0.3.1');
    assert.equal(r.cniVersion, '0.3.1');
    assert.deepEqual(r.ips?.map((ip) => ip.version), ['4', '6']);
  });

  it('a 0.4.0 result converted to 1.0.0 loses the version fields', () => {
    const v04 = convertResult(COILD_RESULT, '0.4.0');
    const back = convertResult(v04, '1.0.0');
    assert.ok(back.ips?.every((ip) => !('version' in ip)));
  });

  it('an empty result stays empty (egress-only coild)', () => {
    assert.deepEqual(convertResult({ cniVersion: '1.1.0' }, '0.4.0'), { cniVersion: '0.4.0' });
  });

  it('an unsupported version is code 1', () => {
    assert.throws(() => convertResult(COILD_RESULT, '0.2.0'), (e: unknown) => e instanceof PluginError && e.code === 1);
  });
});

describe('decodeResult', () => {
  it('decodes coild JSON bytes', () => {
    assert.deepEqual(decodeResult(Buffer.from(JSON.stringify(COILD_RESULT))), COILD_RESULT);
  });

  it('non-JSON is code 6', () => {
    assert.throws(() => decodeResult(Buffer.from('<html>')), (e: unknown) => e instanceof PluginError && e.code === 6);
  });

  it('ips that is not an array is code 6', () => {
    assert.throws(() => decodeResult(Buffer.from('{"ips":{}}')), (e: unknown) => e instanceof PluginError && e.code === 6);
  });
});
