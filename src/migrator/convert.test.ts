import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { parse, parseAllDocuments } from 'yaml';
import { convertV1, isDns1123Subdomain, manifests } from './convert.js';
import { parseV1Entries, type V1Entry } from './v1-model.js';
import { toYamlDocuments, type YamlValue } from '../runtime/yaml-out.js';

const TESTDATA = new URL('../../../test/migrator/testdata/', import.meta.url);

interface Fixture {
  nodes: string[];
  entries: [string, string][];
}

function example(): { nodes: Set<string>; entries: V1Entry[] } {
  const f = JSON.parse(readFileSync(new URL('v1-example.json', TESTDATA), 'utf8')) as Fixture;
  return { nodes: new Set(f.nodes), entries: f.entries.map(([k, value]) => ({ key: k.slice('/coil/'.length), value })) };
}

function dump(entries: readonly V1Entry[], nodes: ReadonlySet<string>): { yaml: string; conversion: ReturnType<typeof convertV1> } {
  const conversion = convertV1(parseV1Entries(entries), nodes);
  return { yaml: toYamlDocuments(manifests(conversion) as unknown as YamlValue[]), conversion };
}

function errorsOf(c: ReturnType<typeof convertV1>): string[] {
  return c.problems.filter((p) => p.severity === 'error').map((p) => `${p.subject}: ${p.message}`);
}

const POOL = (subnets: string[], bits: number): string => JSON.stringify({ subnets, block_size: bits });

