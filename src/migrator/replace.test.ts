import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { V1Pod } from '@kubernetes/client-node';
import type { AddressBlock } from '../api/v2/addressblock.js';
import { podsOnReserved } from './replace.js';

const block = (ipv4: string): AddressBlock => ({ metadata: { name: ipv4 }, index: 0, ipv4 });
const pod = (name: string, ip: string | undefined, extra: { hostNetwork?: boolean; phase?: string; terminating?: boolean; node?: string } = {}): V1Pod => ({
  metadata: { name, namespace: 'ns', ...(extra.terminating && { deletionTimestamp: new Date(0) }) },
  spec: { containers: [], ...(extra.node !== '' && { nodeName: extra.node ?? 'n1' }), ...(extra.hostNetwork && { hostNetwork: true }) },
  status: { phase: extra.phase ?? 'Running', ...(ip && { podIP: ip, podIPs: [{ ip }] }) },
});

describe('podsOnReserved', () => {
  const reserved = [block('10.64.0.0/27'), block('172.19.0.1/32')];

  it('selects running pods whose IP lies in a reserved block, sorted by namespace/name', () => {
    const pods = [pod('z', '10.64.0.31'), pod('a', '172.19.0.1'), pod('v2', '10.64.0.32'), pod('none', undefined)];
    assert.deepEqual(podsOnReserved(pods, reserved).map((p) => p.metadata!.name), ['a', 'z']);
  });

  it('leaves out hostNetwork, finished and unbound pods', () => {
    const pods = [pod('h', '10.64.0.1', { hostNetwork: true }), pod('s', '10.64.0.2', { phase: 'Succeeded' }), pod('f', '10.64.0.3', { phase: 'Failed' }), pod('u', '10.64.0.4', { node: '' })];
    assert.deepEqual(podsOnReserved(pods, reserved), []);
  });

  it('leaves terminating pods out of what to replace, but counts them as users of a block', () => {
    const pods = [pod('t', '10.64.0.5', { terminating: true })];
    assert.deepEqual(podsOnReserved(pods, reserved), []);
    assert.deepEqual(podsOnReserved(pods, reserved, { includeTerminating: true }).map((p) => p.metadata!.name), ['t']);
  });
});
