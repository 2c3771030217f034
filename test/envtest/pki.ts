/**
 * Test PKI for the envtest control plane: one CA, the apiserver serving certificate, an admin
 * client certificate, service-account keys and webhook serving certificates — the same set
 * controller-runtime's envtest mints (`pkg/internal/testing/certs/tinyca.go`), made with the
 * openssl CLI (docs/design.md#test-certificates; verified against Go's verifier).
 *
 * Certificates are ECDSA P-256 and valid for 7 days: long enough for any suite, short enough
 * that a leaked test CA is worthless.
 */
import { execFile } from 'node:child_process';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** PEM texts of one certificate and its private key. */
export interface CertPair {
  readonly certPem: string;
  readonly keyPem: string;
}

/** A serving certificate plus the CA that signed it (the `caBundle` for webhook configurations). */
export interface ServingCert extends CertPair {
  readonly caPem: string;
}

const EC_KEY = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];

/**
 * A tiny certificate authority kept in a directory. Not safe for concurrent `issue` calls with
 * the same `name` (files are named after it).
 */
export class TestCA {
  private serial = 1;

  private constructor(
    readonly dir: string,
    readonly caPem: string,
  ) {}

  /**
   * Creates a CA key and self-signed certificate in `dir` (created if missing).
   * @throws Error when openssl fails (its stderr is in the message).
   */
  static async create(dir: string, commonName = 'coil-envtest-ca'): Promise<TestCA> {
    await mkdir(dir, { recursive: true });
    await run('openssl', [
      'req', '-x509', ...EC_KEY, '-keyout', join(dir, 'ca.key'), '-out', join(dir, 'ca.crt'),
      '-days', '7', '-subj', `/CN=${commonName}`,
      '-addext', 'basicConstraints=critical,CA:TRUE',
      '-addext', 'keyUsage=critical,keyCertSign,cRLSign,digitalSignature',
    ]);
    return new TestCA(dir, await readFile(join(dir, 'ca.crt'), 'utf8'));
  }

  /** Path of the CA certificate file. */
  get caFile(): string {
    return join(this.dir, 'ca.crt');
  }

  /**
   * Issues a certificate signed by this CA and writes `<name>.crt` / `<name>.key` into the CA dir.
   * @param subject openssl subject, e.g. `/O=system:masters/CN=admin` (CN = user, O = groups).
   * @param usage `server` adds serverAuth and the SANs; `client` adds clientAuth.
   * @param sans subjectAltName entries such as `IP:127.0.0.1`, `DNS:localhost` (required by Go's
   *   TLS client, which ignores the CN).
   */
  async issue(name: string, subject: string, usage: 'server' | 'client', sans: readonly string[] = []): Promise<CertPair> {
    const key = join(this.dir, `${name}.key`);
    const csr = join(this.dir, `${name}.csr`);
    const crt = join(this.dir, `${name}.crt`);
    const ext = join(this.dir, `${name}.ext`);
    const lines = [
      `extendedKeyUsage=${usage === 'server' ? 'serverAuth' : 'clientAuth'}`,
      'keyUsage=critical,digitalSignature,keyEncipherment',
      'basicConstraints=CA:FALSE',
    ];
    if (sans.length > 0) lines.unshift(`subjectAltName=${sans.join(',')}`);
    await writeFile(ext, lines.join('\n') + '\n');
    await run('openssl', ['req', ...EC_KEY, '-keyout', key, '-out', csr, '-subj', subject]);
    await run('openssl', [
      'x509', '-req', '-in', csr, '-CA', this.caFile, '-CAkey', join(this.dir, 'ca.key'),
      '-set_serial', String(this.serial++), '-days', '7', '-extfile', ext, '-out', crt,
    ]);
    return { certPem: await readFile(crt, 'utf8'), keyPem: await readFile(key, 'utf8') };
  }
}

/**
 * Generates an RSA 2048 key pair for service-account token signing into `dir/sa.key` and
 * `dir/sa.pub`.
 */
export async function createServiceAccountKeys(dir: string): Promise<{ keyFile: string; pubFile: string }> {
  const keyFile = join(dir, 'sa.key');
  const pubFile = join(dir, 'sa.pub');
  await run('openssl', ['genpkey', '-algorithm', 'RSA', '-pkeyopt', 'rsa_keygen_bits:2048', '-out', keyFile]);
  await run('openssl', ['pkey', '-in', keyFile, '-pubout', '-out', pubFile]);
  return { keyFile, pubFile };
}
