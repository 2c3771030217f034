/**
 * One release number everywhere (CHANGELOG.md's opening): package.json and its lock, the chart's
 * `version` and `appVersion`, the image tag (hack/build-image.sh tags `ghcr.io/coil-ts/coil:` with
 * the appVersion; the chart's `image.tag` defaults to it), the Egress NAT pods' fallback image,
 * `kubectl coil version` — and the newest CHANGELOG entry, which must name its commit. The
 * Kubernetes range the README states is hack/kubernetes-versions', and the chart admits all of it.
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';
import { KUBECTL_COIL_VERSION } from '../src/kubectl-coil/version.js';
import { FALLBACK_EGRESS_IMAGE } from '../src/reconcilers/egress-options.js';

const root = fileURLToPath(new URL('../../', import.meta.url));
const read = (path: string): Promise<string> => readFile(join(root, path), 'utf8');
const SEMVER = /^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-[0-9A-Za-z.-]+)?$/;

/** `## x.y.z` headings of CHANGELOG.md, newest first, each with its body. */
async function changelog(): Promise<{ version: string; body: string }[]> {
  const text = await read('CHANGELOG.md');
  return [...text.matchAll(/^## (\S+)\n([\s\S]*?)(?=^## |(?![\s\S]))/gm)].map((m) => ({ version: m[1]!, body: m[2]! }));
}

test('package.json, its lock, the chart, the image tag, kubectl-coil and the CHANGELOG name one semantic version', async () => {
  const pkg = JSON.parse(await read('package.json')) as { version: string };
  const lock = JSON.parse(await read('package-lock.json')) as { version: string; packages: Record<string, { version?: string }> };
  const chart = parse(await read('charts/coil/Chart.yaml')) as { version: string; appVersion: string };
  const values = parse(await read('charts/coil/values.yaml')) as { image: { repository: string; tag: string } };
  const version = pkg.version;
  assert.match(version, SEMVER, 'package.json version is a semantic version');
  assert.equal(lock.version, version, 'package-lock.json');
  assert.equal(lock.packages['']?.version, version, 'package-lock.json packages[""]');
  assert.equal(chart.version, version, 'Chart.yaml version');
  assert.equal(chart.appVersion, version, 'Chart.yaml appVersion (the image tag)');
  assert.equal(values.image.tag, '', 'values.yaml image.tag is empty: the chart\'s appVersion');
  assert.equal(FALLBACK_EGRESS_IMAGE, `${values.image.repository}:${version}`);
  assert.equal(KUBECTL_COIL_VERSION, version, 'kubectl coil version');
  // hack/build-image.sh takes the tag from the chart, never a number of its own.
  const build = await read('hack/build-image.sh');
  assert.match(build, /^APP_VERSION=\$\(sed -n .*charts\/coil\/Chart\.yaml\)$/m);
  assert.match(build, /^COIL_IMAGE=\$\{COIL_IMAGE:-ghcr\.io\/coil-ts\/coil:\$APP_VERSION\}$/m);

  const releases = await changelog();
  assert.equal(releases[0]?.version, version, 'the newest CHANGELOG.md entry is this version');
  for (const r of releases) {
    assert.match(r.version, SEMVER, `CHANGELOG.md ## ${r.version}`);
    assert.match(r.body, /^Commit: (this change|[0-9a-f]{40})\b/m, `CHANGELOG.md ## ${r.version} names its commit`);
  }
  const numbers = releases.map((r) => r.version.split('.').map(Number));
  for (let i = 1; i < numbers.length; i++) {
    const [a, b] = [numbers[i - 1]!, numbers[i]!];
    assert.ok(a[0]! > b[0]! || (a[0] === b[0] && (a[1]! > b[1]! || (a[1] === b[1] && a[2]! > b[2]!))), `${releases[i - 1]!.version} is newer than ${releases[i]!.version}`);
  }
  assert.equal(new Set(releases.map((r) => r.version)).size, releases.length, 'each release once');
});

test("the README's supported Kubernetes range is hack/kubernetes-versions' first and last line, and the chart installs on all of it", async () => {
  const chart = parse(await read('charts/coil/Chart.yaml')) as { kubeVersion: string };
  const lines = (await read('hack/kubernetes-versions')).split('\n').filter((l) => l.trim() !== '' && !l.startsWith('#')).map((l) => l.trim().split(/\s+/));
  for (const [minor, kubernetes, etcd] of lines) {
    assert.match(kubernetes ?? '', new RegExp(`^v${minor!.replace('.', '\\.')}\\.\\d+$`), `hack/kubernetes-versions: ${minor} builds a patch release of it`);
    assert.match(etcd ?? '', /^v3\.\d+\.\d+$/, `hack/kubernetes-versions: ${minor}'s etcd`);
  }
  const newest = lines[0]![0]!;
  const oldest = lines[lines.length - 1]![0]!;
  const minor = (v: string) => Number(v.split('.')[1]);
  assert.ok(minor(newest) - minor(oldest) >= 3, 'the newest minor and at least the three before it');
  const readme = await read('README.md');
  assert.match(readme, new RegExp(`\\*\\*Kubernetes ${oldest.replace('.', '\\.')}–${newest.replace('.', '\\.')}\\*\\*`), 'README states the range');
  // The chart's floor may sit below the range (it does not refuse an untested release: README
  // says why), never inside it.
  const floor = /^>=1\.(\d+)\.0-0$/.exec(chart.kubeVersion);
  assert.ok(floor && Number(floor[1]) <= minor(oldest), `kubeVersion ${chart.kubeVersion} admits ${oldest}`);
});
