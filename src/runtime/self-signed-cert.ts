/**
 * A self-signed TLS serving certificate made in-process at start, for the authenticated HTTP
 * endpoints when no certificate is given — what controller-runtime's secure metrics server does
 * (`pkg/metrics/server`, `certutil.GenerateSelfSignedCertKey`). Clients scrape it with
 * certificate verification off (Prometheus' `insecureSkipVerify`, as for the kubelet's and
 * kubebuilder's metrics): TLS here protects the bearer token on the wire; who may read is decided
 * by the TokenReview and SubjectAccessReview behind it (docs/observability.md#access).
 *
 * The certificate is built with node:crypto alone (no openssl in the image, and coild and
 * coil-egress run on Bun): an ECDSA P-256 key, X.509 v3 DER written here, signed ECDSA-SHA256,
 * valid from one hour ago for one year, subjectAltName `localhost`, the host name and the given
 * addresses, extendedKeyUsage serverAuth. @see RFC 5280 §4.1
 */
import { generateKeyPairSync, randomBytes, sign } from 'node:crypto';
import { isIP } from 'node:net';

/** PEM texts of the certificate and its PKCS#8 private key. */
export interface SelfSignedCert {
  readonly certPem: string;
  readonly keyPem: string;
}

const tlv = (tag: number, ...parts: Buffer[]): Buffer => {
  const body = Buffer.concat(parts);
  const n = body.length;
  const len = n < 0x80 ? Buffer.from([n]) : n < 0x100 ? Buffer.from([0x81, n]) : Buffer.from([0x82, n >> 8, n & 0xff]);
  return Buffer.concat([Buffer.from([tag]), len, body]);
};
const seq = (...parts: Buffer[]): Buffer => tlv(0x30, ...parts);
const oid = (dotted: string): Buffer => {
  const [a, b, ...rest] = dotted.split('.').map(Number);
  const bytes = [a! * 40 + b!];
  for (const v of rest) {
    const chunk = [v & 0x7f];
    for (let x = v >>> 7; x > 0; x >>>= 7) chunk.unshift((x & 0x7f) | 0x80);
    bytes.push(...chunk);
  }
  return tlv(0x06, Buffer.from(bytes));
};
const utcTime = (d: Date): Buffer => tlv(0x17, Buffer.from(d.toISOString().replace(/[-:T]/g, '').slice(2, 14) + 'Z'));
const name = (cn: string): Buffer => seq(tlv(0x31, seq(oid('2.5.4.3'), tlv(0x0c, Buffer.from(cn, 'utf8')))));
const extension = (id: string, critical: boolean, value: Buffer): Buffer =>
  seq(oid(id), ...(critical ? [tlv(0x01, Buffer.from([0xff]))] : []), tlv(0x04, value));

/** The 4 or 16 bytes of an IP address. */
function ipBytes(ip: string): Buffer {
  if (isIP(ip) === 4) return Buffer.from(ip.split('.').map(Number));
  const [head = '', tail = ''] = ip.split('::');
  const groups = (s: string): number[] => (s === '' ? [] : s.split(':').map((g) => parseInt(g, 16)));
  const h = groups(head);
  const t = ip.includes('::') ? groups(tail) : [];
  const all = [...h, ...Array<number>(8 - h.length - t.length).fill(0), ...t];
  const out = Buffer.alloc(16);
  all.forEach((g, i) => out.writeUInt16BE(g, i * 2));
  return out;
}

/**
 * Makes a self-signed serving certificate.
 * @param hosts DNS names and IP addresses for its subjectAltName (the first names its subject);
 *   `localhost` is always added. IPv6 addresses in full or `::` form, without a zone.
 * @param now the validity's reference time (tests); default the current time
 */
export function selfSignedCert(hosts: readonly string[], now = new Date()): SelfSignedCert {
  const { publicKey, privateKey } = generateKeyPairSync('ec', { namedCurve: 'prime256v1' });
  const all = [...new Set([...hosts, 'localhost'])];
  const sans = all.map((h) => (isIP(h) ? tlv(0x87, ipBytes(h)) : tlv(0x82, Buffer.from(h, 'ascii'))));
  const serial = randomBytes(16);
  serial[0] = (serial[0]! & 0x7f) | 0x01; // positive, no leading zero byte
  const ecdsaSha256 = seq(oid('1.2.840.10045.4.3.2'));
  const subject = name(all[0]!);
  const tbs = seq(
    tlv(0xa0, tlv(0x02, Buffer.from([2]))), // v3
    tlv(0x02, serial),
    ecdsaSha256,
    subject,
    seq(utcTime(new Date(now.getTime() - 3_600_000)), utcTime(new Date(now.getTime() + 365 * 86_400_000))),
    subject,
    publicKey.export({ type: 'spki', format: 'der' }),
    tlv(0xa3, seq(
      extension('2.5.29.15', true, tlv(0x03, Buffer.from([0x07, 0x80]))), // keyUsage: digitalSignature
      extension('2.5.29.37', false, seq(oid('1.3.6.1.5.5.7.3.1'))), // extKeyUsage: serverAuth
      extension('2.5.29.19', true, seq()), // basicConstraints: not a CA
      extension('2.5.29.17', false, seq(...sans)),
    )),
  );
  const signature = sign('sha256', tbs, privateKey);
  const der = seq(tbs, ecdsaSha256, tlv(0x03, Buffer.from([0]), signature));
  const b64 = der.toString('base64').replace(/.{64}/g, '$&\n').replace(/\n$/, '');
  return {
    certPem: `-----BEGIN CERTIFICATE-----\n${b64}\n-----END CERTIFICATE-----\n`,
    keyPem: privateKey.export({ type: 'pkcs8', format: 'pem' }) as string,
  };
}
