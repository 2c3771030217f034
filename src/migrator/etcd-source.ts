/**
 * Reads every key under the Coil v1 prefix with the `etcd3` client, in one range read (one
 * revision, so pools and blocks are consistent with each other).
 *
 * @see docs/migration-from-coil-v1.md#prefix-and-etcd-flags
 */
import { readFile } from 'node:fs/promises';
import { Etcd3, type IOptions } from 'etcd3';
import type { EtcdConfig } from './config.js';
import type { V1Entry } from './v1-model.js';

/** etcd could not be reached or read within `--etcd-timeout`, or its TLS files cannot be read. */
export class EtcdReadError extends Error {
  override readonly name = 'EtcdReadError';
}

/**
 * Reads all keys under `cfg.prefix`, returned relative to it (`pool/default`). The whole read must
 * finish within `cfg.timeoutMs`; etcd3's own retries would otherwise stretch an unreachable
 * endpoint to ~30 s per attempt.
 * @throws EtcdReadError naming the endpoints and the cause (unreachable, TLS, auth, timeout)
 */
export async function readV1Entries(cfg: EtcdConfig): Promise<V1Entry[]> {
  const client = new Etcd3(await clientOptions(cfg));
  let timer: NodeJS.Timeout | undefined;
  const where = `etcd at ${cfg.endpoints.join(',')}`;
  try {
    const read = client.namespace(cfg.prefix).getAll().strings();
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new EtcdReadError(`cannot read ${where} within --etcd-timeout=${cfg.timeoutMs}ms: unreachable or too slow`)), cfg.timeoutMs);
    });
    read.catch(() => undefined); // a late rejection after the timeout must not go unhandled
    const all = await Promise.race([read, timeout]);
    return Object.entries(all).map(([key, value]) => ({ key, value }));
  } catch (e) {
    if (e instanceof EtcdReadError) throw e;
    throw new EtcdReadError(`cannot read ${where}: ${(e as Error).message}`, { cause: e });
  } finally {
    clearTimeout(timer);
    client.close();
  }
}

async function clientOptions(cfg: EtcdConfig): Promise<IOptions> {
  const file = async (flag: string, path: string | undefined): Promise<Buffer | undefined> => {
    if (path === undefined) return undefined;
    try {
      return await readFile(path);
    } catch (e) {
      throw new EtcdReadError(`--${flag}: cannot read ${path}: ${(e as Error).message}`, { cause: e });
    }
  };
  const ca = await file('etcd-tls-ca', cfg.tlsCa);
  const cert = await file('etcd-tls-cert', cfg.tlsCert);
  const key = await file('etcd-tls-key', cfg.tlsKey);
  const https = cfg.endpoints.some((e) => e.startsWith('https://'));
  // etcd3 wants a root certificate for TLS; without --etcd-tls-ca, Node's bundled roots are used.
  const rootCertificate = ca ?? (https ? Buffer.from((await import('node:tls')).rootCertificates.join('\n')) : undefined);
  return {
    hosts: cfg.endpoints.map((e) => e.replace(/\/$/, '')),
    dialTimeout: cfg.timeoutMs,
    defaultCallOptions: (ctx) => (ctx.isStream ? {} : { deadline: Date.now() + cfg.timeoutMs }),
    ...(cfg.username !== undefined && { auth: { username: cfg.username, password: cfg.password ?? '' } }),
    ...(rootCertificate && { credentials: { rootCertificate, ...(key && { privateKey: key }), ...(cert && { certChain: cert }) } }),
  };
}
