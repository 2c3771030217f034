/**
 * Facts about an OCI image archive (the `oci-archive` transport's tar: oci-layout, index.json,
 * blobs/sha256/*) as hack/build-image.sh writes it: its reference, manifest digest and layers with
 * their compressed and unpacked sizes. Used by build-image.sh to print the sizes, and by the lab
 * and the tests to check that a node runs the image the script built.
 *
 *   node dist/hack/image/oci.js sizes ARCHIVE [LAYER_NAME...]   # one line per layer, then totals
 *
 * @see OCI image-spec: image-layout.md (index.json, blobs), manifest.md (layers: digest, size)
 */
import { spawn } from 'node:child_process';
import { createGunzip } from 'node:zlib';
import { fileURLToPath } from 'node:url';

/** One layer of the image's manifest. */
export interface OciLayer {
  readonly digest: string;
  readonly mediaType: string;
  /** Bytes as stored (compressed). */
  readonly size: number;
}

/** What an archive holds (its first manifest). */
export interface OciImage {
  /** `org.opencontainers.image.ref.name` of the manifest in index.json (the image reference). */
  readonly ref: string;
  /** Digest of the manifest: what containerd reports as the image's target digest. */
  readonly manifestDigest: string;
  readonly configDigest: string;
  readonly layers: readonly OciLayer[];
  /** The image config's labels. */
  readonly labels: Readonly<Record<string, string>>;
  /** `created_by` of each history entry: the instructions the image was built with, in order. */
  readonly history: readonly string[];
}

interface Descriptor {
  mediaType: string;
  digest: string;
  size: number;
  annotations?: Record<string, string>;
}

/** Runs `tar -xOf archive member` and collects stdout (through gunzip when `gunzip`). */
async function member(archive: string, name: string, options: { gunzip?: boolean; count?: boolean } = {}): Promise<{ bytes: number; text: string }> {
  const tar = spawn('tar', ['-xOf', archive, name], { stdio: ['ignore', 'pipe', 'pipe'] });
  let err = '';
  tar.stderr.on('data', (c: Buffer) => (err += c));
  const source = options.gunzip ? tar.stdout.pipe(createGunzip()) : tar.stdout;
  const body = new Promise<{ bytes: number; text: string }>((resolve, reject) => {
    let bytes = 0;
    const chunks: Buffer[] = [];
    source.on('data', (c: Buffer) => {
      bytes += c.length;
      if (!options.count) chunks.push(c);
    });
    source.on('end', () => resolve({ bytes, text: Buffer.concat(chunks).toString('utf8') }));
    source.on('error', reject);
  });
  const exit = new Promise<void>((resolve, reject) => {
    tar.on('error', reject);
    tar.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`tar -xOf ${archive} ${name}: ${err.trim() || `exit ${code}`}`))));
  });
  const [result] = await Promise.all([body, exit]);
  return result;
}

const blob = (digest: string) => `blobs/${digest.replace(':', '/')}`;

/**
 * Reads the archive's index, first manifest and config.
 * @throws Error when the archive is not an OCI layout or has no manifest.
 */
export async function readOciArchive(archive: string): Promise<OciImage> {
  const index = JSON.parse((await member(archive, 'index.json')).text) as { manifests?: Descriptor[] };
  const desc = index.manifests?.[0];
  if (!desc) throw new Error(`${archive}: index.json lists no manifest`);
  const manifest = JSON.parse((await member(archive, blob(desc.digest))).text) as { config: Descriptor; layers: Descriptor[] };
  const config = JSON.parse((await member(archive, blob(manifest.config.digest))).text) as {
    config?: { Labels?: Record<string, string> };
    history?: { created_by?: string }[];
  };
  return {
    ref: desc.annotations?.['org.opencontainers.image.ref.name'] ?? '',
    manifestDigest: desc.digest,
    configDigest: manifest.config.digest,
    layers: manifest.layers.map((l) => ({ digest: l.digest, mediaType: l.mediaType, size: l.size })),
    labels: config.config?.Labels ?? {},
    history: (config.history ?? []).map((h) => h.created_by ?? ''),
  };
}

/** Unpacks the image's layers, in order, into `dir` (an image without whiteouts, as ours are). */
export async function unpack(archive: string, dir: string): Promise<void> {
  const image = await readOciArchive(archive);
  for (const layer of image.layers) {
    const gzip = layer.mediaType.endsWith('+gzip') || layer.mediaType.endsWith('.gzip');
    await new Promise<void>((resolve, reject) => {
      const extract = spawn('tar', ['-x', ...(gzip ? ['-z'] : []), '-C', dir], { stdio: ['pipe', 'ignore', 'inherit'] });
      const read = spawn('tar', ['-xOf', archive, blob(layer.digest)], { stdio: ['ignore', 'pipe', 'inherit'] });
      read.stdout.pipe(extract.stdin);
      extract.on('error', reject);
      extract.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`unpacking ${layer.digest}: exit ${code}`))));
    });
  }
}

/** Bytes of a layer once decompressed: the tar stream a runtime unpacks. */
export async function unpackedSize(archive: string, layer: OciLayer): Promise<number> {
  const gzip = layer.mediaType.endsWith('+gzip') || layer.mediaType.endsWith('.gzip');
  return (await member(archive, blob(layer.digest), { gunzip: gzip, count: true })).bytes;
}

const mb = (bytes: number) => `${(bytes / 1e6).toFixed(1)} MB`;

/**
 * A size report: one line per layer (named by `names`, in order), then the totals, e.g.
 * `total: compressed 101.2 MB, unpacked 296.0 MB`.
 */
export async function sizeReport(archive: string, names: readonly string[] = []): Promise<string> {
  const image = await readOciArchive(archive);
  const lines = [`${image.ref} (${image.manifestDigest.slice(0, 19)}…)`];
  let packed = 0;
  let unpacked = 0;
  for (const [i, layer] of image.layers.entries()) {
    const size = await unpackedSize(archive, layer);
    packed += layer.size;
    unpacked += size;
    lines.push(`  ${(names[i] ?? `layer ${i + 1}`).padEnd(8)} compressed ${mb(layer.size).padStart(9)}, unpacked ${mb(size).padStart(9)}`);
  }
  lines.push(`  total    compressed ${mb(packed).padStart(9)}, unpacked ${mb(unpacked).padStart(9)}`);
  return lines.join('\n');
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const [cmd, archive, ...names] = process.argv.slice(2);
  if (cmd !== 'sizes' || !archive) {
    console.error('usage: oci.js sizes ARCHIVE [LAYER_NAME...]');
    process.exit(2);
  }
  console.log(await sizeReport(archive, names));
}
