/**
 * Regression guard on what a node pays for coild: on a fresh real-node lab (3 nodes, coil
 * installed with helm from the image built here, nothing but coil's pods), coild's idle working
 * set — its container's memory cgroup read as the kubelet reads it (hack/lab/container-memory.ts)
 * — must stay within 10 % of the figure docs/performance.md publishes ("Published figures"), read
 * from the doc at run time. A change that makes coild bigger fails here until its figure is
 * re-measured (`hack/bench/lab-footprint.ts`) and published. Not a timing: memory after the same
 * quiet time as the bench's idle reading.
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Cluster } from '../../hack/lab/cluster.js';
import { containerMemory, programPids, PROGRAMS } from '../../hack/lab/container-memory.js';
import { GUARD_MARGIN, IDLE_SETTLE_S, publishedFigure } from '../../hack/bench/footprint-doc.js';
import { REPO_ROOT } from '../envtest/control-plane.js';
import { prerequisite } from '../support/prerequisite.js';

const isRoot = process.getuid?.() === 0;
const MB = 1024 * 1024;

describe("coild's idle working set on the real-node lab (regression guard)", { skip: prerequisite(isRoot ? undefined : 'the lab needs root (namespaces, cgroups, mounts)') }, () => {
  let cluster: Cluster;
  before(async () => {
    cluster = await Cluster.up({ nodes: 3, log: (m) => console.log(`lab: ${m}`) });
  });
  after(async () => {
    await cluster?.stop();
  });

  test(`every coild's idle working set is within ${Math.round((GUARD_MARGIN - 1) * 100)} % of the figure docs/performance.md publishes`, async () => {
    const published = publishedFigure(await readFile(join(REPO_ROOT, 'docs/performance.md'), 'utf8'), 'coild', 'idle');
    const limit = published.workingSetMb * GUARD_MARGIN;
    await new Promise((r) => setTimeout(r, IDLE_SETTLE_S * 1000));
    for (const node of cluster.nodes) {
      const pids = await programPids(node.name, PROGRAMS.coild);
      assert.equal(pids.length, 1, `one coild process on ${node.name}`);
      const m = await containerMemory(pids[0]!);
      const ws = m.workingSet / MB;
      console.log(`coild on ${node.name}: working set ${ws.toFixed(1)} MB (RSS ${(m.rss / MB).toFixed(1)} MB), published ${published.workingSetMb} MB, limit ${limit.toFixed(1)} MB`);
      assert.ok(ws <= limit, `coild on ${node.name}: idle working set ${ws.toFixed(1)} MB exceeds the published ${published.workingSetMb} MB by more than ${Math.round((GUARD_MARGIN - 1) * 100)} % (limit ${limit.toFixed(1)} MB); re-measure with hack/bench/lab-footprint.ts and publish, or find what grew`);
    }
  });
});
