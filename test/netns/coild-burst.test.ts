/**
 * coild under load on a fresh netns node: 110 concurrent ADDs (kubelet's default max pods), then
 * a crash (SIGKILL) in the middle of another burst and a restart. Checks the IPAM invariants
 * against the host, read independently of coild: every successful ADD holds a distinct address,
 * coild's allocations equal the veths on the node, and nothing is left after DEL.
 * Root only; skipped with the reason otherwise.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { eventually } from '../envtest/control-plane.js';
import { NodeLab, labLogsOnFailure, labSkipReason, type CoilRun, type LabNode, type LabPod } from './node-lab.js';
import { prerequisite } from '../support/prerequisite.js';

const COILD_ARGS = ['--cooling-period=1s', '--block-release-grace=1s', '--addressblock-gc-interval=1h'];

/** The IPv4 address of an ADD result. */
function ipv4Of(r: CoilRun): string {
  const ips = (r.json?.ips ?? []) as { address: string }[];
  return ips[0]!.address.split('/')[0]!;
}

describe('coild burst and crash on a fresh node', { skip: prerequisite(labSkipReason()) }, () => {
  let lab: NodeLab;
  let node: LabNode;
  const pods: LabPod[] = [];
  const addressOf = new Map<string, string>();
  const printLogsIfFailed = labLogsOnFailure();

  before(async () => {
    lab = await NodeLab.start();
    await lab.createPool('default', { subnets: [{ ipv4: '10.100.0.0/16' }], blockSizeBits: 5 });
    await lab.createNamespace('burst');
    node = await lab.addNode('node-b', '10.250.0.2');
    await lab.startCoild(node, COILD_ARGS);
  });
  after(async () => {
    await printLogsIfFailed(lab);
    await lab?.stop();
  });

  /** coild's allocations equal the coil veths on the node, key by key and address by address. */
  const assertHostMatchesIpam = async (): Promise<void> => {
    const host = (await lab.hostPods(node)).map((e) => `${e.containerId}=${e.ipv4}`).sort();
    const ipam = (await lab.snapshot(node)).allocations.map((a) => `${a.containerId}=${a.ipv4}`).sort();
    assert.deepEqual(ipam, host);
    assert.equal(new Set(ipam.map((x) => x.split('=')[1])).size, ipam.length, 'an address is held twice');
  };

  it('110 concurrent ADDs on a fresh node all succeed with distinct addresses', async () => {
    for (let i = 0; i < 110; i++) pods.push(await lab.createPod(node, 'burst', `p-${i}`));
    assert.deepEqual(await lab.blocksOf(node), []);
    const start = performance.now();
    const runs = await Promise.all(pods.map((p) => lab.runCoil(node, 'ADD', p)));
    const ms = performance.now() - start;
    const bad = runs.filter((r) => r.code !== 0);
    assert.equal(bad.length, 0, bad.map((r) => r.stdout).join('\n'));
    runs.forEach((r, i) => addressOf.set(pods[i]!.containerId, ipv4Of(r)));
    assert.equal(new Set(addressOf.values()).size, 110);
    const blocks = await lab.blocksOf(node);
    process.stdout.write(`# 110 concurrent ADDs on a fresh node: ${ms.toFixed(0)} ms wall, slowest ADD ${Math.max(...runs.map((r) => r.ms)).toFixed(0)} ms, ${blocks.length} blocks\n`);
    assert.ok(blocks.length >= 4 && blocks.length <= 5, `blocks: ${blocks.join(', ')}`);
    await assertHostMatchesIpam();
  });

  it('coild killed during a burst and restarted: no address twice, none leaked, allocations recovered', async () => {
    const more: LabPod[] = [];
    for (let i = 0; i < 40; i++) more.push(await lab.createPod(node, 'burst', `q-${i}`));
    // Killed once a quarter of the burst has succeeded: the rest is in flight or queued.
    let succeeded = 0;
    let killed: Promise<void> | undefined;
    const runs = await Promise.all(
      more.map((p) =>
        lab.runCoil(node, 'ADD', p).then((r) => {
          if (r.code === 0 && ++succeeded === 10) killed = lab.stopCoild(node, 'SIGKILL');
          return r;
        }),
      ),
    );
    await killed;
    const ok = runs.flatMap((r, i) => (r.code === 0 ? [[more[i]!, ipv4Of(r)] as const] : []));
    process.stdout.write(`# crash: ${ok.length} of 40 ADDs finished before SIGKILL\n`);
    for (const r of runs) if (r.code !== 0) assert.ok([11, 999].includes(Number(r.json?.code)), r.stdout);

    await lab.startCoild(node, COILD_ARGS);
    const recovered = new Map((await lab.snapshot(node)).allocations.map((a) => [a.containerId, a.ipv4]));
    for (const [p, ip] of [...pods.map((p) => [p, addressOf.get(p.containerId)!] as const), ...ok]) assert.equal(recovered.get(p.containerId), ip, p.name);
    await assertHostMatchesIpam();

    // The runtime retries the failed ADDs; every pod ends with a distinct address.
    const retries = await Promise.all(more.map((p) => lab.runCoil(node, 'ADD', p)));
    assert.deepEqual(retries.map((r) => r.code), more.map(() => 0));
    retries.forEach((r, i) => addressOf.set(more[i]!.containerId, ipv4Of(r)));
    for (const [p, ip] of ok) assert.equal(addressOf.get(p.containerId), ip, `${p.name} changed address`);
    pods.push(...more);
    assert.equal(new Set(addressOf.values()).size, pods.length);
    await assertHostMatchesIpam();
  });

  it('DEL of every pod leaves no veth, no allocation and, after grace, no block', async () => {
    const runs = await Promise.all(pods.map((p) => lab.runCoil(node, 'DEL', p)));
    assert.deepEqual(runs.filter((r) => r.code !== 0).map((r) => r.stdout), []);
    assert.deepEqual(await lab.hostPods(node), []);
    assert.deepEqual((await lab.snapshot(node)).allocations, []);
    await eventually(async () => (await lab.blocksOf(node)).length === 0, { timeoutMs: 20_000 });
  });
});
