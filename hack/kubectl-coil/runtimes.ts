/**
 * The Bun runtime of each platform `kubectl-coil` is built for (build.ts), taken from the npm
 * registry — the only place this build reaches besides Debian's and Go's mirrors — instead of the
 * download `bun build --compile --target=…` would make from GitHub.
 *
 * Bun publishes each platform's binary as an npm package (`@oven/bun-<os>-<arch>`). Their `os`
 * and `cpu` fields make `npm ci` skip or refuse all but this machine's, so they are not
 * dependencies: `npm pack` fetches the tarball of the pinned version (npm's own cache serves a
 * repeat), its sha512 is checked against the pin below, and `package/bin/bun` is unpacked into
 * `$COIL_CACHE_DIR/bun-runtimes/<version>/<package>/bun` (default ~/.cache/coil). linux/amd64 is
 * the project's own Bun (devDependency `@oven/bun-linux-x64`, verified by package-lock.json).
 *
 * The version is the project's Bun's: compiling with one Bun and embedding another's runtime is
 * not something Bun supports, so a Bun upgrade must update {@link BUN_RUNTIMES} (the error says how).
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { access, mkdir, mkdtemp, readFile, rename, rm } from 'node:fs/promises';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('../../../', import.meta.url));

/** One target: krew's os/arch words, Bun's package and `--target`. */
export interface Platform {
  /** krew's (and Go's) `os`: `linux`, `darwin`. */
  readonly os: 'linux' | 'darwin';
  /** krew's (and Go's) `arch`: `amd64`, `arm64`. */
  readonly arch: 'amd64' | 'arm64';
  /** The npm package holding Bun's runtime for this platform. */
  readonly bunPackage: string;
  /** `bun build --target` */
  readonly bunTarget: string;
}

/** The platforms `kubectl-coil` is built for. */
export const PLATFORMS: readonly Platform[] = [
  { os: 'linux', arch: 'amd64', bunPackage: '@oven/bun-linux-x64', bunTarget: 'bun-linux-x64' },
  { os: 'linux', arch: 'arm64', bunPackage: '@oven/bun-linux-aarch64', bunTarget: 'bun-linux-arm64' },
  { os: 'darwin', arch: 'amd64', bunPackage: '@oven/bun-darwin-x64', bunTarget: 'bun-darwin-x64' },
  { os: 'darwin', arch: 'arm64', bunPackage: '@oven/bun-darwin-aarch64', bunTarget: 'bun-darwin-arm64' },
];

/** `linux/amd64` */
export const platformName = (p: Platform): string => `${p.os}/${p.arch}`;

/**
 * The pinned runtimes: the Bun version and each other platform's package sha512 (as npm's
 * `dist.integrity`). To move to another Bun: `npm view @oven/bun-<x>@<version> dist.integrity`
 * for each package below.
 */
export const BUN_RUNTIMES = {
  version: '1.4.5',
  integrity: {
    '@oven/bun-linux-aarch64': 'sha512-4BXmsSKnjOrlGWqZV4x/oWa7AVoR+B6lCXddMzOAXBIm3t50eslg9wb66gmtW1AamEQ1l1CDvmmruysEhqOWMg==',
    '@oven/bun-darwin-x64': 'sha512-qkLPMGHZM9NI6CeHTWwVezzmlo6cC4Ta7yUAjYIWXS366qQcOlcp75t2uZyiuVRBMPS0h9qE0tCcvCHGaFqjJg==',
    '@oven/bun-darwin-aarch64': 'sha512-4MIFXHmctH2EhAxLXm2/qxNtv17dFtLJylvaOCsrgq6KSqHTs6eW5YSrJjRbJxYUJaR901fsN8JfZOa+CsWpWQ==',
  } as Record<string, string>,
} as const;

/** The project's Bun (the build's compiler, and linux/amd64's runtime). */
export const PROJECT_BUN = join(ROOT, 'node_modules/@oven/bun-linux-x64/bin/bun');

/** @throws Error when the project's Bun is missing or not the pinned version */
export async function projectBunVersion(): Promise<string> {
  const pkg = JSON.parse(await readFile(join(ROOT, 'node_modules/@oven/bun-linux-x64/package.json'), 'utf8').catch(() => {
    throw new Error('node_modules/@oven/bun-linux-x64 is missing: run npm ci');
  })) as { version: string };
  if (pkg.version !== BUN_RUNTIMES.version) {
    throw new Error(`the project's Bun is ${pkg.version} but hack/kubectl-coil/runtimes.ts pins the other platforms' runtimes at ${BUN_RUNTIMES.version}: update BUN_RUNTIMES (npm view @oven/bun-<platform>@${pkg.version} dist.integrity)`);
  }
  return pkg.version;
}

function cacheDir(): string {
  return join(process.env.COIL_CACHE_DIR ?? join(process.env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'coil'), 'bun-runtimes');
}

/**
 * The path of `p`'s Bun runtime, fetched and unpacked on first use.
 * @throws Error when npm cannot fetch the package, or its sha512 is not the pinned one
 */
export async function bunRuntime(p: Platform): Promise<string> {
  const version = await projectBunVersion();
  if (p.bunPackage === '@oven/bun-linux-x64') return PROJECT_BUN;
  const want = BUN_RUNTIMES.integrity[p.bunPackage];
  if (!want) throw new Error(`no pinned sha512 for ${p.bunPackage} in hack/kubectl-coil/runtimes.ts`);
  const dir = join(cacheDir(), version, p.bunPackage.replace('/', '+'));
  const bin = join(dir, 'bun');
  if (await access(bin).then(() => true, () => false)) return bin;
  await mkdir(join(cacheDir(), version), { recursive: true });
  const tmp = await mkdtemp(`${dir}.tmp-`);
  try {
    const spec = `${p.bunPackage}@${version}`;
    const { stdout } = await run('npm', ['pack', spec, '--json', '--pack-destination', tmp], { cwd: tmp, maxBuffer: 16 << 20 });
    const [packed] = JSON.parse(stdout) as { filename: string }[];
    const tarball = join(tmp, packed!.filename);
    const got = `sha512-${createHash('sha512').update(await readFile(tarball)).digest('base64')}`;
    if (got !== want) throw new Error(`${spec}: the tarball's sha512 is ${got}, the pin is ${want}`);
    await run('tar', ['-xzf', tarball, '-C', tmp, 'package/bin/bun']);
    await rename(join(tmp, 'package/bin'), join(tmp, 'out'));
    await rename(join(tmp, 'out'), dir).catch(async (e: NodeJS.ErrnoException) => {
      // Another build unpacked it meanwhile: theirs is the same bytes.
      if (e.code !== 'ENOTEMPTY' && e.code !== 'EEXIST') throw e;
    });
    return bin;
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
}
