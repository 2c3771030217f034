import type { KubernetesObject } from '@kubernetes/client-node';
import { formatFieldError, formatFieldErrors, type FieldError } from '../api/v2/field-error.js';
import type { KubeStatus } from './errors.js';
import { createJsonPatch } from './json-patch.js';
import type { KindDescriptor } from './kind.js';
import type { Defaulter, Validator, Verdict } from './registry.js';

/** `admission.k8s.io/v1` AdmissionRequest (the fields the runtime reads). */
export interface AdmissionRequest {
  readonly uid: string;
  readonly kind: { group: string; version: string; kind: string };
  readonly name?: string;
  readonly namespace?: string;
  readonly operation: 'CREATE' | 'UPDATE' | 'DELETE' | 'CONNECT';
  readonly object?: KubernetesObject | null;
  readonly oldObject?: KubernetesObject | null;
  readonly dryRun?: boolean;
}

/** `admission.k8s.io/v1` AdmissionResponse. */
export interface AdmissionResponse {
  uid: string;
  allowed: boolean;
  status?: KubeStatus;
  patchType?: 'JSONPatch';
  /** Base64 of the JSON patch. */
  patch?: string;
  warnings?: string[];
}

/** An AdmissionReview as sent and answered over HTTPS. */
export interface AdmissionReview {
  apiVersion: 'admission.k8s.io/v1';
  kind: 'AdmissionReview';
  request?: AdmissionRequest;
  response?: AdmissionResponse;
}

/**
 * URL path of a webhook, derived from the GVK exactly as controller-runtime does, so paths match
 * Coil's: `/validate-coil-cybozu-com-v2-addresspool`, `/mutate-coil-cybozu-com-v2-egress`.
 * @see controller-runtime `pkg/builder/webhook.go` generateValidatePath/generateMutatePath
 */
export function webhookPath(prefix: 'validate' | 'mutate', kind: KindDescriptor): string {
  return `/${prefix}-${kind.group.replace(/\./g, '-')}-${kind.version}-${kind.kind.toLowerCase()}`;
}

const CAUSE_REASON: Record<FieldError['type'], string> = {
  Invalid: 'FieldValueInvalid',
  Required: 'FieldValueRequired',
  Forbidden: 'FieldValueForbidden',
  NotSupported: 'FieldValueNotSupported',
  Duplicate: 'FieldValueDuplicate',
  TooLong: 'FieldValueTooLong',
};

/**
 * The 422 `Invalid` Status that `apierrors.NewInvalid` builds: the message names every field
 * (`AddressPool.coil.cybozu.com "p" is invalid: [spec.a: …, spec.b: …]`) and `details.causes`
 * carries one cause per field, so kubectl and clients print the paths.
 * @see Kubernetes API conventions, "Validation"; k8s.io/apimachinery `errors.NewInvalid`
 */
export function invalidStatus(kind: KindDescriptor, name: string, errors: readonly FieldError[]): KubeStatus {
  const qualified = kind.group ? `${kind.kind}.${kind.group}` : kind.kind;
  return {
    status: 'Failure',
    code: 422,
    reason: 'Invalid',
    message: `${qualified} "${name}" is invalid: ${formatFieldErrors(errors)}`,
    details: {
      name,
      group: kind.group,
      kind: kind.kind,
      causes: errors.map((e) => ({ reason: CAUSE_REASON[e.type], message: formatFieldError(e).slice(e.field.length + 2), field: e.field })),
    },
  };
}

/** A denial with an arbitrary status (not-ready, handler failure, malformed request). */
export function deny(uid: string, code: number, message: string, reason = ''): AdmissionResponse {
  return { uid, allowed: false, status: { status: 'Failure', code, reason, message } };
}

/**
 * Runs a {@link Validator} on one request. Missing methods allow. A thrown error denies with 500
 * rather than allowing: `failurePolicy: Fail` semantics must not depend on the handler's bugs.
 */
export async function validate(v: Validator, kind: KindDescriptor, req: AdmissionRequest): Promise<AdmissionResponse> {
  const name = nameOf(req);
  let verdict: Verdict = undefined;
  try {
    if (req.operation === 'CREATE' && req.object) verdict = await v.validateCreate?.(req.object);
    else if (req.operation === 'UPDATE' && req.object && req.oldObject) verdict = await v.validateUpdate?.(req.oldObject, req.object);
    else if (req.operation === 'DELETE' && req.oldObject) verdict = await v.validateDelete?.(req.oldObject);
  } catch (e) {
    return deny(req.uid, 500, `validation of ${kind.kind} "${name}" failed: ${(e as Error).message}`, 'InternalError');
  }
  const { errors, warnings } = normalise(verdict);
  const res: AdmissionResponse = errors.length ? { uid: req.uid, allowed: false, status: invalidStatus(kind, name, errors) } : { uid: req.uid, allowed: true };
  if (warnings.length) res.warnings = [...warnings];
  return res;
}

/**
 * Runs a {@link Defaulter} on a private copy of the request object and answers with the JSON
 * patch from the original to the copy (no patch when nothing changed).
 */
export async function mutate(d: Defaulter, kind: KindDescriptor, req: AdmissionRequest): Promise<AdmissionResponse> {
  if (!req.object || req.operation === 'DELETE') return { uid: req.uid, allowed: true };
  const copy = structuredClone(req.object);
  try {
    await d.default(copy);
  } catch (e) {
    return deny(req.uid, 500, `defaulting of ${kind.kind} "${nameOf(req)}" failed: ${(e as Error).message}`, 'InternalError');
  }
  const ops = createJsonPatch(req.object, copy);
  if (ops.length === 0) return { uid: req.uid, allowed: true };
  return { uid: req.uid, allowed: true, patchType: 'JSONPatch', patch: Buffer.from(JSON.stringify(ops)).toString('base64') };
}

function nameOf(req: AdmissionRequest): string {
  const meta = (req.object ?? req.oldObject)?.metadata;
  return req.name || meta?.name || meta?.generateName || '';
}

function normalise(v: Verdict): { errors: readonly FieldError[]; warnings: readonly string[] } {
  if (!v) return { errors: [], warnings: [] };
  if (Array.isArray(v)) return { errors: v, warnings: [] };
  const o = v as { errors?: readonly FieldError[]; warnings?: readonly string[] };
  return { errors: o.errors ?? [], warnings: o.warnings ?? [] };
}
