import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { access } from 'node:fs/promises';
import { probeFeatures } from './features.js';
import { IpRunner } from './iproute2/ip-runner.js';
import { netnsSkipReason } from '../../test/netns/test-netns.js';
import { prerequisite } from '../../test/support/prerequisite.js';

describe('probeFeatures', { skip: prerequisite(netnsSkipReason()) }, () => {
  test('reports booleans for each feature and finds veth, which coil cannot work without', async () => {
    const f = await probeFeatures(new IpRunner());
    for (const v of Object.values(f)) assert.equal(typeof v, 'boolean');
    assert.equal(f.veth, true);
    assert.equal(f.ipv6, await access('/proc/sys/net/ipv6').then(() => true, () => false));
    console.log(`# kernel features here: ${JSON.stringify(f)}`);
  });

  test('leaves no probe link behind in this netns', async () => {
    const ip = new IpRunner();
    await probeFeatures(ip);
    const links = await ip.json<Array<{ ifname: string }>>(['link', 'show']);
    assert.ok(!links.some((l) => l.ifname.startsWith('probe')));
  });
});
