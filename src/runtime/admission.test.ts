import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { KubernetesObject } from '@kubernetes/client-node';
import { fieldError } from '../api/v2/field-error.js';
import { mutate, validate, webhookPath, type AdmissionRequest } from './admission.js';
import { applyJsonPatch } from '../../test/support/json-patch-apply.js';
import { createJsonPatch } from './json-patch.js';
import { defineKind } from './kind.js';

const Pool = defineKind({ group: 'coil.cybozu.com', version: 'v2', kind: 'AddressPool', plural: 'addresspools', namespaced: false });

function request(operation: AdmissionRequest['operation'], object?: object, oldObject?: object): AdmissionRequest {
  return { uid: 'u1', kind: { group: 'coil.cybozu.com', version: 'v2', kind: 'AddressPool' }, operation, object: object as KubernetesObject, oldObject: oldObject as KubernetesObject };
}

describe('createJsonPatch', () => {
  const cases: [string, unknown, unknown][] = [
    ['adds a missing nested field', { spec: { a: 1 } }, { spec: { a: 1, b: { c: [1] } } }],
    ['replaces a scalar', { spec: { a: 1 } }, { spec: { a: 2 } }],
    ['removes a field', { spec: { a: 1, b: 2 } }, { spec: { a: 1 } }],
    ['diffs arrays of equal length element-wise', { l: [{ x: 1 }, { x: 2 }] }, { l: [{ x: 1 }, { x: 3, y: 4 }] }],
    ['replaces an array whose length changed', { l: [1, 2] }, { l: [1, 2, 3] }],
    ['escapes ~ and / in keys', { metadata: { labels: {} } }, { metadata: { labels: { 'coil.cybozu.com/pool': 'a', 'x~y': 'b' } } }],
    ['adds a field to an object without it', {}, { spec: { blockSizeBits: 5 } }],
  ];
  for (const [name, from, to] of cases) {
    it(`${name}, and the patch round-trips`, () => {
      const ops = createJsonPatch(from, to);
      assert.ok(ops.length > 0);
      assert.deepEqual(applyJsonPatch(from, ops), to);
    });
  }

  it('is empty for equal documents regardless of key order', () => {
    assert.deepEqual(createJsonPatch({ a: 1, b: { c: 2, d: 3 } }, { b: { d: 3, c: 2 }, a: 1 }), []);
  });

  it('writes escaped pointers', () => {
    assert.deepEqual(createJsonPatch({ m: {} }, { m: { 'a/b': 1 } }), [{ op: 'add', path: '/m/a~1b', value: 1 }]);
  });
});

describe('admission', () => {
  it('derives webhook paths from the GVK as controller-runtime does', () => {
    assert.equal(webhookPath('validate', Pool), '/validate-coil-cybozu-com-v2-addresspool');
    assert.equal(webhookPath('mutate', Pool), '/mutate-coil-cybozu-com-v2-addresspool');
  });

  it('denies with a 422 Invalid that names every field path', async () => {
    const res = await validate(
      { validateCreate: () => [fieldError('spec.subnets[0]', 'host bits set', 'Invalid', '10.0.0.1/24'), fieldError('spec.blockSizeBits', 'must be set', 'Required')] },
      Pool,
      request('CREATE', { metadata: { name: 'p1' } }),
    );
    assert.equal(res.allowed, false);
    assert.equal(res.status?.code, 422);
    assert.equal(res.status?.reason, 'Invalid');
    assert.equal(res.status?.message, 'AddressPool.coil.cybozu.com "p1" is invalid: [spec.subnets[0]: Invalid value: "10.0.0.1/24": host bits set, spec.blockSizeBits: Required: must be set]');
    assert.deepEqual(res.status?.details?.causes?.map((c) => [c.field, c.reason]), [['spec.subnets[0]', 'FieldValueInvalid'], ['spec.blockSizeBits', 'FieldValueRequired']]);
  });

  it('allows with warnings passed through', async () => {
    const res = await validate({ validateUpdate: () => ({ warnings: ['deprecated field'] }) }, Pool, request('UPDATE', { metadata: { name: 'p' } }, { metadata: { name: 'p' } }));
    assert.deepEqual(res, { uid: 'u1', allowed: true, warnings: ['deprecated field'] });
  });

  it('allows operations the validator does not implement', async () => {
    assert.equal((await validate({}, Pool, request('DELETE', undefined, { metadata: { name: 'p' } }))).allowed, true);
  });

  it('denies with 500 when the validator throws, never allows', async () => {
    const res = await validate({ validateCreate: () => { throw new Error('boom'); } }, Pool, request('CREATE', { metadata: { name: 'p' } }));
    assert.equal(res.allowed, false);
    assert.equal(res.status?.code, 500);
    assert.match(res.status?.message ?? '', /boom/);
  });

  it('answers a defaulter with the JSON patch from the request object to the defaulted copy', async () => {
    const obj = { apiVersion: 'coil.cybozu.com/v2', kind: 'AddressPool', metadata: { name: 'p' }, spec: { subnets: [{ ipv4: '10.0.0.0/16' }] } };
    const res = await mutate({ default: (o: KubernetesObject & { spec?: Record<string, unknown> }) => { o.spec!['blockSizeBits'] = 5; } }, Pool, request('CREATE', obj));
    assert.equal(res.allowed, true);
    assert.equal(res.patchType, 'JSONPatch');
    const ops = JSON.parse(Buffer.from(res.patch!, 'base64').toString());
    assert.deepEqual(ops, [{ op: 'add', path: '/spec/blockSizeBits', value: 5 }]);
    assert.deepEqual(obj.spec, { subnets: [{ ipv4: '10.0.0.0/16' }] }, 'the request object itself is not mutated');
  });

  it('sends no patch when defaulting changes nothing', async () => {
    const res = await mutate({ default: () => undefined }, Pool, request('CREATE', { metadata: { name: 'p' } }));
    assert.deepEqual(res, { uid: 'u1', allowed: true });
  });
});
