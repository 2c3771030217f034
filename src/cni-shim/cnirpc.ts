/**
 * The messages of proto/cnirpc.proto the `coil` executable sends and receives, with their
 * hand-written codecs. Field numbers must match the .proto; shim.test.ts checks them against
 * the real grpc-js server, which reads the .proto.
 *
 * @see docs/compatibility.md#the-cni-grpc-api
 */
import { utf8Text } from './bytes.js';
import { beginMessage, endMessage, finish, protoBuffer, putBytes, putString, putUint, readFields } from './protobuf.js';

/** `pkg.cnirpc.CNI` method paths. */
export const CNI_METHODS = {
  ADD: '/pkg.cnirpc.CNI/Add',
  DEL: '/pkg.cnirpc.CNI/Del',
  CHECK: '/pkg.cnirpc.CNI/Check',
  GC: '/pkg.cnirpc.CNI/GC',
  STATUS: '/pkg.cnirpc.CNI/Status',
} as const;

/** `pkg.cnirpc.CNIArgs` and its GC attachment, under the shim's names (shared with coild). */
import type { CniArgs as CniArgsMessage, CniAttachment as Attachment } from '../cnirpc/cni-args.js';

export type { Attachment, CniArgsMessage };

/** Serializes CNIArgs (fields 1–8 as Coil's, 9 ours). */
export function encodeCniArgs(m: CniArgsMessage): Uint8Array {
  // Room for a typical request without growing: the netconf plus the few short fields around it.
  const b = protoBuffer(512 + m.stdinData.length);
  putString(b, 1, m.containerId);
  putString(b, 2, m.netns);
  putString(b, 3, m.ifname);
  for (const k in m.args) {
    const at = beginMessage(b, 4);
    putString(b, 1, k);
    putString(b, 2, m.args[k] as string);
    endMessage(b, at);
  }
  putString(b, 5, m.path);
  putBytes(b, 6, m.stdinData);
  for (const ip of m.ips) putString(b, 7, ip);
  for (const k in m.interfaces) {
    const at = beginMessage(b, 8);
    putString(b, 1, k);
    putUint(b, 2, m.interfaces[k] ? 1 : 0);
    endMessage(b, at);
  }
  for (const a of m.validAttachments) {
    const at = beginMessage(b, 9);
    putString(b, 1, a.containerId);
    putString(b, 2, a.ifname);
    endMessage(b, at);
  }
  return finish(b);
}

/** Decodes `AddResponse` to its `result` bytes (CNI result JSON). */
export function decodeAddResponse(buf: Uint8Array): Uint8Array {
  let result: Uint8Array = new Uint8Array(0);
  for (const f of readFields(buf)) if (f.field === 1 && typeof f.value !== 'number') result = f.value;
  return result;
}

/** `pkg.cnirpc.CNIError`. */
export interface CniErrorMessage {
  code: number;
  msg: string;
  details: string;
}

/** Type URL of a CNIError packed in `google.protobuf.Any`. */
const CNI_ERROR_TYPE_URL = 'type.googleapis.com/pkg.cnirpc.CNIError';

/**
 * Finds the CNIError among the details of a `google.rpc.Status` (the `grpc-status-details-bin`
 * trailer). Other detail types are ignored, not dereferenced (Coil's nil-pointer bug,
 * docs/compatibility.md#the-cni-executable).
 * @returns undefined when there is no CNIError detail.
 * @throws Error when the bytes are not a valid protobuf message.
 */
export function decodeStatusCniError(statusBytes: Uint8Array): CniErrorMessage | undefined {
  for (const f of readFields(statusBytes)) {
    if (f.field !== 3 || typeof f.value === 'number') continue;
    let typeUrl = '';
    let value: Uint8Array = new Uint8Array(0);
    for (const a of readFields(f.value)) {
      if (a.field === 1 && typeof a.value !== 'number') typeUrl = utf8Text(a.value);
      if (a.field === 2 && typeof a.value !== 'number') value = a.value;
    }
    if (typeUrl !== CNI_ERROR_TYPE_URL) continue;
    const e: CniErrorMessage = { code: 0, msg: '', details: '' };
    for (const c of readFields(value)) {
      if (c.field === 1 && typeof c.value === 'number') e.code = c.value;
      if (c.field === 2 && typeof c.value !== 'number') e.msg = utf8Text(c.value);
      if (c.field === 3 && typeof c.value !== 'number') e.details = utf8Text(c.value);
    }
    return e;
  }
  return undefined;
}
