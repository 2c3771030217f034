/**
 * The footprint bench's arithmetic: cAdvisor's working set from a memory cgroup
 * (hack/lab/container-memory.ts) and the published figures read back from docs/performance.md
 * (hack/bench/footprint-doc.ts), which the lab's regression guard compares a run with.
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { parseMemoryStat, workingSet } from '../hack/lab/container-memory.js';
import { publishedFigure, PUBLISHED_HEADING } from '../hack/bench/footprint-doc.js';
import { REPO_ROOT } from './envtest/control-plane.js';

// A cgroup v1 memory.stat of a coild container (abridged from the lab).
const V1_STAT = `cache 1048576
rss 30408704
total_cache 52428800
total_rss 31457280
total_inactive_file 41943040
total_active_file 10485760
`;

test('working set is usage minus total_inactive_file on cgroup v1 (cAdvisor), inactive_file on v2', () => {
  const stat = parseMemoryStat(V1_STAT);
  assert.equal(stat.get('total_rss'), 31457280);
  assert.deepEqual(workingSet(83886080, stat, 1), { workingSet: 83886080 - 41943040, inactiveFile: 41943040 });
  assert.deepEqual(workingSet(1000, parseMemoryStat('anon 500\ninactive_file 300\n'), 2), { workingSet: 700, inactiveFile: 300 });
  // More inactive file than usage (pages charged and uncharged between the two reads): 0, as cAdvisor.
  assert.equal(workingSet(100, parseMemoryStat('total_inactive_file 200'), 1).workingSet, 0);
  assert.throws(() => workingSet(100, parseMemoryStat('rss 5'), 1), /total_inactive_file/);
});

const DOC = `# x
## Footprint
${PUBLISHED_HEADING}

| program | state | working set | RSS | measured |
|---|---|---|---|---|
| coild | idle | **41.5 MB** | 70.2 MB | run 1 |
| coild | after churn 1 | 48.0 MB | 80.0 MB | run 1 |

### Next
| coild | idle | 1.0 MB | 1.0 MB | |
`;

test('a published figure is read from its row of the published table, and only from there', () => {
  assert.deepEqual(publishedFigure(DOC, 'coild', 'idle'), { workingSetMb: 41.5, rssMb: 70.2 });
  assert.deepEqual(publishedFigure(DOC, 'coild', 'after churn 1'), { workingSetMb: 48, rssMb: 80 });
  assert.throws(() => publishedFigure(DOC, 'coil-egress', 'idle'), /0 rows/);
  assert.throws(() => publishedFigure('# nothing\n', 'coild', 'idle'), /no "### Published figures"/);
  assert.throws(() => publishedFigure(DOC.replace('**41.5 MB**', 'n/a'), 'coild', 'idle'), /not "N MB"/);
});

test("docs/performance.md publishes coild's idle working set (the lab guard's reference)", async () => {
  const doc = await readFile(join(REPO_ROOT, 'docs/performance.md'), 'utf8');
  const f = publishedFigure(doc, 'coild', 'idle');
  assert.ok(f.workingSetMb > 0 && f.rssMb > 0, JSON.stringify(f));
});
