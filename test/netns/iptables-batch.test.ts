/**
 * A shape of iptables rules synced whole (flow pins here; originating-only's connmark goes the same
 * way) is one `<command>-save` read and at most one `<command>-restore --noflush` batch per sync,
 * with iptables-nft and iptables-legacy, in a real netns: the rules come out as wanted, a sync
 * that changes nothing starts no restore, a shrunk shape loses its stale rules, and a duplicate
 * (another program's append of the same rule) goes. Before, each rule was a `-C` and an `-A` or
 * `-D` process (with two pinned links, 7 processes a sync). Root only; skipped with the reason otherwise.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { IpRunner } from '../../src/netlink/iproute2/ip-runner.js';
import { FLOW_PIN_MARK_BASE, syncFlowPinsIptables } from '../../src/netlink/netfilter/flow-pin-marks.js';
import { readIptablesRules, type IptablesCommands } from '../../src/netlink/netfilter/iptables.js';
import { prerequisite } from '../support/prerequisite.js';
import { SpawnCounter } from '../support/spawn-count.js';
import { TestNetnsSet, netnsSkipReason, type TestNetns } from './test-netns.js';

const VARIANTS: ReadonlyArray<{ name: string; commands: IptablesCommands }> = [
  { name: 'iptables-nft', commands: { 4: 'iptables-nft', 6: 'ip6tables-nft' } },
  { name: 'iptables-legacy', commands: { 4: 'iptables-legacy', 6: 'ip6tables-legacy' } },
];

for (const v of VARIANTS) describe(`iptables shapes in one restore batch: ${v.name}`, { skip: prerequisite(netnsSkipReason()) }, () => {
  const ip = new IpRunner();
  const netns = new TestNetnsSet({ ip });
  const spawns = new SpawnCounter();
  let ns: TestNetns;
  before(async () => {
    ns = await netns.create('ipt-batch');
  });
  after(() => netns.cleanup());

  const links = (names: readonly string[]) => names.map((name, i) => ({ name, mark: FLOW_PIN_MARK_BASE + i + 1 }));
  const shape = async (family: 4 | 6) => (await readIptablesRules(ip, 'mangle', { family, netns: ns.path, commands: v.commands })).map((r) => `${r.chain} ${r.text}`);
  const sync = async (family: 4 | 6, names: readonly string[]) => {
    spawns.reset();
    await syncFlowPinsIptables(spawns.ip, family, links(names), { netns: ns.path, commands: v.commands });
    return spawns.argvs.map((a) => a[a.indexOf('--') + 1]);
  };

  for (const family of [4, 6] as const) {
    test(`IPv${family}: one save and one restore per sync that changes something; none when nothing differs; stale and duplicate rules go`, async () => {
      const save = `${v.commands[family]}-save`;
      const restore = `${v.commands[family]}-restore`;
      assert.deepEqual(await sync(family, ['fou4_0a000001', 'fou4_0a000002']), [save, restore]);
      const two = await shape(family);
      assert.equal(two.length, 3, two.join('\n'));
      assert.ok(two.some((r) => r.startsWith('POSTROUTING -o fou4_0a000002 -p tcp')) && two.some((r) => r.startsWith('OUTPUT -m connmark')));
      assert.deepEqual(await sync(family, ['fou4_0a000001', 'fou4_0a000002']), [save], 'nothing differs: no restore');
      assert.deepEqual(await shape(family), two);
      // A duplicate of a wanted rule (appended by hand) and a shrunk shape: one batch fixes both.
      await ip.exec([v.commands[family], '-t', 'mangle', '-A', 'POSTROUTING', '-o', 'fou4_0a000001', '-p', 'tcp', '-m', 'connmark', '--mark', '0',
        '-j', 'CONNMARK', '--set-mark', `0x${(FLOW_PIN_MARK_BASE + 1).toString(16)}`], { netns: ns.path });
      assert.equal((await shape(family)).length, 4);
      assert.deepEqual(await sync(family, ['fou4_0a000001']), [save, restore]);
      assert.deepEqual(await shape(family), two.filter((r) => !r.includes('fou4_0a000002')));
      assert.deepEqual(await sync(family, []), [save, restore]);
      assert.deepEqual(await shape(family), []);
    });
  }
});
