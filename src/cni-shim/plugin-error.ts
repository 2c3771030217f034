/**
 * The error the `coil` executable reports to the runtime: CNI's `{cniVersion, code, msg,
 * details}` on stdout and a non-zero exit.
 *
 * @see CNI spec SPEC.md "Error" and "Error codes"
 */

/** CNI well-known error codes (the `pkg.cnirpc.ErrorCode` numbers), under the shim's name. */
export { CniErrorCode as ErrorCode } from '../cnirpc/error-code.js';

/** A failure with a CNI error code; `details` is optional context for humans. */
export class PluginError extends Error {
  override readonly name = 'PluginError';

  constructor(
    readonly code: number,
    msg: string,
    readonly details = '',
    options?: ErrorOptions,
  ) {
    super(msg, options);
  }

  /**
   * The CNI error object. `cniVersion` is the netconf's when known; the spec asks for the
   * version the runtime requested, and 1.1.0 when it could not be read.
   */
  toCniJson(cniVersion: string): { cniVersion: string; code: number; msg: string; details?: string } {
    return this.details === ''
      ? { cniVersion, code: this.code, msg: this.message }
      : { cniVersion, code: this.code, msg: this.message, details: this.details };
  }
}
