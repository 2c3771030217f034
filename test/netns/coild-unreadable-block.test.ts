/**
 * Issue 25 item 8 on a netns node with the real apiserver, controller and coild: a block whose
 * ipv6 Coil's controller wrote in IPv4 form (pool `::ffff:10.9.0.0/120` → block `10.9.0.0/29`) is
 * read as Coil's coild reads it, and a block coild cannot read is skipped and reported — an Event
 * on it, `unreadableBlocks` in `GET /ipam`, the gauge — while the node's other blocks serve ADDs.
 * Root only; skipped with the reason otherwise.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { FIN_COIL, LABEL_NODE, LABEL_POOL, LABEL_RESERVED } from '../../src/api/v2/keys.js';
import { Kinds } from '../../src/api/v2/kinds.js';
import { eventually } from '../envtest/control-plane.js';
import { NodeLab, labLogsOnFailure, labSkipReason, type LabNode } from './node-lab.js';
import { prerequisite } from '../support/prerequisite.js';

describe('coild with a block it cannot read', { skip: prerequisite(labSkipReason()) }, () => {
  let lab: NodeLab;
  let node: LabNode;
  const printLogsIfFailed = labLogsOnFailure();

  before(async () => {
    lab = await NodeLab.start();
    await lab.createPool('default', { subnets: [{ ipv4: '10.100.0.0/24' }], blockSizeBits: 5 });
    await lab.createPool('mapped', { subnets: [{ ipv6: '::ffff:10.9.0.0/120' }], blockSizeBits: 3 });
    await lab.createNamespace('lab');
    node = await lab.addNode('node-a', '10.250.0.1');
    const block = (pool: string, index: number, cidrs: { ipv4?: string; ipv6?: string }, labels: Record<string, string> = {}) => lab.admin.create(Kinds.AddressBlock, {
      metadata: { name: `${pool}-${index}`, labels: { [LABEL_POOL]: pool, [LABEL_NODE]: node.name, ...labels }, finalizers: [FIN_COIL] }, index, ...cidrs,
    });
    // As Coil's controller writes it; reserved, so coild keeps (and exports) it though no pod uses it.
    await block('mapped', 0, { ipv6: '10.9.0.0/29' }, { [LABEL_RESERVED]: 'true' });
    await block('default', 6, { ipv4: '10.100.0.192/27', ipv6: 'fd00::/120' }); // sizes differ: unreadable
    await block('default', 7, { ipv4: 'not-a-cidr' }); // unreadable
    await lab.startCoild(node, ['--low-water-mark=0', '--block-release-grace=1h']);
  });
  after(async () => {
    await printLogsIfFailed(lab);
    await lab?.stop();
  });

  it('reads the mapped block, skips and reports the unreadable ones, and serves ADDs from the others', async () => {
    const snap = await lab.snapshot(node);
    const mapped = snap.blocks.find((b) => b.name === 'mapped-0');
    assert.deepEqual([mapped?.size, mapped?.ipv6], [8, '10.9.0.0/29'], 'the IPv4-form ipv6 is 8 addresses, as Coil reads it');
    assert.deepEqual(snap.unreadableBlocks.map((b) => b.name), ['default-6', 'default-7']);
    const t119 = await lab.ipJson<{ dst: string }[]>(node.ns, ['-6', 'route', 'show', 'table', '119']);
    assert.ok(t119.some((r) => r.dst === '::ffff:10.9.0.0/125'), `exported as the IPv4-mapped prefix: ${JSON.stringify(t119)}`);
    assert.deepEqual((await lab.blocksOf(node)).filter((n) => n.startsWith('default-')), ['default-6', 'default-7'], 'unreadable blocks are never released by coild');
    assert.match(snap.unreadableBlocks[1]!.reason, /not-a-cidr/);
    const pod = await lab.createPod(node, 'lab', 'web');
    const r = await lab.runCoil(node, 'ADD', pod);
    assert.equal(r.code, 0, r.stdout);
    assert.match(r.stdout, /10\.100\.0\./);
    await eventually(async () => {
      const res = await lab.cp.request('GET', '/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3Ddefault-7');
      return (JSON.parse(res.body) as { items: { reason: string }[] }).items.some((e) => e.reason === 'UnreadableBlock');
    });
    const metrics = await (await fetch(`http://127.0.0.1:${node.metricsPort}/metrics`)).text();
    assert.match(metrics, /coil_coild_unreadable_blocks\{pool="default"\} 2/);
  });
});
