/**
 * `npm run build:kubectl-coil` (hack/kubectl-coil/build.ts): one self-contained `kubectl-coil`
 * per platform, each in a krew archive, and krew's plugin manifest naming them. Checked as krew
 * and each platform's loader would take them, without a macOS or arm64 machine: the manifest
 * parses and has one platform per os/arch with its archive's sha256; each archive holds the
 * executable `bin` names, built for its platform by its ELF or Mach-O header (machine type and
 * format), a darwin one with an ad-hoc code signature whose every page hash holds (macOS on arm64
 * kills an executable without a valid one). The linux/amd64 executable runs here with no `node`,
 * `bun` or `deno` on PATH, and its errors are one line (test/envtest/kubectl-coil-executable.test.ts
 * runs it against a real API server).
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdir, mkdtemp, readFile, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import { parse } from 'yaml';
import { executableFormat, machoSignature } from '../hack/kubectl-coil/executable-format.js';
import { archiveName, BIN, buildKubectlCoil, type BuildResult, type KrewManifest } from '../hack/kubectl-coil/build.js';
import { PLATFORMS, platformName } from '../hack/kubectl-coil/runtimes.js';
import { KUBECTL_COIL_VERSION } from '../src/kubectl-coil/version.js';
import { runtimeFreePath } from './support/runtime-free-path.js';

const run = promisify(execFile);

describe('kubectl-coil for every platform, and its krew manifest', () => {
  let dir = '';
  let built: BuildResult;
  let manifest: KrewManifest;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'kubectl-coil-krew-'));
    built = await buildKubectlCoil(join(dir, 'out'));
    manifest = parse(await readFile(built.manifest, 'utf8')) as KrewManifest;
    for (const p of built.platforms) console.log(`${platformName(p.platform)}: executable ${(p.bytes / 1e6).toFixed(1)} MB, archive ${((await stat(p.archive)).size / 1e6).toFixed(1)} MB`);
  });
  after(() => (dir ? rm(dir, { recursive: true, force: true }) : undefined));

  test('plugin.yaml is a krew Plugin with one platform per os/arch, each naming its archive, its sha256 and the binary', async () => {
    assert.equal(manifest.apiVersion, 'krew.googlecontainertools.github.com/v1alpha2');
    assert.equal(manifest.kind, 'Plugin');
    assert.equal(manifest.metadata.name, 'coil', 'kubectl coil');
    assert.equal(manifest.spec.version, `v${KUBECTL_COIL_VERSION}`);
    assert.ok(manifest.spec.shortDescription && manifest.spec.homepage && manifest.spec.description);
    const selectors = manifest.spec.platforms.map((p) => `${p.selector.matchLabels.os}/${p.selector.matchLabels.arch}`).sort();
    assert.deepEqual(selectors, PLATFORMS.map(platformName).sort(), 'linux and darwin, amd64 and arm64, once each');
    for (const entry of manifest.spec.platforms) {
      const p = PLATFORMS.find((x) => x.os === entry.selector.matchLabels.os && x.arch === entry.selector.matchLabels.arch)!;
      assert.match(entry.uri, /^https:\/\//);
      assert.equal(basename(entry.uri), archiveName(p));
      const archive = join(dirname(built.manifest), basename(entry.uri));
      assert.match(entry.sha256, /^[0-9a-f]{64}$/);
      assert.equal(entry.sha256, createHash('sha256').update(await readFile(archive)).digest('hex'), `${archiveName(p)}'s sha256`);
      assert.equal(entry.bin, BIN);
      assert.deepEqual(entry.files, [{ from: BIN, to: '.' }]);
    }
  });

  test("each archive holds the executable of its platform: ELF or Mach-O, its machine type; darwin's ad-hoc signed", async () => {
    for (const entry of manifest.spec.platforms) {
      const { os, arch } = entry.selector.matchLabels;
      const into = join(dir, `unpacked-${os}-${arch}`);
      await mkdir(into);
      await run('tar', ['-xzf', join(dirname(built.manifest), basename(entry.uri)), '-C', into]);
      assert.deepEqual(await readdir(into), [BIN], 'the archive holds what files[] copies');
      const bin = join(into, entry.bin);
      assert.ok(((await stat(bin)).mode & 0o111) !== 0, `${os}/${arch}: executable`);
      const file = await readFile(bin);
      assert.deepEqual(executableFormat(file), { format: os === 'darwin' ? 'macho' : 'elf', os, arch });
      if (os === 'darwin') {
        const sig = machoSignature(file);
        assert.ok(sig.adhoc, `${os}/${arch}: ad-hoc signed (flags 0x${sig.flags.toString(16)})`);
        assert.equal(sig.end, file.length, `${os}/${arch}: nothing after the signature`);
        console.log(`${os}/${arch}: ad-hoc signature (identifier ${sig.identifier}) over ${sig.codeLimit} bytes, ${sig.pages} page hashes hold`);
      }
    }
  });

  test('the linux/amd64 executable runs with no node, bun or deno on PATH; a bad flag and a fatal error are one line', async () => {
    const path = await runtimeFreePath(join(dir, 'path'));
    const tool = join(dirname(built.manifest), 'linux-amd64', BIN);
    const env = { PATH: path, HOME: dir };
    assert.equal((await run(tool, ['version', '--client'], { env, cwd: dir })).stdout, `kubectl-coil ${KUBECTL_COIL_VERSION}\n`);
    assert.match((await run(tool, ['ipam', 'release', '--help'], { env, cwd: dir })).stdout, /--from-report stringArray/);
    const fail = (args: string[]) => run(tool, args, { env, cwd: dir }).then(() => assert.fail(`${args.join(' ')} succeeded`), (e: { code: number; stdout: string; stderr: string }) => e);
    const bad = await fail(['ipam', 'check', '--no-such-flag']);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /^kubectl coil: [^\n]*--no-such-flag[^\n]*\n$/);
    // A credential plugin that does not exist: the client library throws where nothing expects it.
    const kubeconfig = join(dir, 'exec.kubeconfig');
    await writeFile(kubeconfig, JSON.stringify({
      apiVersion: 'v1', kind: 'Config', 'current-context': 'c',
      clusters: [{ name: 'c', cluster: { server: 'https://127.0.0.1:9' } }],
      users: [{ name: 'u', user: { exec: { apiVersion: 'client.authentication.k8s.io/v1', command: join(dir, 'no-such-credential-plugin') } } }],
      contexts: [{ name: 'c', context: { cluster: 'c', user: 'u' } }],
    }));
    const fatal = await fail(['ipam', 'show', '--kubeconfig', kubeconfig]);
    assert.equal(fatal.code, 1);
    assert.match(fatal.stderr, /^kubectl coil: [^\n]*no-such-credential-plugin[^\n]*\n$/, 'one line naming the cause');
    assert.ok(fatal.stderr.length < 600, `${fatal.stderr.length} characters`);
    const missing = await fail(['version', '--kubeconfig', join(dir, 'none.kubeconfig')]);
    assert.equal(missing.code, 2);
    assert.match(missing.stderr, /^kubectl coil: --kubeconfig: cannot load [^\n]*none\.kubeconfig[^\n]*\n$/);
    // An API server that does not answer (nothing listens on the discard port).
    const unreachableConfig = join(dir, 'unreachable.kubeconfig');
    await writeFile(unreachableConfig, (await readFile(kubeconfig, 'utf8')).replace(/"exec":\{[^}]*\}/, '"token":"x"'));
    const unreachable = await fail(['ipam', 'check', '--kubeconfig', unreachableConfig]);
    assert.equal(unreachable.code, 1);
    assert.match(unreachable.stderr, /^kubectl coil: cannot reach the API server: [^\n]*127\.0\.0\.1:9[^\n]*\n$/);
  });
});
