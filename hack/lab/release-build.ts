/**
 * A previous coil release built from its git commit (CHANGELOG.md names each release's): its chart
 * and its image, made by that commit's own hack/build-image.sh, for the upgrade e2e
 * (test/e2e/upgrade.test.ts) to install and then upgrade from.
 *
 * The build runs in a temporary copy of the commit's tree (`git archive`; the work tree is never
 * touched) with `npm ci`, and is cached by commit outside the work tree —
 * `$COIL_CACHE_DIR/releases/<sha>/` (default ~/.cache/coil) holding `chart/`, `coil.oci.tar` and
 * `release.json` — so a machine builds each release once (a few minutes on 2 cores) and fresh
 * clones reuse it. The commit must be in the clone's history: a shallow clone fails with a
 * message that says so.
 */
import { execFile } from 'node:child_process';
import { cp, mkdir, mkdtemp, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { REPO_ROOT } from '../../test/envtest/control-plane.js';

const run = promisify(execFile);

/** A release as built and cached by {@link buildRelease}. */
export interface ReleaseBuild {
  /** The full commit id. */
  readonly commit: string;
  /** The release's number: its chart's appVersion, also its image's tag. */
  readonly version: string;
  /** Directory of its chart (charts/coil at the commit). */
  readonly chart: string;
  /** Its coil image: the reference it is tagged with and its OCI archive. */
  readonly image: { readonly ref: string; readonly archive: string };
}

/** Where releases are cached: `$COIL_CACHE_DIR/releases` (default ~/.cache/coil/releases). */
export function releaseCacheDir(): string {
  const cache = process.env.COIL_CACHE_DIR ?? join(process.env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'coil');
  return join(cache, 'releases');
}

/**
 * The release at git commit `ref` (a sha or any name git resolves), built on first use.
 * @param log progress messages (the build takes minutes)
 * @throws Error when the commit is not in the clone, or naming the failed step with its output's tail
 */
export async function buildRelease(ref: string, log: (message: string) => void = () => undefined): Promise<ReleaseBuild> {
  const commit = await run('git', ['-C', REPO_ROOT, 'rev-parse', '--verify', '--quiet', `${ref}^{commit}`]).then(
    (r) => r.stdout.trim(),
    () => { throw new Error(`release commit ${ref} is not in this clone's history (a shallow clone? git fetch --unshallow)`); },
  );
  const dir = join(releaseCacheDir(), commit);
  const cached = await readFile(join(dir, 'release.json'), 'utf8').then((t) => JSON.parse(t) as ReleaseBuild, () => undefined);
  if (cached) return cached;

  await mkdir(releaseCacheDir(), { recursive: true });
  const src = await mkdtemp('/tmp/coil-release-src-');
  const out = await mkdtemp(join(releaseCacheDir(), `.${commit.slice(0, 12)}-`));
  try {
    log(`building release ${commit.slice(0, 12)}: git archive, npm ci, its hack/build-image.sh (cached in ${dir})`);
    await step('git archive', 'bash', ['-o', 'pipefail', '-c', `git -C "$1" archive --format=tar "$2" | tar -x -C "$3"`, 'archive', REPO_ROOT, commit, src]);
    await step('npm ci', 'npm', ['ci', '--no-audit', '--no-fund'], src);
    const built = await step('hack/build-image.sh', 'nice', ['-n', '10', 'bash', 'hack/build-image.sh'], src);
    const image = built.split('\n').filter((l) => l.startsWith('IMAGE ghcr.io/coil-ts/coil:')).map((l) => l.split(' '))[0];
    if (!image) throw new Error(`release ${commit}: hack/build-image.sh printed no coil image:\n${built.slice(-2000)}`);
    const [, imageRef, archive] = image as [string, string, string];
    await cp(archive, join(out, 'coil.oci.tar'));
    await cp(join(src, 'charts/coil'), join(out, 'chart'), { recursive: true });
    const release: ReleaseBuild = { commit, version: imageRef.slice(imageRef.lastIndexOf(':') + 1), chart: join(dir, 'chart'), image: { ref: imageRef, archive: join(dir, 'coil.oci.tar') } };
    await writeFile(join(out, 'release.json'), `${JSON.stringify(release, null, 2)}\n`);
    await rm(dir, { recursive: true, force: true });
    await rename(out, dir);
    log(`release ${release.version} (${commit.slice(0, 12)}) built: ${release.image.ref}`);
    return release;
  } finally {
    await rm(src, { recursive: true, force: true });
    await rm(out, { recursive: true, force: true });
  }
}

/** Runs one build step; resolves with its stdout. @throws Error naming the step, with its output's tail */
async function step(what: string, command: string, args: readonly string[], cwd?: string): Promise<string> {
  try {
    return (await run(command, args, { cwd, maxBuffer: 256 << 20, env: { ...process.env, npm_config_update_notifier: 'false' } })).stdout;
  } catch (err) {
    const e = err as { stdout?: string; stderr?: string; message: string };
    throw new Error(`release build, ${what}: ${e.message}\n${`${e.stdout ?? ''}${e.stderr ?? ''}`.slice(-3000)}`, { cause: err });
  }
}
