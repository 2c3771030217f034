/**
 * Builds `kubectl-coil`, the admin's kubectl plugin (src/kubectl-coil), as a self-contained
 * executable per platform — linux and darwin, amd64 and arm64 — that needs no JavaScript runtime
 * on the admin's machine, each in a krew archive, and the krew plugin manifest naming them:
 *
 *   npm run build:kubectl-coil        (= npm run build && node dist/hack/kubectl-coil/build.js)
 *   node dist/hack/kubectl-coil/build.js [--platform OS/ARCH]... [--base-url URL] [OUT_DIR]
 *
 * OUT_DIR (default dist/kubectl-coil) receives:
 *   kubectl-coil.js                   the tool as one ES module for the Bun runtime (tsc's output bundled)
 *   <os>-<arch>/kubectl-coil          that bundle compiled into Bun's runtime for the platform
 *   kubectl-coil_<os>_<arch>.tar.gz   krew's archive of it (deterministic: sorted, owner 0, mtime 0, gzip -n)
 *   plugin.yaml                       krew's manifest: one platform per archive, its sha256, `bin`, `files`
 *
 * Why Bun (README, "Operate"; docs/kubectl-coil.md has the figures): its runtime is already the
 * project's (the `coil` CNI executable), every platform's runtime comes from the npm registry
 * (runtimes.ts), a compile is one command per platform, and Bun signs its darwin/arm64 output ad
 * hoc itself — macOS kills an arm64 Mach-O without a valid signature at exec, and no codesign runs
 * here; where Bun leaves a stale signature (darwin/amd64) this build signs ad hoc
 * (executable-format.ts), and it checks every darwin output's signature before the manifest.
 * The image ships kubectl-coil.js and compiles the linux/amd64 executable from it on demand with
 * its own `coil` runtime (hack/image/entrypoint.sh, `kubectl-coil-linux-amd64`), byte for byte
 * the archive's (test/image.test.ts), so the image does not carry a second 107 MB runtime.
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFile, mkdir, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { parse, stringify } from 'yaml';
import { adhocSign, executableFormat, machoSignature } from './executable-format.js';
import { bunRuntime, PLATFORMS, platformName, PROJECT_BUN, type Platform } from './runtimes.js';

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('../../../', import.meta.url));

/** The executable's name: kubectl runs `kubectl-coil` for `kubectl coil`. */
export const BIN = 'kubectl-coil';
/** The bundle's name. The compile embeds it, so the image compiles a file of this name too. */
export const BUNDLE = 'kubectl-coil.js';

/**
 * `bun build --compile` flags besides the target, the runtime and the file names; the image's
 * entrypoint passes the same (test/image.test.ts compares the outputs). No autoloading of `.env`
 * or `bunfig.toml` from the admin's working directory.
 */
export const COMPILE_FLAGS = ['--compile', '--no-compile-autoload-dotenv', '--no-compile-autoload-bunfig'] as const;

/**
 * The version the manifest names: the chart's appVersion, which src/kubectl-coil/version.ts
 * repeats (a test keeps them equal; tooling does not import the tool's modules).
 */
export async function appVersion(): Promise<string> {
  const chart = parse(await readFile(join(ROOT, 'charts/coil/Chart.yaml'), 'utf8')) as { appVersion?: unknown };
  if (typeof chart.appVersion !== 'string' || chart.appVersion === '') throw new Error('charts/coil/Chart.yaml has no appVersion');
  return chart.appVersion;
}

/** Where krew downloads the archives from, by default: the release of `version`. */
export const defaultBaseUrl = (version: string): string => `https://github.com/coil-ts/coil/releases/download/v${version}`;

/** `kubectl-coil_linux_amd64.tar.gz` */
export const archiveName = (p: Platform): string => `${BIN}_${p.os}_${p.arch}.tar.gz`;

/**
 * Bundles tsc's output of src/kubectl-coil into one ES module for the Bun runtime. Whitespace and
 * syntax are minified, identifiers are not (an error names real functions).
 * @throws Error when tsc's output is missing or Bun fails
 */
