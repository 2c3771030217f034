/**
 * coild cleans up the BlockRequests it consumed, as Coil's coild does, so none is left behind under
 * a controller that — like Coil's coil-ipam-controller — answers requests and never deletes them
 * (here ours with `--blockrequest-ttl=0`). Root only; skipped with the reason otherwise.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Kinds } from '../../src/api/v2/kinds.js';
import { eventually } from '../envtest/control-plane.js';
import { NodeLab, labLogsOnFailure, labSkipReason, type LabNode } from './node-lab.js';
import { prerequisite } from '../support/prerequisite.js';

describe('coild under a controller that never deletes BlockRequests', { skip: prerequisite(labSkipReason()) }, () => {
  let lab: NodeLab;
  let node: LabNode;
  const printLogsIfFailed = labLogsOnFailure();

  before(async () => {
    lab = await NodeLab.start({ controllerArgs: ['--blockrequest-ttl=0'] });
    // Blocks of 2 addresses: 5 pods need 3 blocks, so 3 BlockRequests at least.
    await lab.createPool('default', { subnets: [{ ipv4: '10.110.0.0/24' }], blockSizeBits: 1 });
    await lab.createNamespace('lab');
    node = await lab.addNode('node-br', '10.250.3.1');
    await lab.startCoild(node, ['--low-water-mark=0', '--cooling-period=0s']);
  });
  after(async () => {
    await printLogsIfFailed(lab);
    await lab?.stop();
  });

  it('every request is answered and then deleted by coild; none is left', async () => {
    for (let i = 0; i < 5; i++) {
      const pod = await lab.createPod(node, 'lab', `p${i}`);
      const r = await lab.runCoil(node, 'ADD', pod);
      assert.equal(r.code, 0, r.stdout);
    }
    assert.ok((await lab.blocksOf(node)).length >= 3, 'the pods needed several blocks');
    await eventually(async () => (await lab.admin.list(Kinds.BlockRequest)).length === 0, { timeoutMs: 15_000 });
  });
});
