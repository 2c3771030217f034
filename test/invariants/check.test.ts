import assert from 'node:assert/strict';
import { test } from 'node:test';
import { checkInvariants, type ClusterView } from './check.js';

const healthy = (): ClusterView => ({
  nodeNames: ['n1', 'n2'],
  blocks: [
    { name: 'default-0', node: 'n1', pool: 'default', ipv4: '10.0.0.0/27', reserved: false },
    { name: 'default-1', node: 'n2', pool: 'default', ipv4: '10.0.0.32/27', reserved: false },
  ],
  pods: [
    { namespace: 'd', name: 'a', node: 'n1', ips: ['10.0.0.1'], containerId: 'c1' },
    { namespace: 'd', name: 'b', node: 'n2', ips: ['10.0.0.33'], containerId: 'c2' },
  ],
  nodes: [
    { name: 'n1', veths: [{ hostIfname: 'veth1', containerId: 'c1', ifname: 'eth0', pool: 'default' }], allocations: [{ containerId: 'c1', ifname: 'eth0', block: 'default-0', ipv4: '10.0.0.1' }] },
    { name: 'n2', veths: [{ hostIfname: 'veth2', containerId: 'c2', ifname: 'eth0', pool: 'default' }], allocations: [{ containerId: 'c2', ifname: 'eth0', block: 'default-1', ipv4: '10.0.0.33' }] },
  ],
});

const names = (view: ClusterView, afterGc = false) => checkInvariants(view, { afterGc }).map((x) => x.invariant);

test('a healthy view has no violation, also after GC', () => {
  assert.deepEqual(names(healthy(), true), []);
});

test('an address held by two pods is a violation', () => {
  const view = healthy();
  view.pods[1]!.ips = ['10.0.0.1'];
  assert.ok(names(view).includes('address-unique'));
});

test('an address allocated on two nodes is a violation', () => {
  const view = healthy();
  view.nodes[1]!.allocations![0]!.ipv4 = '10.0.0.1';
  assert.ok(names(view).includes('address-unique'));
});

test('overlapping blocks are a violation', () => {
  const view = healthy();
  view.blocks[1]!.ipv4 = '10.0.0.16/28';
  assert.ok(names(view).includes('blocks-disjoint'));
});

test("a pod address outside its node's blocks is a violation", () => {
  const view = healthy();
  view.pods[0]!.node = 'n2';
  assert.ok(names(view).includes('pod-in-node-block'));
});

test('a block of a missing node is a violation', () => {
  const view = healthy();
  view.nodeNames = ['n1'];
  assert.ok(names(view).includes('block-node-exists'));
});

test('a veth of no pod and an allocation without veth are violations', () => {
  const view = healthy();
  view.nodes[0]!.veths.push({ hostIfname: 'veth9', containerId: 'c9', ifname: 'eth0', pool: 'default' });
  view.nodes[1]!.veths = [];
  const found = names(view);
  assert.ok(found.includes('veth-known'));
  assert.ok(found.includes('allocation-has-veth'));
});

test('an empty non-reserved block is a violation only after GC', () => {
  const view = healthy();
  view.blocks.push({ name: 'default-2', node: 'n1', pool: 'default', ipv4: '10.0.0.64/27', reserved: false });
  assert.deepEqual(names(view), []);
  assert.deepEqual(names(view, true), ['block-has-user']);
  view.blocks[2]!.reserved = true;
  assert.deepEqual(names(view, true), [], 'reserved blocks need no user');
});