describe('convertV1', () => {
  it('turns the v1 test data set (docs/migration-from-coil-v1.md) into exactly the expected YAML', () => {
    const { nodes, entries } = example();
    const { yaml, conversion } = dump(entries, nodes);
    assert.equal(yaml, readFileSync(new URL('v1-example.expected.yaml', TESTDATA), 'utf8'));
    assert.deepEqual(errorsOf(conversion), []);
    assert.deepEqual(conversion.namespacePools, ['internet-egress']);
  });

  it('gives the same output whatever the input order', () => {
    const { nodes, entries } = example();
    const reversed = dump([...entries].reverse(), nodes).yaml;
    assert.equal(reversed, dump(entries, nodes).yaml);
  });

  it('writes YAML that a YAML reader reads back as the objects', () => {
    const { nodes, entries } = example();
    const { yaml, conversion } = dump(entries, nodes);
    const docs = parseAllDocuments(yaml).map((d) => d.toJS() as unknown);
    assert.deepEqual(docs, JSON.parse(JSON.stringify(manifests(conversion))));
  });

  it('counts a block index across the pool subnets in spec order, not etcd key order', () => {
    const entries: V1Entry[] = [
      { key: 'pool/p', value: POOL(['10.64.0.0/26', '10.100.0.0/27'], 4) },
      { key: 'block/p/10.100.0.0', value: JSON.stringify({ free: null, nodes: { n1: ['10.100.0.16/28', '10.100.0.0/28'] } }) },
    ];
    const { conversion } = dump(entries, new Set(['n1']));
    assert.deepEqual(conversion.blocks.map((b) => [b.metadata!.name, b.index, b.ipv4]), [
      ['p-4-v1', 4, '10.100.0.0/28'],
      ['p-5-v1', 5, '10.100.0.16/28'],
    ]);
  });

  it('reads both ip value formats, JSON and the legacy ns/pod text', () => {
    const data = parseV1Entries(example().entries);
    const legacy = data.addresses.filter((a) => a.legacy);
    assert.deepEqual(legacy.map((a) => [a.key, a.namespace, a.pod, a.offset]), [['ip/10.64.0.32/3', 'default', 'old-pod', 3]]);
    assert.equal(data.addresses.length, 7);
    assert.deepEqual(data.problems, []);
  });

  it('skips the blocks of nodes that no longer exist, with a warning naming node and block', () => {
    const { nodes, entries } = example();
    nodes.delete('node-c');
    const { conversion } = dump(entries, nodes);
    assert.deepEqual(conversion.blocks.map((b) => b.metadata!.name), ['default-0-v1', 'default-1-v1', 'default-2-v1', 'internet-egress-0-v1']);
    const warnings = conversion.problems.filter((p) => p.severity === 'warning').map((p) => p.subject + ' ' + p.message);
    const skipped = warnings.filter((w) => w.includes('node node-c no longer exists'));
    assert.equal(skipped.length, 2, warnings.join('\n'));
    assert.ok(skipped.some((w) => w.includes('block/default/10.64.1.0 nodes[node-c] 10.64.1.0/27')));
    // And the pods still recorded in those blocks are named, since v2 may reuse their addresses.
    const pods = warnings.filter((w) => w.includes('v2 may hand them out again'));
    assert.deepEqual(pods.map((w) => /\(([^)]*)\): v2/.exec(w)?.[1]), ['kube-system/coredns-x', 'internet-egress/squid-1']);
    assert.deepEqual(errorsOf(conversion), []);
  });

  it('refuses a pool name that is not a valid Kubernetes name', () => {
    const { conversion } = dump([{ key: 'pool/foo_bar', value: POOL(['10.0.0.0/24'], 5) }], new Set());
    assert.equal(conversion.pools.length, 0);
    assert.match(errorsOf(conversion).join('\n'), /^pool\/foo_bar: pool name "foo_bar" is not a valid Kubernetes name/);
    assert.equal(isDns1123Subdomain('team-a.x'), true);
    assert.equal(isDns1123Subdomain('ends-'), false);
  });

  it('refuses a subnet that is not IPv4', () => {
    const { conversion } = dump([{ key: 'pool/v6', value: POOL(['fd00::/120'], 5) }, { key: 'pool/junk', value: POOL(['nonsense'], 5) }], new Set());
    const errors = errorsOf(conversion).join('\n');
    assert.match(errors, /pool\/v6: subnet "fd00::\/120" is not an IPv4 CIDR/);
    assert.match(errors, /pool\/junk: subnet "nonsense" is not an IPv4 CIDR/);
  });

  it('reports malformed values with their key and keeps going', () => {
    const entries: V1Entry[] = [
      { key: 'pool/a', value: '{not json' },
      { key: 'pool/b', value: JSON.stringify({ subnets: [], block_size: 5 }) },
      { key: 'pool/c', value: POOL(['10.1.0.0/24'], 5) },
      { key: 'block/c/10.1.0.0', value: JSON.stringify({ free: null, nodes: { n1: 'x' } }) },
      { key: 'ip/10.1.0.0/zero', value: 'a/b' },
      { key: 'ip/10.1.0.0/1', value: 'garbage' },
      { key: 'bogus', value: '' },
    ];
    const { conversion } = dump(entries, new Set(['n1']));
    assert.deepEqual(conversion.pools.map((p) => p.metadata!.name), ['c']);
    const all = conversion.problems.map((p) => `${p.severity} ${p.subject}: ${p.message}`).join('\n');
    assert.match(all, /error pool\/a: malformed value: not JSON/);
    assert.match(all, /error pool\/b: malformed pool value: "subnets"/);
    assert.match(all, /error block\/c\/10.1.0.0: malformed block value: nodes\["n1"\]/);
    assert.match(all, /warning ip\/10.1.0.0\/zero: malformed ip key/);
    assert.match(all, /warning ip\/10.1.0.0\/1: malformed ip value: neither JSON nor the legacy/);
    assert.match(all, /warning bogus: not a Coil v1 key/);
  });

  it('refuses blocks outside their pool, held twice, or filed under a foreign subnet', () => {
    const entries: V1Entry[] = [
      { key: 'pool/p', value: POOL(['10.1.0.0/26'], 5) },
      { key: 'block/p/10.1.0.0', value: JSON.stringify({ free: [], nodes: { n1: ['10.1.0.0/27', '10.9.0.0/27', '10.1.0.32/28'], n2: ['10.1.0.0/27'] } }) },
      { key: 'block/p/10.2.0.0', value: JSON.stringify({ free: [], nodes: {} }) },
      { key: 'block/gone/10.3.0.0', value: JSON.stringify({ free: [], nodes: { n1: ['10.3.0.0/27'] } }) },
    ];
    const { conversion } = dump(entries, new Set(['n1', 'n2']));
    const errors = errorsOf(conversion).join('\n');
    assert.match(errors, /nodes\[n1\] 10.9.0.0\/27: not a \/27 block inside a subnet of pool p/);
    assert.match(errors, /nodes\[n1\] 10.1.0.32\/28: not a \/27 block/);
    assert.match(errors, /nodes\[n2\] 10.1.0.0\/27: block is also held by node n1/);
    assert.match(errors, /block\/p\/10.2.0.0: subnet 10.2.0.0 is not a subnet of pool p/);
    assert.ok(conversion.problems.some((p) => p.severity === 'warning' && p.subject === 'block/gone/10.3.0.0'));
    assert.deepEqual(conversion.blocks.map((b) => b.metadata!.name), ['p-0-v1']);
  });

  it('refuses pools whose subnets overlap, which v2 would reject', () => {
    const entries: V1Entry[] = [
      { key: 'pool/a', value: POOL(['10.0.0.0/16'], 5) },
      { key: 'pool/b', value: POOL(['10.0.1.0/24'], 5) },
    ];
    const errors = errorsOf(dump(entries, new Set()).conversion);
    assert.equal(errors.length, 1);
    assert.match(errors[0]!, /^pool\/a: .*overlaps 10.0.1.0\/24 of AddressPool "b"/);
  });

  it('writes blockSizeBits 0 explicitly (the CRD default is 5) and quotes what YAML would misread', () => {
    const yaml = toYamlDocuments([{ a: 0, b: 'true', c: '5', d: 'node-1', e: '1e3', f: 'x: y', g: [], h: {} }]);
    assert.equal(yaml, '---\na: 0\nb: "true"\nc: "5"\nd: node-1\ne: "1e3"\nf: "x: y"\ng: []\nh: {}\n');
    assert.deepEqual(parse(yaml), { a: 0, b: 'true', c: '5', d: 'node-1', e: '1e3', f: 'x: y', g: [], h: {} });
  });
});
