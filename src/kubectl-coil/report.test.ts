import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { describe, test } from 'node:test';
import type { Finding } from '../ipam/ipam-check.js';
import { splitCommand } from './flags.js';
import { checkSameCluster, intersectFindings, parseReport, REPORT_KIND, ReportError, type IpamReport } from './report.js';
import { KUBECTL_COIL_VERSION } from './version.js';

const finding = (key: string, rv = '1', nodeRv = '5'): Finding => ({
  kind: 'orphan-block', key, message: key,
  objects: [{ kind: 'AddressBlock', name: key, uid: `u-${key}`, resourceVersion: rv }, { kind: 'Node', name: 'n', uid: 'u-n', resourceVersion: nodeRv }],
});
const report = (findings: Finding[], uid = 'cluster-a'): IpamReport => ({
  kind: REPORT_KIND, tool: 'kubectl-coil x', version: 'x', cluster: { uid, server: 'https://a' }, time: '2026-11-27T09:00:00Z',
  thresholds: { stuckDeletingMs: 1, blockRequestWaitMs: 1, poolUsagePercent: 90 }, nodesChecked: [], coildUnreachable: [], findings,
});

describe('ipam release reports', () => {
  test('only findings every report names with the same objects at the same resourceVersions are kept', () => {
    const a = report([finding('b1'), finding('b2'), finding('b3')]);
    const b = report([finding('b3'), finding('b1'), finding('b2', '2')]);
    assert.deepEqual(intersectFindings([a, b]).map((f) => f.key), ['b1', 'b3']);
    assert.deepEqual(intersectFindings([a]).map((f) => f.key), ['b1', 'b2', 'b3']);
    assert.deepEqual(intersectFindings([]), []);
  });

  test("a Node's resourceVersion (its kubelet's status writes) does not split a finding", () => {
    assert.deepEqual(intersectFindings([report([finding('b1', '1', '5')]), report([finding('b1', '1', '9')])]).map((f) => f.key), ['b1']);
  });

  test('a report of another cluster is refused, naming its file', () => {
    assert.throws(() => checkSameCluster([{ file: 'a.json', report: report([]) }, { file: 'b.json', report: report([], 'cluster-b') }], 'cluster-a'),
      (e: Error) => e instanceof ReportError && /b\.json: the report is of another cluster/.test(e.message));
    checkSameCluster([{ file: 'a.json', report: report([]) }], 'cluster-a');
  });

  test('parseReport refuses what is not a report, saying how to make one', () => {
    assert.throws(() => parseReport('x', 'kind: IpamCheckReport'), /x: not JSON .*ipam check -o json/);
    assert.throws(() => parseReport('x', '{"kind":"Other"}'), /not a report/);
    assert.throws(() => parseReport('x', JSON.stringify({ ...report([]), cluster: {} })), /names no cluster/);
    assert.throws(() => parseReport('x', JSON.stringify({ ...report([]), findings: [{ key: 'k' }] })), /lacks key, kind or objects/);
    assert.deepEqual(parseReport('x', JSON.stringify(report([finding('b1')]))).findings.map((f) => f.key), ['b1']);
  });
});

describe('kubectl coil command line', () => {
  test('splits the command words from the flags', () => {
    assert.deepEqual(splitCommand(['ipam', 'check', '-o', 'json']), { command: 'ipam check', rest: ['-o', 'json'] });
    assert.deepEqual(splitCommand(['version']), { command: 'version', rest: [] });
    assert.deepEqual(splitCommand([]), { command: 'help', rest: [] });
    assert.throws(() => splitCommand(['ipam', 'nuke']), /unknown command "ipam nuke"/);
  });

  test("the tool's version is the chart's appVersion, the image's tag", async () => {
    const chart = await readFile(new URL('../../../charts/coil/Chart.yaml', import.meta.url), 'utf8');
    assert.equal(/^appVersion: "?([^"\n]+)"?$/m.exec(chart)?.[1], KUBECTL_COIL_VERSION);
  });
});
