/**
 * The Egress webhooks called by the real apiserver over HTTPS: the `egress` container is inserted
 * on create only, every validation rule (Coil's and ours) denies on create and on update with its
 * exact message naming the field, and overridden fields come back as warnings kubectl prints.
 */
import 'reflect-metadata';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import type { EgressSpec } from '../../src/api/v2/egress.js';
import { coilCrds } from '../../src/api/v2/crd.js';
import { Kinds } from '../../src/api/v2/kinds.js';
import type { Client } from '../../src/runtime/client.js';
import { ApiError } from '../../src/runtime/errors.js';
import type { Manager } from '../../src/runtime/manager.js';
import { ControlPlane, eventually } from './control-plane.js';
import { adminClient, registerWebhooks } from './controller-support.js';
import { createEgress, egressManager, egressSpec } from './egress-support.js';
import { toolPath } from './tools.js';

const DENIED = 'admission webhook "vegress.coil.cybozu.com" denied the request: Egress.coil.cybozu.com';
const NS = 'default';

/** The denial text after the HTTP prefix the client adds. */
async function denial(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (e) {
    assert.ok(e instanceof ApiError, String(e));
    assert.equal(e.code, 422, e.message);
    return e.message.slice(e.message.indexOf('admission webhook'));
  }
  assert.fail('the write was admitted');
}

const QN = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName' or 'my.name' or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const PERCENT = "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%' or '93%', regex used for validation is '[0-9]+%')";

/** [what, spec overrides, message after `is invalid: `]. */
const CASES: [string, Partial<EgressSpec>, string][] = [
  ['a destination without prefix (Coil)', { destinations: ['127.0.0.1'] }, 'spec.destinations[0]: Invalid value: "127.0.0.1": invalid CIDR address: 127.0.0.1'],
  ['an unparsable IPv6 destination (Coil)', { destinations: ['10.0.0.0/8', 'fd00::/200'] }, 'spec.destinations[1]: Invalid value: "fd00::/200": invalid CIDR address: fd00::/200'],
  ['a destination with host bits set', { destinations: ['192.168.1.1/16'] }, 'spec.destinations[0]: Invalid value: "192.168.1.1/16": host bits are set; did you mean 192.168.0.0/16'],
  ['a duplicate destination', { destinations: ['10.0.0.0/8', '10.0.0.0/8'] }, 'spec.destinations[1]: Invalid value: "10.0.0.0/8": duplicate of spec.destinations[0]'],
  ['a strategy without type (Coil)', { strategy: { rollingUpdate: { maxSurge: 1 } } }, 'spec.strategy.type: Unsupported value: "": supported values: "Recreate", "RollingUpdate"'],
  ['rollingUpdate with Recreate', { strategy: { type: 'Recreate', rollingUpdate: { maxSurge: 1 } } }, "spec.strategy.rollingUpdate: Forbidden: may not be specified when strategy `type` is 'Recreate'"],
  ['maxSurge and maxUnavailable both 0', { strategy: { type: 'RollingUpdate', rollingUpdate: { maxSurge: 0, maxUnavailable: '0%' } } }, 'spec.strategy.rollingUpdate.maxUnavailable: Invalid value: "0%": may not be 0 when `maxSurge` is 0'],
  ['a bad template label key (Coil)', { template: { metadata: { labels: { 'a/b/c': 'x' } } } }, `spec.template.metadata.labels: Invalid value: "a/b/c": a qualified name ${QN} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')`],
  ['a bad template label value (Coil)', { template: { metadata: { labels: { app: 'not ok' } } } }, "spec.template.metadata.labels: Invalid value: \"not ok\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue' or 'my_value' or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"],
  ['a bad template annotation key (Coil)', { template: { metadata: { annotations: { '-x': 'any value' } } } }, `spec.template.metadata.annotations: Invalid value: "-x": name part ${QN}`],
  ['a PDB with both fields (Coil)', { podDisruptionBudget: { minAvailable: 1, maxUnavailable: 1 } }, 'spec.podDisruptionBudget: Invalid value: {"minAvailable":1,"maxUnavailable":1}: minAvailable and maxUnavailable cannot be both set'],
  ['a negative PDB minAvailable (Coil)', { podDisruptionBudget: { minAvailable: -1 } }, 'spec.podDisruptionBudget.minAvailable: Invalid value: -1: must be greater than or equal to 0'],
  ['a PDB maxUnavailable that is no percent (Coil)', { podDisruptionBudget: { maxUnavailable: 'all' } }, `spec.podDisruptionBudget.maxUnavailable: Invalid value: "all": ${PERCENT}`],
  ['a PDB over 100% (Coil)', { podDisruptionBudget: { maxUnavailable: '101%' } }, 'spec.podDisruptionBudget.maxUnavailable: Invalid value: "101%": must not be greater than 100%'],
  ['a shared SNAT address given as a CIDR', { snatAddresses: ['203.0.113.10/32'] }, 'spec.snatAddresses[0]: Invalid value: "203.0.113.10/32": must be an IP address, not a CIDR'],
  ['a loopback shared SNAT address', { snatAddresses: ['::1'] }, 'spec.snatAddresses[0]: Invalid value: "::1": may not be in the loopback range (127.0.0.0/8, ::1/128)'],
  ['two shared SNAT addresses of one family', { snatAddresses: ['203.0.113.10', '203.0.113.11'] }, 'spec.snatAddresses[1]: Invalid value: "203.0.113.11": at most one address per family (spec.snatAddresses[0] is IPv4)'],
];

