import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { checkIpam, countFindings, DEFAULT_THRESHOLDS, FINDING_KINDS, poolUsage, type BlockFacts, type IpamFacts, type ObjectRef, type PodFacts } from './ipam-check.js';
import { nodeViewFacts, podFacts } from '../api/v2/ipam-facts.js';

const NOW = Date.parse('2026-11-27T09:00:00Z');
const ref = (kind: ObjectRef['kind'], name: string, namespace?: string): ObjectRef => ({ kind, name, ...(namespace && { namespace }), uid: `uid-${name}`, resourceVersion: '7' });
const pool = { ref: ref('AddressPool', 'default'), blockSizeBits: 5, subnets: [{ ipv4: '10.100.0.0/24', ipv6: 'fd00::/120' }] };
const block = (i: number, node: string, extra: Partial<BlockFacts> = {}): BlockFacts =>
  ({ ref: ref('AddressBlock', `default-${i}`), pool: 'default', node, index: i, ipv4: `10.100.0.${i * 32}/27`, ipv6: `fd00::${(i * 32).toString(16)}/123`, ...extra });
const pod = (name: string, node: string, ...ips: string[]): PodFacts => ({ ref: ref('Pod', name, 'demo'), node, ips });
const base = (over: Partial<IpamFacts> = {}): IpamFacts => ({
  nowMs: NOW, pools: [pool], blocks: [block(0, 'n1'), block(1, 'n2')], nodes: [ref('Node', 'n1'), ref('Node', 'n2')], requests: [],
  pods: [pod('a', 'n1', '10.100.0.1', 'fd00::1'), pod('b', 'n2', '10.100.0.33')], nodeViews: [], ...over,
});

