/**
 * A validation failure at one field path, the TypeScript counterpart of Kubernetes'
 * `field.Error` (k8s.io/apimachinery/pkg/util/validation/field). Webhooks turn a list of these
 * into a 422 `Invalid` status whose causes name every path.
 *
 * @see Kubernetes API conventions, "Validation" / `metav1.StatusCause`
 */
export interface FieldError {
  /** JSON-ish path as Kubernetes prints it: `spec.subnets[1]`, `spec.template.metadata.labels`. */
  readonly field: string;
  /** Kubernetes `field.ErrorType` reason. */
  readonly type: 'Invalid' | 'Required' | 'Forbidden' | 'NotSupported' | 'Duplicate' | 'TooLong';
  /** Human-readable detail, without the field path (the path is prefixed when formatted). */
  readonly detail: string;
  /** The offending value, if it helps the reader (printed as JSON). */
  readonly value?: unknown;
}

/** Builds a FieldError; `type` defaults to `Invalid`. */
export function fieldError(field: string, detail: string, type: FieldError['type'] = 'Invalid', value?: unknown): FieldError {
  return value === undefined ? { field, type, detail } : { field, type, detail, value };
}

/**
 * Formats one error as kubectl shows it: `spec.subnets[1]: Invalid value: "10.0.0.1/24": host bits set`.
 * @see k8s.io/apimachinery field.Error.Error()
 */
export function formatFieldError(e: FieldError): string {
  const kind = e.type === 'Invalid' ? 'Invalid value' : e.type === 'NotSupported' ? 'Unsupported value' : e.type;
  const value = e.value === undefined ? '' : ` ${JSON.stringify(e.value)}:`;
  return e.type === 'Invalid' || e.type === 'NotSupported'
    ? `${e.field}: ${kind}:${value} ${e.detail}`
    : `${e.field}: ${kind}: ${e.detail}`;
}

/** Joins errors the way apierrors.NewInvalid does: `[a, b]` for more than one. */
export function formatFieldErrors(errors: readonly FieldError[]): string {
  const parts = errors.map(formatFieldError);
  return parts.length === 1 ? parts[0]! : `[${parts.join(', ')}]`;
}
