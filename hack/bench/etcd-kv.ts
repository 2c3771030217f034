/**
 * Direct access to a test control plane's etcd through its v3 JSON gateway (`/v3/kv/*`, keys and
 * values base64), bypassing kube-apiserver. For benchmarks only: loading 100,000 objects this way
 * takes seconds, against many minutes of one-by-one creates through the API (each one an
 * authentication, admission and etcd round trip). kube-apiserver's watch on etcd then reports
 * them like any other write, so informers see ordinary ADDED events or list results.
 *
 * Assumes envtest's etcd: plain HTTP on 127.0.0.1, no authentication (test/envtest/control-plane.ts).
 */
import type { KindDescriptor } from '../../src/runtime/kind.js';

/** etcd's default `--max-txn-ops`: the most operations one transaction may carry. */
const MAX_TXN_OPS = 128;

const b64 = (s: string | Buffer): string => Buffer.from(s).toString('base64');

/**
 * Where kube-apiserver keeps an object of `kind` in etcd with the default `--etcd-prefix=/registry`:
 * `/registry/<group>/<plural>/[<namespace>/]<name>` (core kinds have no group segment).
 * @see k8s.io/apiserver/pkg/registry/generic/registry/store.go (`NamespaceKeyFunc`/`NoNamespaceKeyFunc`)
 */
export function storageKey(kind: KindDescriptor, name: string, namespace?: string): string {
  return ['/registry', ...(kind.group ? [kind.group] : []), kind.plural, ...(namespace ? [namespace] : []), name].join('/');
}

/** A client of etcd's JSON gateway at `endpoint` (`http://127.0.0.1:<port>`). */
export class EtcdKv {
  constructor(readonly endpoint: string) {}

  /** The value stored at `key`, or undefined. @throws Error on a non-2xx answer */
  async get(key: string): Promise<Buffer | undefined> {
    const res = await this.call<{ kvs?: { value?: string }[] }>('/v3/kv/range', { key: b64(key) });
    const value = res.kvs?.[0]?.value;
    return value === undefined ? undefined : Buffer.from(value, 'base64');
  }

  /** Deletes `key`. @returns whether it existed */
  async delete(key: string): Promise<boolean> {
    const res = await this.call<{ deleted?: string }>('/v3/kv/deleterange', { key: b64(key) });
    return Number(res.deleted ?? 0) > 0;
  }

  /** Writes one value. */
  async put(key: string, value: string | Buffer): Promise<void> {
    await this.call('/v3/kv/put', { key: b64(key), value: b64(value) });
  }

  /**
   * Writes every entry, {@link MAX_TXN_OPS} per transaction, `concurrency` transactions in flight.
   * Not atomic as a whole: a failure leaves the batches already committed.
   */
  async putMany(entries: Iterable<readonly [string, string | Buffer]>, concurrency = 4): Promise<void> {
    const it = entries[Symbol.iterator]();
    const nextBatch = (): { requestPut: { key: string; value: string } }[] => {
      const ops = [];
      while (ops.length < MAX_TXN_OPS) {
        const r = it.next();
        if (r.done) break;
        ops.push({ requestPut: { key: b64(r.value[0]), value: b64(r.value[1]) } });
      }
      return ops;
    };
    await Promise.all(Array.from({ length: concurrency }, async () => {
      for (let ops = nextBatch(); ops.length > 0; ops = nextBatch()) await this.call('/v3/kv/txn', { success: ops });
    }));
  }

  /** Compacts history up to the current revision: watches from an older resourceVersion then get 410 Gone. */
  async compact(): Promise<void> {
    const res = await this.call<{ header: { revision: string } }>('/v3/kv/range', { key: b64('/'), limit: 1 });
    await this.call('/v3/kv/compaction', { revision: res.header.revision, physical: true });
  }

  private async call<T>(path: string, body: unknown): Promise<T> {
    const res = await fetch(this.endpoint + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const text = await res.text();
    if (!res.ok) throw new Error(`etcd ${path}: ${res.status} ${text}`);
    return JSON.parse(text) as T;
  }
}
