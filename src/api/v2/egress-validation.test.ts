import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { Egress, EgressSpec } from './egress.js';
import { defaultEgress, egressWarnings, validateEgressSpec } from './egress-validation.js';
import { isQualifiedName, isValidLabelValue, isValidPercent } from './egress-validation-names.js';
import { formatFieldError } from './field-error.js';

const base: EgressSpec = { destinations: ['0.0.0.0/0'], replicas: 1, sessionAffinity: 'ClientIP' };
const messages = (spec: Partial<EgressSpec>): string[] => validateEgressSpec({ ...base, ...spec }).map(formatFieldError);

const QN_MSG =
  "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName' or 'my.name' or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";

describe('validateEgressSpec', () => {
  test('a minimal spec and a full valid spec pass', () => {
    assert.deepEqual(messages({}), []);
    assert.deepEqual(
      messages({
        destinations: ['10.0.0.0/8', 'fd00::/8', '0.0.0.0/0', '::/0'],
        strategy: { type: 'RollingUpdate', rollingUpdate: { maxSurge: '50%', maxUnavailable: 0 } },
        template: { metadata: { labels: { 'example.com/app': 'nat', tier: '' }, annotations: { 'Example.COM/Note': 'any value / at all' } } },
        podDisruptionBudget: { maxUnavailable: '100%' },
      }),
      [],
    );
  });

  test('destinations: unparsable CIDRs get Go net.ParseCIDR messages (Coil)', () => {
    assert.deepEqual(messages({ destinations: ['127.0.0.1', '10.0.0.0/8', 'fd00::/129'] }), [
      'spec.destinations[0]: Invalid value: "127.0.0.1": invalid CIDR address: 127.0.0.1',
      'spec.destinations[2]: Invalid value: "fd00::/129": invalid CIDR address: fd00::/129',
    ]);
  });

  test('destinations: host bits and duplicates (ours)', () => {
    assert.deepEqual(messages({ destinations: ['10.1.2.3/8', '10.0.0.0/8'] }), [
      'spec.destinations[0]: Invalid value: "10.1.2.3/8": host bits are set; did you mean 10.0.0.0/8',
      'spec.destinations[1]: Invalid value: "10.0.0.0/8": duplicate of spec.destinations[0]',
    ]);
  });

  test('strategy.type must be Recreate or RollingUpdate, also when empty (Coil)', () => {
    const want = (v: string) => [`spec.strategy.type: Unsupported value: "${v}": supported values: "Recreate", "RollingUpdate"`];
    assert.deepEqual(messages({ strategy: { type: 'Blue' as 'Recreate' } }), want('Blue'));
    assert.deepEqual(messages({ strategy: {} }), want(''));
  });

  test('strategy.rollingUpdate follows apps/v1 (ours)', () => {
    assert.deepEqual(messages({ strategy: { type: 'Recreate', rollingUpdate: { maxSurge: 1 } } }), [
      "spec.strategy.rollingUpdate: Forbidden: may not be specified when strategy `type` is 'Recreate'",
    ]);
    assert.deepEqual(messages({ strategy: { type: 'RollingUpdate', rollingUpdate: { maxSurge: '0%', maxUnavailable: 0 } } }), [
      'spec.strategy.rollingUpdate.maxUnavailable: Invalid value: 0: may not be 0 when `maxSurge` is 0',
    ]);
    assert.deepEqual(messages({ strategy: { type: 'RollingUpdate', rollingUpdate: { maxSurge: -1, maxUnavailable: '150%' } } }), [
      'spec.strategy.rollingUpdate.maxSurge: Invalid value: -1: must be greater than or equal to 0',
      'spec.strategy.rollingUpdate.maxUnavailable: Invalid value: "150%": must not be greater than 100%',
    ]);
  });

  test('template labels: keys and values checked (Coil, apimachinery messages)', () => {
    assert.deepEqual(messages({ template: { metadata: { labels: { '-bad': 'ok', good: 'bad value' } } } }), [
      `spec.template.metadata.labels: Invalid value: "-bad": ${QN_MSG}`,
      "spec.template.metadata.labels: Invalid value: \"bad value\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue' or 'my_value' or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
    ]);
  });

  test("template annotations: Kubernetes' rule — keys checked lower-cased, values free, 256 KiB in all (Coil: ValidateLabelName)", () => {
    // Kubernetes accepts an upper-case prefix on any object's annotations (Coil's webhook would not).
    assert.deepEqual(messages({ template: { metadata: { annotations: { 'Example.COM/Note': 'x' } } } }), []);
    assert.deepEqual(messages({ template: { metadata: { annotations: { 'a/b/c': 'x', ok: 'new\nlines are fine' } } } }), [
      "spec.template.metadata.annotations: Invalid value: \"a/b/c\": a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName' or 'my.name' or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
    ]);
    assert.deepEqual(messages({ template: { metadata: { annotations: { big: 'x'.repeat(262_142) } } } }), [
      'spec.template.metadata.annotations: TooLong: must have at most 262144 bytes',
    ]);
  });

  test('podDisruptionBudget: both set, negative, not a percent, over 100% (Coil)', () => {
    assert.deepEqual(messages({ podDisruptionBudget: { minAvailable: 1, maxUnavailable: 1 } }), [
      'spec.podDisruptionBudget: Invalid value: {"minAvailable":1,"maxUnavailable":1}: minAvailable and maxUnavailable cannot be both set',
    ]);
    assert.deepEqual(messages({ podDisruptionBudget: { minAvailable: -1 } }), [
      'spec.podDisruptionBudget.minAvailable: Invalid value: -1: must be greater than or equal to 0',
    ]);
    assert.deepEqual(messages({ podDisruptionBudget: { maxUnavailable: 'half' } }), [
      "spec.podDisruptionBudget.maxUnavailable: Invalid value: \"half\": a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%' or '93%', regex used for validation is '[0-9]+%')",
    ]);
    assert.deepEqual(messages({ podDisruptionBudget: { minAvailable: '101%' } }), [
      'spec.podDisruptionBudget.minAvailable: Invalid value: "101%": must not be greater than 100%',
    ]);
  });

  test('snatAddresses: absent, empty, one per family pass (ours)', () => {
    assert.deepEqual(messages({ snatAddresses: [] }), []);
    assert.deepEqual(messages({ snatAddresses: ['203.0.113.10'] }), []);
    assert.deepEqual(messages({ snatAddresses: ['2001:db8::10', '203.0.113.10'] }), []);
  });

  test('snatAddresses: each a plain IP address, no CIDR, no zone, no IPv4-mapped IPv6 (ours)', () => {
    assert.deepEqual(messages({ snatAddresses: ['203.0.113.10/32', 'fe80::1%eth0'] }), [
      'spec.snatAddresses[0]: Invalid value: "203.0.113.10/32": must be an IP address, not a CIDR',
      'spec.snatAddresses[1]: Invalid value: "fe80::1%eth0": must not include an IPv6 zone',
    ]);
    assert.deepEqual(messages({ snatAddresses: ['nat.example.com', '010.0.0.1'] }), [
      'spec.snatAddresses[0]: Invalid value: "nat.example.com": must be a valid IP address (e.g. 10.9.8.7 or 2001:db8::ffff)',
      'spec.snatAddresses[1]: Invalid value: "010.0.0.1": must be a valid IP address (e.g. 10.9.8.7 or 2001:db8::ffff)',
    ]);
    assert.deepEqual(messages({ snatAddresses: ['::ffff:203.0.113.10'] }), [
      'spec.snatAddresses[0]: Invalid value: "::ffff:203.0.113.10": must not be an IPv4-mapped IPv6 address',
    ]);
  });

  test('snatAddresses: no unspecified, loopback, link-local, multicast or broadcast address (ours)', () => {
    const one = (a: string) => messages({ snatAddresses: [a] });
    assert.deepEqual(one('0.0.0.0'), ['spec.snatAddresses[0]: Invalid value: "0.0.0.0": may not be unspecified (0.0.0.0)']);
    assert.deepEqual(one('::'), ['spec.snatAddresses[0]: Invalid value: "::": may not be unspecified (::)']);
    for (const a of ['127.0.0.1', '127.255.0.9', '::1']) assert.deepEqual(one(a), [`spec.snatAddresses[0]: Invalid value: "${a}": may not be in the loopback range (127.0.0.0/8, ::1/128)`]);
    for (const a of ['169.254.1.1', 'fe80::1', 'febf::1']) assert.deepEqual(one(a), [`spec.snatAddresses[0]: Invalid value: "${a}": may not be in the link-local range (169.254.0.0/16, fe80::/10)`]);
    for (const a of ['224.0.0.1', '239.1.2.3', 'ff02::1']) assert.deepEqual(one(a), [`spec.snatAddresses[0]: Invalid value: "${a}": may not be in the multicast range (224.0.0.0/4, ff00::/8)`]);
    assert.deepEqual(one('255.255.255.255'), ['spec.snatAddresses[0]: Invalid value: "255.255.255.255": may not be the IPv4 broadcast address (255.255.255.255)']);
    // The ranges' neighbours are unicast.
    for (const a of ['0.0.0.1', '126.255.255.255', '128.0.0.0', '169.253.255.255', '223.255.255.255', '255.255.255.254', '::2', 'fec0::1', 'fe7f::1', 'feff::1']) assert.deepEqual(one(a), [], a);
  });

  test("snatAddresses: canonical text, Kubernetes' rule for new IP fields (ours)", () => {
    assert.deepEqual(messages({ snatAddresses: ['2001:DB8:0::10'] }), [
      'spec.snatAddresses[0]: Invalid value: "2001:DB8:0::10": must be in canonical form ("2001:db8::10")',
    ]);
  });

  test('snatAddresses: at most one per family, no duplicate (ours)', () => {
    assert.deepEqual(messages({ snatAddresses: ['203.0.113.10', '203.0.113.11'] }), [
      'spec.snatAddresses[1]: Invalid value: "203.0.113.11": at most one address per family (spec.snatAddresses[0] is IPv4)',
    ]);
    assert.deepEqual(messages({ snatAddresses: ['2001:db8::10', '2001:db8:0::10'] }), [
      'spec.snatAddresses[1]: Invalid value: "2001:db8:0::10": must be in canonical form ("2001:db8::10")',
      'spec.snatAddresses[1]: Invalid value: "2001:db8:0::10": duplicate of spec.snatAddresses[0]',
    ]);
    assert.deepEqual(messages({ snatAddresses: ['203.0.113.10', '2001:db8::10', '203.0.113.10'] }), [
      'spec.snatAddresses[2]: Invalid value: "203.0.113.10": duplicate of spec.snatAddresses[0]',
    ]);
  });
});

