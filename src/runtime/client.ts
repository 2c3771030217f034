import type { KubernetesObject } from '@kubernetes/client-node';
import type { ApiTransport } from './api-transport.js';
import { isNotFound } from './errors.js';
import { apiVersionOf, collectionPath, objectKeyOf, objectPath, type KindDescriptor, type ObjectKey } from './kind.js';

/** One RFC 6902 operation. */
export interface JsonPatchOp {
  readonly op: 'add' | 'remove' | 'replace' | 'test' | 'move' | 'copy';
  readonly path: string;
  readonly value?: unknown;
  readonly from?: string;
}

/** Options of a write guarded by optimistic concurrency. */
export interface Precondition {
  /**
   * Fail with 409 (merge patch) or 422 (JSON patch `test`) unless the object still has this
   * resourceVersion. Use the version the decision was based on, so a concurrent writer is never
   * overwritten (Kubernetes API conventions, "Concurrency Control and Consistency").
   */
  readonly resourceVersion?: string;
}

/** Selectors of a list call (Kubernetes label/field selector syntax). */
export interface ListOptions {
  readonly namespace?: string;
  readonly labelSelector?: string;
  readonly fieldSelector?: string;
}

const MERGE = 'application/merge-patch+json';
const JSON_PATCH = 'application/json-patch+json';
const APPLY = 'application/apply-patch+yaml';

/**
 * Typed writes (and uncached reads) against the API server. Reconcilers read through the
 * {@link Cache}; they use this client to write and, rarely, to read what the cache cannot know yet
 * (e.g. right after a create).
 *
 * Every method takes a {@link KindDescriptor}; paths, apiVersion and kind are derived from it.
 * Status goes through the `/status` subresource. Finalizers are changed by a JSON patch guarded
 * by a `test` of resourceVersion, because a merge patch of `metadata.finalizers` replaces the
 * whole list and silently drops another controller's concurrent addition.
 *
 * @throws ApiError from every method on a non-2xx answer, except where "undefined on 404" is stated
 */
export class Client {
  constructor(
    private readonly transport: ApiTransport,
    /** `fieldManager` of server-side apply and of every write (shows in `managedFields`). */
    readonly fieldManager: string,
  ) {}

  /** Reads one object from the API server. @returns undefined on 404 */
  async get<T extends KubernetesObject>(kind: KindDescriptor<T>, key: ObjectKey): Promise<T | undefined> {
    try {
      return await this.transport.request<T>({ method: 'GET', path: objectPath(kind, key) });
    } catch (e) {
      if (isNotFound(e)) return undefined;
      throw e;
    }
  }

  /** Lists objects (all pages) from the API server, bypassing the cache. */
  async list<T extends KubernetesObject>(kind: KindDescriptor<T>, opts: ListOptions = {}): Promise<T[]> {
    const items: T[] = [];
    let cont: string | undefined;
    do {
      const page = await this.transport.request<{ items: T[]; metadata?: { continue?: string } }>({
        method: 'GET',
        path: collectionPath(kind, opts.namespace),
        query: { labelSelector: opts.labelSelector, fieldSelector: opts.fieldSelector, limit: 500, continue: cont },
      });
      items.push(...page.items);
      cont = page.metadata?.continue || undefined;
    } while (cont);
    return items;
  }

  /** Creates `obj`; apiVersion and kind are filled from the descriptor. @throws ApiError 409 AlreadyExists */
  create<T extends KubernetesObject>(kind: KindDescriptor<T>, obj: T): Promise<T> {
    const body = { ...obj, apiVersion: apiVersionOf(kind), kind: kind.kind };
    return this.transport.request<T>({ method: 'POST', path: collectionPath(kind, obj.metadata?.namespace), body, query: { fieldManager: this.fieldManager } });
  }

  /** Replaces `obj` (PUT); its metadata.resourceVersion is the precondition. @throws ApiError 409 Conflict */
  update<T extends KubernetesObject>(kind: KindDescriptor<T>, obj: T, subresource?: 'status'): Promise<T> {
    const body = { ...obj, apiVersion: apiVersionOf(kind), kind: kind.kind };
    return this.transport.request<T>({ method: 'PUT', path: objectPath(kind, objectKeyOf(obj), subresource), body, query: { fieldManager: this.fieldManager } });
  }

  /**
   * JSON merge patch (RFC 7386). With `resourceVersion`, it is put into the patch's metadata, which
   * the server checks (controller-runtime's `MergeFromWithOptimisticLock`). @throws ApiError 409 on a stale version
   */
  mergePatch<T extends KubernetesObject>(kind: KindDescriptor<T>, key: ObjectKey, patch: object, pre: Precondition = {}, subresource?: 'status'): Promise<T> {
    const body = pre.resourceVersion ? withResourceVersion(patch, pre.resourceVersion) : patch;
    return this.transport.request<T>({ method: 'PATCH', path: objectPath(kind, key, subresource), body, contentType: MERGE, query: { fieldManager: this.fieldManager } });
  }

