/**
 * The retry contract, written once. A reconciler ends by returning a {@link Result} or throwing:
 *
 * | outcome                         | queue action                                              |
 * |---------------------------------|-----------------------------------------------------------|
 * | `{}`                            | forget the key's failures; wait for the next event/resync |
 * | `{ requeueAfterMs }`            | forget failures; re-enqueue after the delay               |
 * | throw {@link TransientError}    | count a failure; retry after `delayMs` or the backoff     |
 * | throw {@link PermanentError}    | log, count, Warning Event; never retried                  |
 * | throw a stale write ({@link isStaleWrite}) | no error: debug log, `result="requeue"`; retry after the per-key backoff |
 * | throw anything else             | as TransientError without a delay (per-key backoff)       |
 *
 * A stale write is the normal price of writing from an informer cache, not a failure: a reconcile
 * that runs again before the watch has delivered its own previous write (or anyone's) decides on
 * an old resourceVersion, and the apiserver refuses the guarded write. The watch event of the
 * newer version enqueues the key again anyway. Counted as errors, they made a pool created
 * without the webhook (its finalizer added by the AddressPool reconciler, then a block event
 * arriving before the watch delivered that write) log "reconcile failed" and move
 * `controller_runtime_reconcile_errors_total`, which the dashboard plots. knative's controller
 * treats conflicts the same way (knative/pkg#3289). A contention that never ends still shows, in
 * `controller_runtime_reconcile_total{result="requeue"}` and `workqueue_retries_total`.
 *
 * There is no boolean `requeue` and a Result cannot travel with an error: both were sources of
 * confusion in controller-runtime (`Result.Requeue` is deprecated; a Result returned with an
 * error is dropped with only a warning).
 *
 * @see controller-runtime `pkg/reconcile/reconcile.go`, kopf `TemporaryError`/`PermanentError`
 */
export interface Result {
  /** Reconcile this key again after this many milliseconds even without an event. */
  readonly requeueAfterMs?: number;
}

/**
 * A failure expected to go away by itself (a conflict, a missing dependency, an API outage).
 * The key is retried after `delayMs` when given, otherwise after the per-key exponential backoff.
 */
export class TransientError extends Error {
  override readonly name = 'TransientError';
  constructor(message: string, readonly delayMs?: number, options?: ErrorOptions) {
    super(message, options);
  }
}

/**
 * A failure retrying cannot fix (an invalid spec the webhook could not catch, a pool that can
 * never fit). Logged, counted in `controller_runtime_terminal_reconcile_errors_total`, reported as
 * a Warning Event on the object, and not retried until the object changes.
 */
export class PermanentError extends Error {
  override readonly name = 'PermanentError';
}

/**
 * A non-2xx answer of the API server. `status` is the decoded `metav1.Status` when the server
 * sent one, so callers branch on `code`/`reason` instead of parsing messages.
 *
 * @see Kubernetes API conventions, "HTTP status codes" and "Response Status Kind"
 */
export class ApiError extends Error {
  override readonly name = 'ApiError';
  constructor(
    /** HTTP status code (404, 409, 410, 422, …); 0 when no answer arrived. */
    readonly code: number,
    /** `Status.reason` (`NotFound`, `Conflict`, `AlreadyExists`, `Invalid`, `Expired`…) or `''`. */
    readonly reason: string,
    message: string,
    /** The decoded Status body, when there was one. */
    readonly status?: KubeStatus,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/** The subset of `metav1.Status` the runtime reads and writes. */
export interface KubeStatus {
  apiVersion?: 'v1';
  kind?: 'Status';
  status?: 'Success' | 'Failure';
  code?: number;
  reason?: string;
  message?: string;
  details?: {
    name?: string;
    group?: string;
    kind?: string;
    causes?: { reason?: string; message?: string; field?: string }[];
  };
}

/** 404: the object (or its namespace, or the resource) does not exist. */
export function isNotFound(e: unknown): boolean {
  return e instanceof ApiError && e.code === 404;
}

/**
 * 409: a write lost an optimistic-concurrency race (`Conflict`) or a create found the name taken
 * (`AlreadyExists`). Use {@link isAlreadyExists} to tell them apart.
 */
export function isConflict(e: unknown): boolean {
  return e instanceof ApiError && e.code === 409;
}

/** 409 with reason `AlreadyExists`: a create raced with another creator. */
export function isAlreadyExists(e: unknown): boolean {
  return e instanceof ApiError && e.code === 409 && e.reason === 'AlreadyExists';
}

/**
 * 422 from a JSON patch whose `test` op failed: the object changed since it was read. The API
 * server reports this as a bare `Invalid` ("the server rejected our request due to an error in
 * our request") without field causes, which tells it apart from a schema or webhook rejection of
 * the patched object (those name their fields in `details.causes`).
 */
export function isPatchTestFailed(e: unknown): boolean {
  return e instanceof ApiError && e.code === 422 && !(e.status?.details?.causes?.length ?? 0);
}

/**
 * A write refused because the object changed since it was read: 409 `Conflict` (a stale
 * resourceVersion or uid precondition — not `AlreadyExists`, which a create meets on a name that
 * may stay taken) or a failed JSON-patch `test` op ({@link isPatchTestFailed}). Retrying after the
 * cache caught up is the whole remedy.
 */
export function isStaleWrite(e: unknown): boolean {
  return (isConflict(e) && !isAlreadyExists(e)) || isPatchTestFailed(e);
}

/** 410: the watch resourceVersion is older than etcd's compaction window; the caller must relist. */
export function isGone(e: unknown): boolean {
  return e instanceof ApiError && e.code === 410;
}
