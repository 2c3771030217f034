import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { status as GrpcStatus } from '@grpc/grpc-js';
import { decodeStatusCniError } from '../../cni-shim/cnirpc.js';
import { readFields } from '../../cni-shim/protobuf.js';
import { CniError, CniErrorCode, STATUS_DETAILS_KEY, toCniError } from './cni-error.js';

/** The trailer bytes as the client will receive them. */
function detailBytes(e: ReturnType<typeof toCniError>): Buffer {
  const [value] = e.metadata.get(STATUS_DETAILS_KEY);
  assert.ok(Buffer.isBuffer(value));
  return value;
}

describe('toCniError', () => {
  it('a CniError keeps its CNI code, message and details, with the paired gRPC code', () => {
    const e = toCniError(new CniError(CniErrorCode.UNKNOWN_CONTAINER, 'pod not found', { details: 'ns/p' }));
    assert.equal(e.code, GrpcStatus.NOT_FOUND);
    assert.equal(e.details, 'pod not found');
    assert.deepEqual(decodeStatusCniError(detailBytes(e)), { code: 3, msg: 'pod not found', details: 'ns/p' });
  });

  it('google.rpc.Status carries the same gRPC code and message as the call status', () => {
    const e = toCniError(new CniError(CniErrorCode.INVALID_ENVIRONMENT_VARIABLES, 'missing pod name/namespace'));
    const fields = readFields(detailBytes(e));
    assert.deepEqual(fields[0], { field: 1, value: GrpcStatus.INVALID_ARGUMENT });
    assert.equal((fields[1]?.value as Buffer).toString(), 'missing pod name/namespace');
  });

  it('any other error becomes Internal with CNI 999 and its message', () => {
    const e = toCniError(new Error('netlink: file exists'));
    assert.equal(e.code, GrpcStatus.INTERNAL);
    assert.deepEqual(decodeStatusCniError(detailBytes(e)), { code: 999, msg: 'netlink: file exists', details: '' });
  });

  it('an explicit gRPC code overrides the default pairing', () => {
    const e = toCniError(new CniError(CniErrorCode.INTERNAL, 'cache not synced', { grpcCode: GrpcStatus.UNAVAILABLE }));
    assert.equal(e.code, GrpcStatus.UNAVAILABLE);
  });

  it('try-again and STATUS codes pair with Unavailable', () => {
    for (const code of [CniErrorCode.TRY_AGAIN_LATER, CniErrorCode.PLUGIN_NOT_AVAILABLE, CniErrorCode.LIMITED_CONNECTIVITY]) {
      assert.equal(new CniError(code, 'x').grpcCode, GrpcStatus.UNAVAILABLE);
    }
  });
});