export async function bundleKubectlCoil(outFile: string): Promise<void> {
  const entry = join(ROOT, 'dist/src/kubectl-coil/main.js');
  await stat(entry).catch(() => {
    throw new Error(`${entry} is missing: run npm run build first`);
  });
  // bunyan's optional DTrace probes are a native addon; bunyan runs without them.
  await run(PROJECT_BUN, ['build', '--target=bun', '--format=esm', '--minify-whitespace', '--minify-syntax', '--external', 'dtrace-provider', entry, '--outfile', outFile], { cwd: ROOT, maxBuffer: 16 << 20 });
}

/**
 * Compiles `bundle` (named {@link BUNDLE}) into `p`'s Bun runtime: `<outDir>/kubectl-coil`.
 * @throws Error when the runtime cannot be had or Bun fails
 */
export async function compileKubectlCoil(bundle: string, p: Platform, outDir: string): Promise<string> {
  const runtime = await bunRuntime(p);
  await mkdir(outDir, { recursive: true });
  // In a directory of its own, under the bundle's own name: the compile records the entry's name.
  const work = await mkdtemp(join(tmpdir(), 'kubectl-coil-compile-'));
  try {
    await copyFile(bundle, join(work, BUNDLE));
    await run(PROJECT_BUN, ['build', ...COMPILE_FLAGS, `--target=${p.bunTarget}`, `--compile-executable-path=${runtime}`, `./${BUNDLE}`, '--outfile', `./${BIN}`], { cwd: work, maxBuffer: 16 << 20 });
    const out = join(outDir, BIN);
    if (p.os === 'darwin') await writeFile(out, signedMacho(await readFile(join(work, BIN)), p));
    else await copyFile(join(work, BIN), out);
    return out;
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

/**
 * `file` (a darwin output of Bun) with a code signature that holds: Bun's own when it does
 * (darwin/arm64), else an ad-hoc one (darwin/amd64 keeps the runtime's stale signature: see
 * executable-format.ts). Checked again after signing.
 * @throws Error when the file is not a Mach-O of `p`'s arch or cannot be signed
 */
export function signedMacho(file: Buffer, p: Platform): Buffer {
  const f = executableFormat(file);
  if (f.format !== 'macho' || f.arch !== p.arch) throw new Error(`Bun's ${platformName(p)} output is ${f.format} ${f.arch}`);
  try {
    machoSignature(file);
    return file;
  } catch (e) {
    console.error(`build-kubectl-coil: ${platformName(p)}: Bun's signature does not hold (${(e as Error).message}); signing ad hoc`);
  }
  adhocSign(file, BIN);
  machoSignature(file);
  return file;
}

/** krew's archive of `bin` (a file named {@link BIN}): deterministic, so its sha256 is the build's. */
export async function archive(bin: string, outFile: string): Promise<void> {
  await run('sh', ['-c', 'tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 --mode=0755 --format=ustar -C "$1" -cf - "$2" | gzip -n > "$3"', 'sh', dirname(bin), BIN, outFile]);
}

/** One platform's entry of the manifest. */
export interface KrewPlatform {
  readonly selector: { readonly matchLabels: { readonly os: string; readonly arch: string } };
  readonly uri: string;
  readonly sha256: string;
  readonly bin: string;
  readonly files: readonly { readonly from: string; readonly to: string }[];
}

/** krew's plugin manifest (krew.googlecontainertools.github.com/v1alpha2 Plugin). */
export interface KrewManifest {
  readonly apiVersion: 'krew.googlecontainertools.github.com/v1alpha2';
  readonly kind: 'Plugin';
  readonly metadata: { readonly name: string };
  readonly spec: {
    readonly version: string;
    readonly homepage: string;
    readonly shortDescription: string;
    readonly description: string;
    readonly platforms: readonly KrewPlatform[];
  };
}

/** The manifest of `version` for `archives` (platform → its archive's sha256 as hex), downloaded from `baseUrl`. */
export function krewManifest(version: string, archives: readonly { platform: Platform; sha256: string }[], baseUrl: string): KrewManifest {
  return {
    apiVersion: 'krew.googlecontainertools.github.com/v1alpha2',
    kind: 'Plugin',
    metadata: { name: 'coil' },
    spec: {
      version: `v${version}`,
      homepage: 'https://github.com/coil-ts/coil',
      shortDescription: "Inspect and repair coil's IP address management",
      description: [
        "Reads coil's AddressPools, AddressBlocks and BlockRequests, the cluster's Nodes and Pods, and each",
        "node's coild (through the API server's pod proxy): `ipam show` prints pools, blocks and an",
        'address\'s owner, `ipam check` finds leaked addresses, orphan blocks, duplicate Pod IPs and',
        'more, `ipam release --from-report` frees what two reports agree on, `version` prints its',
        "own version and the cluster's coil-controller and coild versions.",
        '',
      ].join('\n'),
      platforms: archives.map(({ platform: p, sha256 }) => ({
        selector: { matchLabels: { os: p.os, arch: p.arch } },
        uri: `${baseUrl.replace(/\/+$/, '')}/${archiveName(p)}`,
        sha256,
        bin: BIN,
        files: [{ from: BIN, to: '.' }],
      })),
    },
  };
}

const sha256 = async (file: string): Promise<string> => createHash('sha256').update(await readFile(file)).digest('hex');

/** Options of {@link buildKubectlCoil}. */
export interface BuildOptions {
  /** Default: every platform of {@link PLATFORMS}. */
  readonly platforms?: readonly Platform[];
  /** Default: {@link defaultBaseUrl} of {@link appVersion}. */
  readonly baseUrl?: string;
}

/** What {@link buildKubectlCoil} wrote. */
export interface BuildResult {
  readonly bundle: string;
  readonly manifest: string;
  readonly platforms: readonly { platform: Platform; executable: string; archive: string; sha256: string; bytes: number }[];
}

/**
 * Builds the bundle, each platform's executable and archive, and plugin.yaml into `outDir`.
 * @throws Error when a runtime cannot be had or Bun fails
 */
export async function buildKubectlCoil(outDir: string, o: BuildOptions = {}): Promise<BuildResult> {
  await mkdir(outDir, { recursive: true });
  const bundle = join(outDir, BUNDLE);
  await bundleKubectlCoil(bundle);
  const platforms: BuildResult['platforms'][number][] = [];
  for (const p of o.platforms ?? PLATFORMS) {
    const executable = await compileKubectlCoil(bundle, p, join(outDir, `${p.os}-${p.arch}`));
    const file = join(outDir, archiveName(p));
    await archive(executable, file);
    platforms.push({ platform: p, executable, archive: file, sha256: await sha256(file), bytes: (await stat(executable)).size });
  }
  const manifest = join(outDir, 'plugin.yaml');
  const version = await appVersion();
  await writeFile(manifest, stringify(krewManifest(version, platforms, o.baseUrl ?? defaultBaseUrl(version))));
  return { bundle, manifest, platforms };
}

/** @throws Error naming `name` when it is no platform of {@link PLATFORMS} */
export function parsePlatform(name: string): Platform {
  const p = PLATFORMS.find((x) => platformName(x) === name);
  if (!p) throw new Error(`--platform: ${JSON.stringify(name)} is none of ${PLATFORMS.map(platformName).join(', ')}`);
  return p;
}

async function main(argv: readonly string[]): Promise<void> {
  const platforms: Platform[] = [];
  let baseUrl: string | undefined;
  let out = join(ROOT, 'dist/kubectl-coil');
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === '--platform' && argv[i + 1]) platforms.push(parsePlatform(argv[++i]!));
    else if (a === '--base-url' && argv[i + 1]) baseUrl = argv[++i]!;
    else if (!a.startsWith('-')) out = resolve(a);
    else throw new Error(`unknown argument ${JSON.stringify(a)} (usage: build.js [--platform OS/ARCH]... [--base-url URL] [OUT_DIR])`);
  }
  const r = await buildKubectlCoil(out, { platforms: platforms.length > 0 ? platforms : PLATFORMS, ...(baseUrl && { baseUrl }) });
  for (const p of r.platforms) console.error(`built ${p.executable} (${platformName(p.platform)}, ${p.bytes} bytes), ${p.archive} sha256 ${p.sha256}`);
  console.error(`wrote ${r.manifest}`);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  main(process.argv.slice(2)).catch((e: unknown) => {
    console.error(`build-kubectl-coil: ${e instanceof Error ? e.message : String(e)}`);
    process.exit(1);
  });
}
