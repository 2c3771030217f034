import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { IpRunner } from './iproute2/ip-runner.js';
import { LinkReaper } from './link-reaper.js';
import { readLinks } from './link.js';
import { TestNetnsSet, netnsSkipReason, type TestNetns } from '../../test/netns/test-netns.js';
import { prerequisite } from '../../test/support/prerequisite.js';

describe('LinkReaper', () => {
  test('refuses group 0, which holds every ordinary link', () => {
    assert.throws(() => new LinkReaper({ kernel: new IpRunner(), group: 0 }), RangeError);
  });
});

describe('LinkReaper in a real network namespace', { skip: prerequisite(netnsSkipReason()) }, () => {
  const ip = new IpRunner();
  const netns = new TestNetnsSet({ ip });
  let ns: TestNetns;
  before(async () => { ns = await netns.create('reaper'); });
  after(() => netns.cleanup());

  const names = async () => (await readLinks(ip, { netns: ns.path })).map((l) => l.ifname).sort();

  test('retired links are down and flagged at once, then deleted together after the delay', async () => {
    const reaper = new LinkReaper({ kernel: ip, netns: ns.path, delayMs: 20 });
    await ip.batch([0, 1, 2].map((i) => ['link', 'add', `ka${i}`, 'type', 'veth', 'peer', 'name', `kb${i}`]), { netns: ns.path });
    await ip.apply([reaper.retire('ka0'), reaper.retire('ka1')], { netns: ns.path });
    const ka0 = (await readLinks(ip, { netns: ns.path, dev: 'ka0' }))[0];
    assert.ok(ka0 && reaper.isRetired(ka0) && !ka0.flags.includes('UP'));
    reaper.schedule();
    reaper.schedule();
    await new Promise((r) => setTimeout(r, 300));
    assert.deepEqual(await names(), ['ka2', 'kb2', 'lo']);
  });

  test('reap on an empty group succeeds', async () => {
    await new LinkReaper({ kernel: ip, netns: ns.path }).reap();
  });
});
