/**
 * The AddressPool webhooks called by the real apiserver over HTTPS: the finalizer is added on
 * create, and every validation rule (Coil's and ours, on create and update, across pools) denies
 * with its exact message naming the field.
 */
import 'reflect-metadata';
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { AddressPoolSpec, SubnetSet } from '../../src/api/v2/addresspool.js';
import { coilCrds } from '../../src/api/v2/crd.js';
import { FIN_COIL } from '../../src/api/v2/keys.js';
import { Kinds } from '../../src/api/v2/kinds.js';
import { validate } from '../../src/runtime/admission.js';
import { ApiTransport } from '../../src/runtime/api-transport.js';
import { Cache } from '../../src/runtime/cache.js';
import { ApiError } from '../../src/runtime/errors.js';
import { silentLogger } from '../../src/runtime/logging.js';
import type { Manager } from '../../src/runtime/manager.js';
import { Registry } from '../../src/runtime/registry.js';
import { AddressPoolValidator } from '../../src/webhooks/addresspool.js';
import { addIpam } from '../../src/controller/ipam-registry.js';
import type { Client } from '../../src/runtime/client.js';
import { ControlPlane, eventually } from './control-plane.js';
import { adminClient, createPool, ipamManager, registerWebhooks } from './controller-support.js';

const DENIED = 'admission webhook "vaddresspool.coil.cybozu.com" denied the request: AddressPool.coil.cybozu.com';

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

const spec = (blockSizeBits: number, ...subnets: SubnetSet[]): AddressPoolSpec => ({ blockSizeBits, subnets });