describe('Egress webhooks through the real apiserver', () => {
  let cp: ControlPlane;
  let mgr: Manager;
  let client: Client;

  before(async () => {
    cp = await ControlPlane.start({ crds: coilCrds() });
    const built = await egressManager(cp, { webhooks: true });
    mgr = built.mgr;
    await mgr.start();
    await registerWebhooks(cp, built.registry, mgr.ports.webhook!, 'coilv2-egress');
    client = adminClient(cp);
    // The apiserver loads webhook configurations asynchronously; wait until the validator acts.
    await eventually(async () => (await denial(createEgress(client, NS, 'probe', { destinations: ['x'] }))).startsWith(DENIED));
    await createEgress(client, NS, 'existing');
  });
  after(async () => {
    await mgr?.stop();
    await cp?.stop();
  });

  test('create inserts the egress container into a template without containers (Coil)', async () => {
    const e = await createEgress(client, NS, 'defaulted', { template: { metadata: { labels: { team: 'net' } }, spec: { containers: [] } } });
    assert.deepEqual(e.spec.template?.spec?.containers, [{ name: 'egress' }]);
  });

  test('create leaves a template with containers and a missing template alone (Coil)', async () => {
    const withSidecar = await createEgress(client, NS, 'sidecar', { template: { spec: { containers: [{ name: 'sidecar', image: 'busybox' }] } } });
    assert.deepEqual(withSidecar.spec.template?.spec?.containers, [{ name: 'sidecar', image: 'busybox' }]);
    const bare = await createEgress(client, NS, 'bare');
    assert.equal(bare.spec.template, undefined);
  });

  test('update does not default (the mutating webhook is CREATE only, as Coil)', async () => {
    const e = await client.mergePatch(Kinds.Egress, { namespace: NS, name: 'existing' }, { spec: { template: { spec: { containers: [] } } } });
    assert.deepEqual(e.spec.template?.spec?.containers, []);
  });

  CASES.forEach(([what, spec, message], i) => {
    test(`create denies ${what}`, async () => {
      const name = `bad-${i}`;
      assert.equal(await denial(createEgress(client, NS, name, spec)), `${DENIED} "${name}" is invalid: ${message}`);
    });
    test(`update denies ${what}`, async () => {
      const patch = { spec: { ...spec, ...(spec.destinations ? {} : { destinations: ['0.0.0.0/0'] }) } };
      assert.equal(await denial(client.mergePatch(Kinds.Egress, { namespace: NS, name: 'existing' }, patch)), `${DENIED} "existing" is invalid: ${message}`);
    });
  });

  test('one denial lists every failing field', async () => {
    const text = await denial(createEgress(client, NS, 'many', { destinations: ['nope'], strategy: {}, podDisruptionBudget: { minAvailable: '200%' } }));
    assert.equal(
      text,
      `${DENIED} "many" is invalid: [spec.destinations[0]: Invalid value: "nope": invalid CIDR address: nope, ` +
        'spec.strategy.type: Unsupported value: "": supported values: "Recreate", "RollingUpdate", ' +
        'spec.podDisruptionBudget.minAvailable: Invalid value: "200%": must not be greater than 100%]',
    );
  });

  test('a valid Egress using every field is admitted, also as an update', async () => {
    const spec = egressSpec({
      destinations: ['10.0.0.0/8', 'fd00::/8'],
      replicas: 3,
      strategy: { type: 'RollingUpdate', rollingUpdate: { maxSurge: '50%', maxUnavailable: 0 } },
      template: { metadata: { labels: { 'example.com/team': 'net' }, annotations: { 'Example.com/Note': 'free text: any' } }, spec: { containers: [{ name: 'egress' }] } },
      sessionAffinityConfig: { clientIP: { timeoutSeconds: 60 } },
      fouSourcePortAuto: true,
      podDisruptionBudget: { maxUnavailable: '100%' },
      snatAddresses: ['203.0.113.10', '2001:db8::10'],
    });
    const created = await createEgress(client, NS, 'full', spec);
    assert.deepEqual(created.spec.snatAddresses, ['203.0.113.10', '2001:db8::10']);
    await client.mergePatch(Kinds.Egress, { namespace: NS, name: 'full' }, { spec: { podDisruptionBudget: { maxUnavailable: null, minAvailable: 1 } } });
  });

  test('schema rules answer before the webhook: snatAddresses at most 2 items, a set', async () => {
    await assert.rejects(createEgress(client, NS, 'snat3', { snatAddresses: ['203.0.113.10', '2001:db8::10', '198.51.100.1'] }), /spec.snatAddresses: Too many: 3: must have at most 2 items/);
    await assert.rejects(createEgress(client, NS, 'snatdup', { snatAddresses: ['203.0.113.10', '203.0.113.10'] }), /spec.snatAddresses\[1\]: Duplicate value: "203.0.113.10"/);
  });

  test('schema rules answer before the webhook: replicas >= 1, sessionAffinity enum, destinations required', async () => {
    await assert.rejects(createEgress(client, NS, 'zero', { replicas: 0 }), /spec.replicas: Invalid value: 0: spec.replicas in body should be greater than or equal to 1/);
    await assert.rejects(createEgress(client, NS, 'aff', { sessionAffinity: 'ClusterIP' as 'None' }), /spec.sessionAffinity: Unsupported value: "ClusterIP"/);
    await assert.rejects(client.create(Kinds.Egress, { metadata: { namespace: NS, name: 'nodest' }, spec: { replicas: 1 } as EgressSpec }), /spec.destinations: Required value/);
  });

  test('kubectl prints warnings for overridden and ignored fields', async () => {
    const body = {
      apiVersion: 'coil.cybozu.com/v2',
      kind: 'Egress',
      metadata: { namespace: NS, name: 'warned' },
      spec: egressSpec({
        sessionAffinity: 'None', sessionAffinityConfig: { clientIP: { timeoutSeconds: 5 } }, template: { spec: { serviceAccountName: 'mine', containers: [{ name: 'egress' }] } },
        snatAddresses: ['2001:db8::10'],
      }),
    };
    const run = promisify(execFile);
    const child = run(await toolPath('kubectl'), [`--kubeconfig=${cp.kubeconfigPath}`, 'create', '-f', '-']);
    child.child.stdin!.end(JSON.stringify(body));
    const { stderr } = await child;
    assert.match(stderr, /Warning: spec.template.spec.serviceAccountName: replaced by coil-egress/);
    assert.match(stderr, /Warning: spec.sessionAffinityConfig: ignored when sessionAffinity is None/);
    assert.match(stderr, /Warning: spec.snatAddresses\[0\]: no destination of its family; unused/);
    assert.match(stderr, /Warning: spec.snatAddresses: every node with a client pod of this Egress must run coil's coild with --egress-nat-steering/);
  });
});
