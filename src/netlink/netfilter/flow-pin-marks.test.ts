import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { flowPinIptablesRules, flowPinNftScript } from './flow-pin-marks.js';

describe('flow pin marks', () => {
  test('nftables: the table is replaced whole: a map from the link to its mark for TCP with ct mark 0, the restore of the range', () => {
    assert.equal(flowPinNftScript(4, [{ name: 'fou4_0a400007', mark: 0x636f0001 }, { name: 'fou4_0a400008', mark: 0x636f0002 }]), [
      'add table ip coil-flow-pin', 'delete table ip coil-flow-pin', 'add table ip coil-flow-pin',
      'add chain ip coil-flow-pin postrouting { type filter hook postrouting priority mangle; policy accept; }',
      'add chain ip coil-flow-pin output { type route hook output priority mangle; policy accept; }',
      'add rule ip coil-flow-pin postrouting meta l4proto tcp ct mark 0 ct mark set oifname map { "fou4_0a400007" : 0x636f0001, "fou4_0a400008" : 0x636f0002 } comment "coil-flow-pin"',
      'add rule ip coil-flow-pin output ct mark & 0xffff0000 == 0x636f0000 meta mark set ct mark comment "coil-flow-pin-restore"', ''].join('\n'));
    assert.equal(flowPinNftScript(6, []), 'add table ip6 coil-flow-pin\ndelete table ip6 coil-flow-pin\n');
  });

  test('iptables: one set rule per link in POSTROUTING, one restore in OUTPUT; none without links', () => {
    assert.deepEqual(flowPinIptablesRules([{ name: 'fou6_1', mark: 0x636f0003 }]).map((r) => `-t ${r.table} -A ${r.chain} ${r.spec.join(' ')}`), [
      '-t mangle -A POSTROUTING -o fou6_1 -p tcp -m connmark --mark 0 -j CONNMARK --set-mark 0x636f0003',
      '-t mangle -A OUTPUT -m connmark --mark 0x636f0000/0xffff0000 -j CONNMARK --restore-mark',
    ]);
    assert.deepEqual(flowPinIptablesRules([]), []);
  });

  test('a mark outside the range, or a name nft or iptables cannot take, is refused', () => {
    for (const l of [{ name: 'fou4_x', mark: 3 }, { name: 'fou4_x', mark: 0x636f0000 }, { name: 'a b', mark: 0x636f0001 }, { name: 'x'.repeat(16), mark: 0x636f0001 }]) {
      assert.throws(() => flowPinNftScript(4, [l]), TypeError, JSON.stringify(l));
    }
  });
});