  /**
   * JSON patch (RFC 6902). With `resourceVersion`, a `test` op on `/metadata/resourceVersion` is
   * prepended. @throws ApiError 422 when a test fails (see {@link isPatchTestFailed})
   */
  jsonPatch<T extends KubernetesObject>(kind: KindDescriptor<T>, key: ObjectKey, ops: readonly JsonPatchOp[], pre: Precondition = {}, subresource?: 'status'): Promise<T> {
    const body = pre.resourceVersion ? [{ op: 'test', path: '/metadata/resourceVersion', value: pre.resourceVersion }, ...ops] : ops;
    return this.transport.request<T>({ method: 'PATCH', path: objectPath(kind, key, subresource), body, contentType: JSON_PATCH, query: { fieldManager: this.fieldManager } });
  }

  /**
   * Server-side apply of `obj` (the fields this manager owns). `force` takes fields over from
   * other managers, as controllers should for fields they are the sole authority on.
   * @see Kubernetes "Server-Side Apply", "Using Server-Side Apply in a controller"
   */
  apply<T extends KubernetesObject>(kind: KindDescriptor<T>, obj: T, opts: { force?: boolean; subresource?: 'status' } = {}): Promise<T> {
    const body = { ...obj, apiVersion: apiVersionOf(kind), kind: kind.kind };
    return this.transport.request<T>({
      method: 'PATCH',
      path: objectPath(kind, objectKeyOf(obj), opts.subresource),
      body,
      contentType: APPLY,
      query: { fieldManager: this.fieldManager, force: opts.force ?? true },
    });
  }

  /**
   * Whether the apiserver serves subresource `sub` (e.g. `status`) of `kind`, from API discovery
   * (`GET /apis/<group>/<version>`, readable by every authenticated user): a CRD installed by an
   * older release may lack a subresource this code's CRD has, and a write to it would get 404.
   * @returns false also when the group/version is not served at all
   */
  async servesSubresource(kind: KindDescriptor, sub: string): Promise<boolean> {
    const path = kind.group === '' ? `/api/${kind.version}` : `/apis/${kind.group}/${kind.version}`;
    try {
      const list = await this.transport.request<{ resources?: Array<{ name: string }> }>({ method: 'GET', path });
      return (list.resources ?? []).some((r) => r.name === `${kind.plural}/${sub}`);
    } catch (e) {
      if (isNotFound(e)) return false;
      throw e;
    }
  }

  /** Merge-patches the status subresource: `{ status }`, guarded by `resourceVersion` when given. */
  patchStatus<T extends KubernetesObject>(kind: KindDescriptor<T>, key: ObjectKey, status: object, pre: Precondition = {}): Promise<T> {
    return this.mergePatch(kind, key, { status }, pre, 'status');
  }

  /**
   * Deletes an object. Preconditions make the delete fail (409) if the object was replaced (uid)
   * or changed (resourceVersion) since it was read.
   * @returns false when it was already gone (404)
   */
  async delete(kind: KindDescriptor, key: ObjectKey, opts: { uid?: string; resourceVersion?: string; propagationPolicy?: 'Foreground' | 'Background' | 'Orphan' } = {}): Promise<boolean> {
    const preconditions = opts.uid || opts.resourceVersion ? { uid: opts.uid, resourceVersion: opts.resourceVersion } : undefined;
    try {
      await this.transport.request({
        method: 'DELETE',
        path: objectPath(kind, key),
        body: { apiVersion: 'v1', kind: 'DeleteOptions', preconditions, propagationPolicy: opts.propagationPolicy },
      });
      return true;
    } catch (e) {
      if (isNotFound(e)) return false;
      throw e;
    }
  }

  /**
   * Adds `finalizer` to `obj` unless present, guarded by `obj`'s resourceVersion.
   * @returns the updated object, or `obj` itself when nothing had to change
   * @throws ApiError 422 when `obj` is stale (retry from a fresh read)
   */
  async addFinalizer<T extends KubernetesObject>(kind: KindDescriptor<T>, obj: T, finalizer: string): Promise<T> {
    const current = obj.metadata?.finalizers ?? [];
    if (current.includes(finalizer)) return obj;
    return this.setFinalizers(kind, obj, [...current, finalizer]);
  }

  /**
   * Removes `finalizer` from `obj` if present, guarded by `obj`'s resourceVersion.
   * @returns the updated object, or `obj` itself when nothing had to change
   * @throws ApiError 422 when `obj` is stale
   */
  async removeFinalizer<T extends KubernetesObject>(kind: KindDescriptor<T>, obj: T, finalizer: string): Promise<T> {
    const current = obj.metadata?.finalizers ?? [];
    if (!current.includes(finalizer)) return obj;
    return this.setFinalizers(kind, obj, current.filter((f) => f !== finalizer));
  }

  /** Replaces `metadata.finalizers` with `finalizers`, guarded by `obj`'s resourceVersion. */
  setFinalizers<T extends KubernetesObject>(kind: KindDescriptor<T>, obj: T, finalizers: readonly string[]): Promise<T> {
    const rv = obj.metadata?.resourceVersion;
    // `add` on an existing member replaces it, and works when the list is absent too.
    return this.jsonPatch(kind, objectKeyOf(obj), [{ op: 'add', path: '/metadata/finalizers', value: finalizers }], rv ? { resourceVersion: rv } : {});
  }
}

function withResourceVersion(patch: object, resourceVersion: string): object {
  const p = patch as { metadata?: object };
  return { ...p, metadata: { ...(p.metadata ?? {}), resourceVersion } };
}
