/**
 * A standalone etcd holding Coil v1 data, for the coil-migrator suites: the control plane's etcd
 * binary started on its own ports and data dir, seeded with the `etcd3` client.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Etcd3 } from 'etcd3';
import { controlPlaneBinDir, freePort, REPO_ROOT } from '../envtest/control-plane.js';
import { TestCA } from '../envtest/pki.js';
import { ManagedProcess, waitFor } from '../envtest/process.js';

const run = promisify(execFile);

/**
 * The v1 test data set file (docs/migration-from-coil-v1.md#the-test-data-set): nodes, namespaces
 * and `[key, value]` entries under `/coil/`.
 */
export interface V1Fixture {
  readonly nodes: readonly string[];
  readonly namespaces: readonly string[];
  readonly entries: readonly (readonly [string, string])[];
}

/** Reads test/migrator/testdata/<name>. */
export async function testdata(name: string): Promise<string> {
  return readFile(join(REPO_ROOT, 'test/migrator/testdata', name), 'utf8');
}

/** Files of a TLS etcd: its CA, and a client certificate and key it accepts. */
export interface V1EtcdTls {
  readonly caFile: string;
  readonly certFile: string;
  readonly keyFile: string;
}

/** A running v1 etcd. Call {@link stop} in `after`, also on failure. */
export class V1Etcd {
  private constructor(
    private readonly proc: ManagedProcess,
    private readonly dir: string,
    /** `http://127.0.0.1:<port>` (`https://` with `tls`). */
    readonly endpoint: string,
    /** Set when started with `{ tls: true }`: clients must present this certificate. */
    readonly tls?: V1EtcdTls,
  ) {}

  /**
   * Starts etcd 3.6 from the control-plane binaries; resolves when it answers. With `tls`, it
   * serves HTTPS with a certificate of its own CA and requires client certificates of that CA.
   */
  static async start(options: { tls?: boolean } = {}): Promise<V1Etcd> {
    const bin = join(await controlPlaneBinDir(), 'etcd');
    const dir = await mkdtemp(join(tmpdir(), 'coil-v1-etcd-'));
    const [client, peer] = [await freePort(), await freePort()];
    const endpoint = `${options.tls ? 'https' : 'http'}://127.0.0.1:${client}`;
    let tls: V1EtcdTls | undefined;
    let tlsArgs: string[] = [];
    if (options.tls) {
      const ca = await TestCA.create(join(dir, 'pki'), 'coil-v1-etcd-ca');
      await ca.issue('server', '/CN=etcd', 'server', ['IP:127.0.0.1', 'DNS:localhost']);
      await ca.issue('client', '/CN=coil-migrator', 'client');
      tls = { caFile: ca.caFile, certFile: join(ca.dir, 'client.crt'), keyFile: join(ca.dir, 'client.key') };
      tlsArgs = [`--cert-file=${join(ca.dir, 'server.crt')}`, `--key-file=${join(ca.dir, 'server.key')}`, `--trusted-ca-file=${ca.caFile}`, '--client-cert-auth'];
    }
    const proc = await ManagedProcess.start({
      name: 'v1-etcd',
      command: bin,
      logFile: join(dir, 'etcd.log'),
      args: [
        '--name=v1', `--data-dir=${join(dir, 'data')}`,
        `--listen-client-urls=${endpoint}`, `--advertise-client-urls=${endpoint}`,
        `--listen-peer-urls=http://127.0.0.1:${peer}`, `--initial-advertise-peer-urls=http://127.0.0.1:${peer}`,
        `--initial-cluster=v1=http://127.0.0.1:${peer}`, '--unsafe-no-fsync=true', '--log-level=warn', ...tlsArgs,
      ],
    });
    const etcd = new V1Etcd(proc, dir, endpoint, tls);
    try {
      await waitFor('v1 etcd', async () => {
        const c = await etcd.client();
        try {
          await c.get('probe').string();
          return true;
        } finally {
          c.close();
        }
      }, { process: proc, timeoutMs: 30_000 });
    } catch (e) {
      await etcd.stop();
      throw e;
    }
    return etcd;
  }

  /** Writes `entries` (full keys, prefix included), 256 at a time. */
  async put(entries: readonly (readonly [string, string])[]): Promise<void> {
    const client = await this.client();
    try {
      for (let i = 0; i < entries.length; i += 256) {
        await Promise.all(entries.slice(i, i + 256).map(([k, v]) => client.put(k).value(v).exec()));
      }
    } finally {
      client.close();
    }
  }

  private async client(): Promise<Etcd3> {
    if (!this.tls) return new Etcd3({ hosts: this.endpoint, dialTimeout: 2_000 });
    const [rootCertificate, certChain, privateKey] = await Promise.all([this.tls.caFile, this.tls.certFile, this.tls.keyFile].map((f) => readFile(f)));
    return new Etcd3({ hosts: this.endpoint, dialTimeout: 2_000, credentials: { rootCertificate: rootCertificate!, certChain: certChain!, privateKey: privateKey! } });
  }

  async stop(): Promise<void> {
    await this.proc.stop({ graceMs: 5_000 }).catch(() => undefined);
    await rm(this.dir, { recursive: true, force: true });
  }
}

/** Result of one `coil-migrator` run as a child process. */
export interface MigratorRun {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
  readonly ms: number;
}

/** Runs the built program (dist/src/migrator/main.js) with Node 24, as the image does. */
export async function runMigrator(args: readonly string[], options: { input?: string; timeoutMs?: number } = {}): Promise<MigratorRun> {
  const started = performance.now();
  const main = join(REPO_ROOT, 'dist/src/migrator/main.js');
  const child = run(process.execPath, [main, ...args], { maxBuffer: 256 << 20, timeout: options.timeoutMs ?? 120_000 });
  child.child.stdin?.end(options.input ?? '');
  try {
    const { stdout, stderr } = await child;
    return { code: 0, stdout, stderr, ms: performance.now() - started };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string; message: string };
    if (typeof e.code !== 'number') throw err;
    return { code: e.code, stdout: e.stdout ?? '', stderr: e.stderr ?? '', ms: performance.now() - started };
  }
}
