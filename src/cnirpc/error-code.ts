/**
 * CNI well-known error codes as `pkg.cnirpc.ErrorCode` in proto/cnirpc.proto carries them
 * (Coil's numbers, plus CNI 1.1's 50/51 for STATUS). Shared by both ends of the wire: coild
 * sets them in a `CNIError` status detail, the `coil` executable prints them. Pure constants,
 * so the shim can import them without cost.
 *
 * @see CNI spec SPEC.md "Error codes"; docs/compatibility.md#the-cni-grpc-api
 */
export const CniErrorCode = {
  UNKNOWN: 0,
  INCOMPATIBLE_CNI_VERSION: 1,
  UNSUPPORTED_FIELD: 2,
  UNKNOWN_CONTAINER: 3,
  INVALID_ENVIRONMENT_VARIABLES: 4,
  IO_FAILURE: 5,
  DECODING_FAILURE: 6,
  INVALID_NETWORK_CONFIG: 7,
  TRY_AGAIN_LATER: 11,
  PLUGIN_NOT_AVAILABLE: 50,
  LIMITED_CONNECTIVITY: 51,
  INTERNAL: 999,
} as const;

/** One of {@link CniErrorCode}'s values. */
export type CniErrorCode = (typeof CniErrorCode)[keyof typeof CniErrorCode];