describe('apimachinery name checks', () => {
  test('qualified names: prefix and name parts', () => {
    assert.deepEqual(isQualifiedName('example.com/x'), []);
    assert.deepEqual(isQualifiedName('/x'), ['prefix part must be non-empty']);
    assert.deepEqual(isQualifiedName('x/'), ['name part must be non-empty', QN_MSG]);
    assert.deepEqual(isQualifiedName('a'.repeat(64)), ['name part must be no more than 63 characters']);
    assert.match(isQualifiedName('Upper.Case/x')[0]!, /^prefix part a lowercase RFC 1123 subdomain/);
  });
  test('label values and percents', () => {
    assert.deepEqual(isValidLabelValue(''), []);
    assert.equal(isValidLabelValue('a'.repeat(64))[0], 'must be no more than 63 characters');
    assert.deepEqual(isValidPercent('5%'), []);
    assert.equal(isValidPercent('5').length, 1);
  });
});

describe('egressWarnings', () => {
  test('names overridden and ignored fields', () => {
    assert.deepEqual(egressWarnings(base), []);
    assert.deepEqual(
      egressWarnings({ ...base, sessionAffinity: 'None', sessionAffinityConfig: { clientIP: { timeoutSeconds: 5 } }, template: { spec: { containers: [], serviceAccountName: 'mine' } } }),
      ['spec.template.spec.serviceAccountName: replaced by coil-egress', 'spec.sessionAffinityConfig: ignored when sessionAffinity is None'],
    );
  });

  test('a shared SNAT address of a family no destination has is unused', () => {
    const steering = "spec.snatAddresses: every node with a client pod of this Egress must run coil's coild with --egress-nat-steering (the default); on a node running Coil's coild the clients' flows break";
    assert.deepEqual(egressWarnings({ ...base, destinations: ['10.0.0.0/8'], snatAddresses: ['2001:db8::10', '203.0.113.10'] }), [steering, 'spec.snatAddresses[0]: no destination of its family; unused']);
    assert.deepEqual(egressWarnings({ ...base, destinations: ['10.0.0.0/8', '::/0'], snatAddresses: ['2001:db8::10', '203.0.113.10'] }), [steering]);
    assert.deepEqual(egressWarnings({ ...base, destinations: ['::/0'], snatAddresses: ['203.0.113.10'] }), [steering, 'spec.snatAddresses[0]: no destination of its family; unused']);
  });
});

describe('defaultEgress', () => {
  const egress = (template?: EgressSpec['template']): Egress => ({ metadata: { name: 'e' }, spec: { ...base, ...(template && { template }) } });
  test('a template without containers gets the egress container (Coil)', () => {
    assert.deepEqual(defaultEgress(egress({ spec: { containers: [] } })).spec.template?.spec?.containers, [{ name: 'egress' }]);
    assert.deepEqual(defaultEgress(egress({ metadata: { labels: { a: 'b' } } })).spec.template?.spec?.containers, [{ name: 'egress' }]);
  });
  test('no template, or a template with containers, is left alone (Coil)', () => {
    assert.equal(defaultEgress(egress()).spec.template, undefined);
    assert.deepEqual(defaultEgress(egress({ spec: { containers: [{ name: 'sidecar' }] } })).spec.template?.spec?.containers, [{ name: 'sidecar' }]);
  });
});