describe('AddressPool webhooks through the real apiserver', () => {
  let cp: ControlPlane;
  let mgr: Manager;
  let client: Client;

  before(async () => {
    cp = await ControlPlane.start({ crds: coilCrds() });
    mgr = await ipamManager(cp, { webhooks: true });
    await mgr.start();
    await registerWebhooks(cp, addIpam(new Registry(), { addressPool: false, blockRequest: false, gc: false }), mgr.ports.webhook!, 'coilv2-ipam');
    client = adminClient(cp);
    // The apiserver loads webhook configurations asynchronously; wait until the mutator acts.
    await eventually(async () => {
      const name = `probe-${Date.now()}`;
      const p = await createPool(client, name, { subnets: [{ ipv4: '192.168.255.0/24' }] });
      await client.removeFinalizer(Kinds.AddressPool, p, FIN_COIL);
      await client.delete(Kinds.AddressPool, { name });
      return p.metadata?.finalizers?.includes(FIN_COIL) === true;
    });
    await createPool(client, 'other', spec(5, { ipv4: '10.0.0.0/16', ipv6: 'fd00::/112' }));
    await createPool(client, 'grow', spec(5, { ipv4: '10.50.0.0/24' }, { ipv4: '10.53.0.0/24' }));
    // The validator reads other pools from the cache: wait until it holds both.
    await eventually(() => mgr.cache.list(Kinds.AddressPool).length === 2);
  });
  after(async () => {
    await mgr?.stop();
    await cp?.stop();
  });

  test('the mutating webhook adds the coil.cybozu.com finalizer on create', async () => {
    const p = await createPool(client, 'plain', spec(5, { ipv4: '10.60.0.0/24' }));
    assert.deepEqual(p.metadata?.finalizers, [FIN_COIL]);
  });

  const createCases: [string, AddressPoolSpec, string][] = [
    ['an item with neither ipv4 nor ipv6 (Coil)', spec(5, {}), 'spec.subnets[0]: Invalid value: "": invalid subnet'],
    ['an unparsable IPv4 CIDR (Coil)', spec(5, { ipv4: 'a.b.c.d/16' }), 'spec.subnets[0]: Invalid value: "": invalid CIDR address: a.b.c.d/16'],
    ['an unparsable IPv6 CIDR (Coil)', spec(5, { ipv6: 'q293::/112' }), 'spec.subnets[0]: Invalid value: "": invalid CIDR address: q293::/112'],
    ['an IPv6 CIDR in the ipv4 field (Coil)', spec(2, { ipv4: 'fd01::/120' }), 'spec.subnets[0]: Invalid value: "": invalid IPv4 subnet: fd01::/120'],
    ['an IPv4 CIDR in the ipv6 field (Coil)', spec(2, { ipv6: '10.70.0.0/24' }), 'spec.subnets[0]: Invalid value: "": invalid IPv6 subnet: 10.70.0.0/24'],
    ['a subnet narrower than a block (Coil)', spec(5, { ipv4: '10.70.0.0/30' }), 'spec.subnets[0]: Invalid value: "": too narrow subnet: 10.70.0.0/30'],
    ['dual-stack halves of different sizes (Coil)', spec(2, { ipv4: '10.70.0.0/24', ipv6: 'fd01::/112' }), 'spec.subnets[0]: Invalid value: "": dual stack subnet must be the same size'],
    ['blockSizeBits above 16', spec(17, { ipv4: '11.0.0.0/8' }), 'spec.blockSizeBits: Invalid value: 17: must be an integer between 0 and 16, inclusive'],
    ['host bits set in the CIDR', spec(5, { ipv4: '10.70.0.1/24' }), 'spec.subnets[0].ipv4: Invalid value: "10.70.0.1/24": host bits are set; did you mean 10.70.0.0/24'],
    ['items of different families', spec(5, { ipv4: '10.70.0.0/24' }, { ipv6: 'fd01::/120' }), 'spec.subnets[1]: Invalid value: {"ipv6":"fd01::/120"}: must have the same address families as spec.subnets[0] (ipv4), not ipv6'],
    ['two items of the pool overlapping', spec(5, { ipv4: '10.70.0.0/16' }, { ipv4: '10.70.1.0/24' }), 'spec.subnets[1].ipv4: Invalid value: "10.70.1.0/24": overlaps spec.subnets[0].ipv4 (10.70.0.0/16)'],
    ['a subnet overlapping another pool', spec(5, { ipv4: '10.0.3.0/24' }), 'spec.subnets[0].ipv4: Invalid value: "10.0.3.0/24": overlaps 10.0.0.0/16 of AddressPool "other" (spec.subnets[0].ipv4)'],
    ['an IPv6 half overlapping another pool', spec(5, { ipv4: '10.71.0.0/24', ipv6: 'fd00::100/120' }), 'spec.subnets[0].ipv6: Invalid value: "fd00::100/120": overlaps fd00::/112 of AddressPool "other" (spec.subnets[0].ipv6)'],
  ];
  createCases.forEach(([what, s, message], i) => {
    test(`create denies ${what}`, async () => {
      const name = `bad-${i}`;
      assert.equal(await denial(createPool(client, name, s)), `${DENIED} "${name}" is invalid: ${message}`);
    });
  });

  test('create lists every failing field in one denial', async () => {
    const text = await denial(createPool(client, 'many', spec(17, { ipv4: '10.0.0.0/24' }, {})));
    assert.equal(
      text,
      `${DENIED} "many" is invalid: [spec.blockSizeBits: Invalid value: 17: must be an integer between 0 and 16, inclusive, ` +
        'spec.subnets[0]: Invalid value: "": too narrow subnet: 10.0.0.0/24, ' +
        'spec.subnets[1]: Invalid value: "": invalid subnet, ' +
        'spec.subnets[0].ipv4: Invalid value: "10.0.0.0/24": overlaps 10.0.0.0/16 of AddressPool "other" (spec.subnets[0].ipv4)]',
    );
  });

  const G0 = { ipv4: '10.50.0.0/24' };
  const G1 = { ipv4: '10.53.0.0/24' };
  const updateCases: [string, AddressPoolSpec, string][] = [
    ['a changed blockSizeBits (Coil)', spec(4, G0, G1), 'spec.blockSizeBits: Forbidden: unchangeable'],
    ['removed subnets (Coil)', spec(5, G0), 'spec.subnets: Forbidden: unshrinkable'],
    ['a changed existing subnet (Coil)', spec(5, G0, { ipv4: '10.53.0.0/23' }), 'spec.subnets[1]: Forbidden: unchangeable'],
    ['an appended subnet narrower than a block (Coil)', spec(5, G0, G1, { ipv4: '10.51.0.0/30' }), 'spec.subnets[2]: Invalid value: "": too narrow subnet: 10.51.0.0/30'],
    ['an appended subnet overlapping the pool', spec(5, G0, G1, { ipv4: '10.50.0.128/25' }), 'spec.subnets[2].ipv4: Invalid value: "10.50.0.128/25": overlaps spec.subnets[0].ipv4 (10.50.0.0/24)'],
    ['an appended subnet overlapping another pool', spec(5, G0, G1, { ipv4: '10.0.9.0/24' }), 'spec.subnets[2].ipv4: Invalid value: "10.0.9.0/24": overlaps 10.0.0.0/16 of AddressPool "other" (spec.subnets[0].ipv4)'],
    ['an appended subnet of another family', spec(5, G0, G1, { ipv6: 'fd02::/120' }), 'spec.subnets[2]: Invalid value: {"ipv6":"fd02::/120"}: must have the same address families as spec.subnets[0] (ipv4), not ipv6'],
  ];
  for (const [what, s, message] of updateCases) {
    test(`update denies ${what}`, async () => {
      const text = await denial(client.mergePatch(Kinds.AddressPool, { name: 'grow' }, { spec: s }));
      assert.equal(text, `${DENIED} "grow" is invalid: ${message}`);
    });
  }

  test('update admits an appended subnet that overlaps nothing', async () => {
    const p = await client.mergePatch(Kinds.AddressPool, { name: 'grow' }, { spec: { subnets: [{ ipv4: '10.50.0.0/24' }, { ipv4: '10.53.0.0/24' }, { ipv4: '10.52.0.0/24' }] } });
    assert.equal(p.spec.subnets.length, 3);
  });

  test('a pool overlapping one created after it is denied, the first stays admitted', async () => {
    await createPool(client, 'first', spec(5, { ipv6: 'fd10::/112' }));
    await eventually(() => mgr.cache.get(Kinds.AddressPool, { name: 'first' }) !== undefined);
    const text = await denial(createPool(client, 'second', spec(5, { ipv6: 'fd10::8000/113' })));
    assert.equal(text, `${DENIED} "second" is invalid: spec.subnets[0].ipv6: Invalid value: "fd10::8000/113": overlaps fd10::/112 of AddressPool "first" (spec.subnets[0].ipv6)`);
  });

  test('the validator denies, asking for a retry, while its cache is not synced', async () => {
    const cache = new Cache(new ApiTransport(cp.kubeConfig), silentLogger());
    cache.ensure(Kinds.AddressPool);
    const res = await validate(new AddressPoolValidator(cache), Kinds.AddressPool, {
      uid: 'u1',
      kind: { group: 'coil.cybozu.com', version: 'v2', kind: 'AddressPool' },
      operation: 'CREATE',
      object: { apiVersion: 'coil.cybozu.com/v2', kind: 'AddressPool', metadata: { name: 'x' }, spec: spec(5, { ipv4: '10.90.0.0/24' }) } as never,
    });
    assert.equal(res.allowed, false);
    assert.match(res.status?.message ?? '', /AddressPool cache is not synced yet; retry later/);
  });
});
