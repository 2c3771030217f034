/**
 * CNI errors raised by coild's CNI handler and their one mapping onto gRPC: Coil's `newError`,
 * which sets both a gRPC status code and a `pkg.cnirpc.CNIError` status detail, so the `coil`
 * executable can print the CNI code the handler chose.
 *
 * @see docs/compatibility.md#the-cni-grpc-api (CNIError as a status detail),
 *   docs/compatibility.md#the-cni-executable (its decoding)
 * @see CNI spec SPEC.md "Error codes"
 */
import { Metadata, status as GrpcStatus } from '@grpc/grpc-js';

import { CniErrorCode } from '../../cnirpc/error-code.js';

export { CniErrorCode };

/** Options of {@link CniError}. */
export interface CniErrorOptions extends ErrorOptions {
  /** Longer explanation, printed as the CNI error's `details`. Default: empty. */
  details?: string;
  /** gRPC status code; default derived from the CNI code by {@link grpcCodeFor}. */
  grpcCode?: GrpcStatus;
}

/**
 * A failure with a CNI error code, thrown by a `CniHandler`. Any other thrown value reaches the
 * runtime as CNI `INTERNAL` (999), as in Coil.
 */
export class CniError extends Error {
  override readonly name = 'CniError';
  readonly details: string;
  readonly grpcCode: GrpcStatus;

  constructor(
    readonly code: CniErrorCode,
    msg: string,
    options: CniErrorOptions = {},
  ) {
    super(msg, options);
    this.details = options.details ?? '';
    this.grpcCode = options.grpcCode ?? grpcCodeFor(code);
  }
}

/**
 * The gRPC code Coil pairs with each CNI code (`coild_server.go`): bad input is InvalidArgument,
 * an unknown container NotFound, "try again" and STATUS failures Unavailable, the rest Internal.
 */
export function grpcCodeFor(code: CniErrorCode): GrpcStatus {
  switch (code) {
    case CniErrorCode.INCOMPATIBLE_CNI_VERSION:
    case CniErrorCode.UNSUPPORTED_FIELD:
    case CniErrorCode.INVALID_ENVIRONMENT_VARIABLES:
    case CniErrorCode.DECODING_FAILURE:
    case CniErrorCode.INVALID_NETWORK_CONFIG:
      return GrpcStatus.INVALID_ARGUMENT;
    case CniErrorCode.UNKNOWN_CONTAINER:
      return GrpcStatus.NOT_FOUND;
    case CniErrorCode.TRY_AGAIN_LATER:
    case CniErrorCode.PLUGIN_NOT_AVAILABLE:
    case CniErrorCode.LIMITED_CONNECTIVITY:
      return GrpcStatus.UNAVAILABLE;
    default:
      return GrpcStatus.INTERNAL;
  }
}

/** What grpc-js sends for a failed call: status code, message, and trailers with the detail. */
export interface GrpcCallError {
  code: GrpcStatus;
  details: string;
  metadata: Metadata;
}

/** Type URL of the CNIError detail inside `google.rpc.Status.details` (an `Any`). */
export const CNI_ERROR_TYPE_URL = 'type.googleapis.com/pkg.cnirpc.CNIError';
/** Trailer that carries the serialized `google.rpc.Status`. */
export const STATUS_DETAILS_KEY = 'grpc-status-details-bin';

/**
 * Maps anything a handler threw to the call's gRPC status, with a `CNIError` detail in the
 * `grpc-status-details-bin` trailer. A {@link CniError} keeps its codes and details; anything
 * else becomes gRPC Internal with CNI `INTERNAL` (999) and the error's message.
 * @see docs/compatibility.md#the-cni-grpc-api (Coil's `newError(grpcCode, cniCode, msg, details)`)
 */
export function toCniError(err: unknown): GrpcCallError {
  const e =
    err instanceof CniError
      ? err
      : new CniError(CniErrorCode.INTERNAL, err instanceof Error ? err.message : String(err), { cause: err });
  const cniError = encodeCniErrorMessage(e.code, e.message, e.details);
  const any = concat(lenField(1, Buffer.from(CNI_ERROR_TYPE_URL)), lenField(2, cniError));
  const rpcStatus = concat(varintField(1, e.grpcCode), lenField(2, Buffer.from(e.message)), lenField(3, any));
  const metadata = new Metadata();
  metadata.set(STATUS_DETAILS_KEY, rpcStatus);
  return { code: e.grpcCode, details: e.message, metadata };
}

/**
 * Serializes `pkg.cnirpc.CNIError {code=1, msg=2, details=3}` by hand: three fields do not
 * justify loading protobufjs' reflection for every failed call.
 */
export function encodeCniErrorMessage(code: number, msg: string, details: string): Buffer {
  return concat(varintField(1, code), lenField(2, Buffer.from(msg)), lenField(3, Buffer.from(details)));
}

// Proto3 omits fields holding the default value; the decoder restores them.
function varintField(field: number, value: number): Buffer {
  return value === 0 ? Buffer.alloc(0) : Buffer.concat([varint(field << 3), varint(value)]);
}

function lenField(field: number, bytes: Buffer): Buffer {
  return bytes.length === 0 ? Buffer.alloc(0) : Buffer.concat([varint((field << 3) | 2), varint(bytes.length), bytes]);
}

function varint(value: number): Buffer {
  const out: number[] = [];
  let v = value;
  while (v > 0x7f) {
    out.push((v & 0x7f) | 0x80);
    v = Math.floor(v / 128);
  }
  out.push(v);
  return Buffer.from(out);
}

function concat(...parts: Buffer[]): Buffer {
  return Buffer.concat(parts);
}