describe('checkIpam', () => {
  test('a healthy cluster has no finding', () => {
    assert.deepEqual(checkIpam(base()), []);
  });

  test('a block of a Node that is gone is an orphan, named with its UID and resourceVersion', () => {
    const f = checkIpam(base({ nodes: [ref('Node', 'n1')], pods: [pod('a', 'n1', '10.100.0.1')] }));
    assert.deepEqual(f.map((x) => x.kind), ['orphan-block']);
    assert.deepEqual(f[0]!.objects, [{ kind: 'AddressBlock', name: 'default-1', uid: 'uid-default-1', resourceVersion: '7' }]);
    assert.equal(f[0]!.node, 'n2');
  });

  test('a block deleting past the threshold is stuck, and the message names the pods holding it', () => {
    const blocks = [block(0, 'n1', { deletingSinceMs: NOW - DEFAULT_THRESHOLDS.stuckDeletingMs - 1 }), block(1, 'n2', { deletingSinceMs: NOW - 1_000 })];
    const f = checkIpam(base({ blocks }));
    assert.deepEqual(f.map((x) => x.key), ['block-stuck-deleting/default-0']);
    assert.match(f[0]!.message, /held by 1 running pod\(s\), demo\/a/);
    assert.deepEqual(f[0]!.objects.map((o) => o.name), ['default-0', 'a']);
  });

  test("a Pod IP that no block of the Pod's node holds is found, naming the block of another node that does", () => {
    const f = checkIpam(base({ pods: [pod('a', 'n1', '10.100.0.1'), pod('b', 'n1', '10.100.0.34')] }));
    assert.deepEqual(f.map((x) => x.key), ['pod-ip-without-block/demo/b/10.100.0.34']);
    assert.match(f[0]!.message, /default-1 of n2 does/);
  });

  test('a Pod IP outside every pool is not coil\'s and is not checked', () => {
    assert.deepEqual(checkIpam(base({ pods: [pod('a', 'n1', '192.168.1.5'), pod('b', 'n2', '192.168.1.5')] })), []);
  });

  test('two pods with one IP are a duplicate, IPv6 compared in canonical form', () => {
    const f = checkIpam(base({ pods: [pod('a', 'n1', '10.100.0.1', 'fd00::1'), pod('b', 'n1', '10.100.0.2', 'fd00::1')] }));
    assert.deepEqual(f.map((x) => x.key), ['duplicate-pod-ip/fd00::1']);
    assert.deepEqual(f[0]!.objects.map((o) => o.name), ['a', 'b']);
    const p = podFacts({ metadata: { name: 'c', namespace: 'x', uid: 'u', resourceVersion: '1' }, spec: { nodeName: 'n1', containers: [] }, status: { podIPs: [{ ip: 'fd00:0::0001' }] } });
    assert.deepEqual(p?.ips, ['fd00::1']);
  });

  test('host-network, unscheduled and finished pods hold no address; a running one without IPs yet is kept, with none', () => {
    const meta = { name: 'c', namespace: 'x', uid: 'u', resourceVersion: '1' };
    const status = { podIPs: [{ ip: '10.100.0.1' }] };
    assert.equal(podFacts({ metadata: meta, spec: { nodeName: 'n1', hostNetwork: true, containers: [] }, status }), undefined);
    assert.equal(podFacts({ metadata: meta, spec: { containers: [] }, status }), undefined);
    assert.equal(podFacts({ metadata: meta, spec: { nodeName: 'n1', containers: [] }, status: { ...status, phase: 'Succeeded' } }), undefined);
    assert.ok(podFacts({ metadata: meta, spec: { nodeName: 'n1', containers: [] }, status }));
    assert.deepEqual(podFacts({ metadata: meta, spec: { nodeName: 'n1', containers: [] }, status: { phase: 'Pending' } })?.ips, []);
  });

  test("an allocation in coild's view with no Pod behind it is a leak; one whose named Pod exists without IPs yet is not", () => {
    const view = nodeViewFacts({ node: 'n1', time: 'x', pools: [], blocks: [], allocations: [
      { pool: 'default', block: 'default-0', containerId: 'c-live', ifname: 'eth0', ipv4: '10.100.0.1', ipv6: 'fd00::1' },
      { pool: 'default', block: 'default-0', containerId: 'c-leak', ifname: 'eth0', ipv4: '10.100.0.5', podNamespace: 'demo', podName: 'gone' },
      { pool: 'default', block: 'default-0', containerId: 'c-new', ifname: 'eth0', ipv4: '10.100.0.6', podNamespace: 'demo', podName: 'starting' },
    ] })!;
    const pods = [pod('a', 'n1', '10.100.0.1', 'fd00::1'), pod('b', 'n2', '10.100.0.33')];
    // As the API shows a Pod whose sandbox coild has just wired: scheduled, no podIPs yet.
    const starting = podFacts({ metadata: { name: 'starting', namespace: 'demo', uid: 'u', resourceVersion: '1' }, spec: { nodeName: 'n1', containers: [] }, status: { phase: 'Pending' } })!;
    const f = checkIpam(base({ pods: [...pods, starting], nodeViews: [view] }));
    assert.deepEqual(f.map((x) => x.key), ['leaked-address/n1/c-leak/eth0']);
    assert.deepEqual(f[0]!.allocation, { containerId: 'c-leak', ifname: 'eth0', ipv4: '10.100.0.5', podNamespace: 'demo', podName: 'gone' });
    assert.deepEqual(f[0]!.objects, [ref('Node', 'n1')]);
  });

  test('without pods or node views, the checks needing them are skipped', () => {
    const f = checkIpam(base({ pods: undefined, nodeViews: undefined, nodes: [ref('Node', 'n1')] }));
    assert.deepEqual(f.map((x) => x.kind), ['orphan-block']);
  });

  test('a BlockRequest unanswered past the threshold is stale; an answered or young one is not', () => {
    const req = (name: string, ageMs: number, answered: boolean) => ({ ref: ref('BlockRequest', name), pool: 'default', node: 'n1', createdMs: NOW - ageMs, answered });
    const f = checkIpam(base({ requests: [req('old', 61_000, false), req('young', 5_000, false), req('done', 600_000, true)] }));
    assert.deepEqual(f.map((x) => x.key), ['stale-blockrequest/old']);
  });

  test('a pool at or above the usage threshold is reported; the percentage counts blocks', () => {
    // 10.100.0.0/24 in /27 blocks: 8 blocks; 8 of 8 used = 100 %.
    const blocks = Array.from({ length: 8 }, (_, i) => block(i, i % 2 ? 'n2' : 'n1'));
    const f = checkIpam(base({ blocks, pods: [] }));
    assert.deepEqual(f.map((x) => x.key), ['pool-usage-high/default']);
    assert.deepEqual(poolUsage([pool], blocks)[0], { pool: 'default', maxBlocks: 8n, blocks: 8, size: 256n, blockAddresses: 256n, percent: 100 });
    assert.deepEqual(checkIpam(base({ blocks: blocks.slice(0, 7), pods: [] }), { ...DEFAULT_THRESHOLDS, poolUsagePercent: 90 }), []);
  });

  test("blocks coild reports unreadable are findings when its view has them, and its absence is tolerated", () => {
    const view = nodeViewFacts({ node: 'n1', allocations: [], unreadableBlocks: [{ name: 'default-0', reason: 'CIDR of the wrong family' }] })!;
    const f = checkIpam(base({ nodeViews: [view] }));
    assert.deepEqual(f.map((x) => x.key), ['unreadable-block/n1/default-0']);
    assert.equal(nodeViewFacts({ node: 'n1', allocations: [] })!.unreadableBlocks, undefined);
    assert.equal(nodeViewFacts({ nope: 1 }), undefined);
  });

  test("addresses coild keeps wired without a block of its node are reported from its view, with where the claim stands", () => {
    const view = nodeViewFacts({ node: 'n1', allocations: [], orphans: [
      { pool: 'default', containerId: 'c1', ifname: 'eth0', ipv4: '10.100.0.70', podNamespace: 'demo', podName: 'a', block: 'default-2', state: 'claiming' },
      { pool: 'default', ifname: 'eth0', state: 'bad entry without container' },
    ] })!;
    const f = checkIpam(base({ nodeViews: [view] }));
    assert.deepEqual(f.map((x) => x.key), ['orphan-address/n1/c1/eth0']);
    assert.match(f[0]!.message, /10\.100\.0\.70 is wired on n1 for pod demo\/a but no AddressBlock of n1 holds it; coild keeps it wired and claims default-2 back \(claiming\)/);
  });

  // Issue 33: dual-stack pods, the pool re-created IPv4-only (its blocks IPv4-only): the pods keep
  // their IPv6, which no pool or block holds any more.
  const v4Pool = { ...pool, subnets: [{ ipv4: '10.100.0.0/24' }] };
  const v4Blocks = [block(0, 'n1', { ipv6: undefined }) as BlockFacts, block(1, 'n2', { ipv6: undefined }) as BlockFacts].map(({ ipv6: _, ...b }) => b);
  const v4Facts = (view: unknown): IpamFacts => base({ pools: [v4Pool], blocks: v4Blocks, pods: [pod('a', 'n1', '10.100.0.1', 'fd00::1')], nodeViews: [nodeViewFacts(view)!] });

  test('an address coild exports alone because no block can hold it is a finding of its own, apart from a claim in flight', () => {
    const f = checkIpam(v4Facts({ node: 'n1', allocations: [{ containerId: 'c1', ifname: 'eth0', block: 'default-0', ipv4: '10.100.0.1', ipv6: 'fd00::1', podNamespace: 'demo', podName: 'a' }], orphans: [
      { pool: 'default', containerId: 'c1', ifname: 'eth0', ipv6: 'fd00:0::1', podNamespace: 'demo', podName: 'a', registeredIn: 'default-0', block: 'default-0', state: 'no-pool', message: 'pool default does not hold fd00::1: no block can hold it; exported alone while the Pod runs' },
      { pool: 'default', containerId: 'c2', ifname: 'eth0', ipv6: 'fd00::2', registeredIn: 'default-0', state: 'outside-block', message: 'block default-0, which holds the Pod\'s other address, does not hold fd00::2' },
    ] }));
    assert.deepEqual(f.map((x) => x.key), ['unclaimable-address/n1/c1/eth0', 'unclaimable-address/n1/c2/eth0']);
    assert.deepEqual(f[0]!.addresses, ['fd00::1']);
    assert.match(f[0]!.message, /^fd00::1 is wired on n1 for pod demo\/a and no AddressBlock can hold it; coild exports it alone while the Pod runs \(no-pool: pool default does not hold fd00::1/);
  });

  test('a Pod IP that no block, pool or coild route covers while coild holds the Pod\'s other address is unrouted (a coild that drops it)', () => {
    const old = { node: 'n1', allocations: [{ containerId: 'c1', ifname: 'eth0', block: 'default-0', ipv4: '10.100.0.1' }], orphans: [] };
    const f = checkIpam(v4Facts(old));
    assert.deepEqual(f.map((x) => x.key), ['unrouted-pod-ip/demo/a/fd00::1']);
    assert.match(f[0]!.message, /Pod demo\/a on n1 has fd00::1, which no AddressBlock or AddressPool holds and coild on n1 does not export: it cannot be reached from other nodes/);
    // A coild that holds both halves but does not list the stray one as exported is named too.
    const both = checkIpam(v4Facts({ ...old, allocations: [{ ...old.allocations[0], ipv6: 'fd00::1' }] }));
    assert.match(both[0]!.message, /coild holds it but does not route it/);
    // Another plugin's Pod (coild holds none of its addresses) is none of coil's business.
    assert.deepEqual(checkIpam(v4Facts({ node: 'n1', allocations: [], orphans: [] })), []);
  });

  test('countFindings has every kind', () => {
    const c = countFindings(checkIpam(base({ nodes: [] })));
    assert.deepEqual(Object.keys(c), [...FINDING_KINDS]);
    assert.equal(c['orphan-block'], 2);
    assert.equal(c['pod-ip-without-block'], 0);
  });
});
