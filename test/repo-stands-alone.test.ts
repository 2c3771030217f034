/**
 * The repository stands alone: what the code relies on is written in its own docs/, and comments
 * cite those (docs/design.md#citations), never the team's reference notes outside the
 * repository. Checked on every text file of the tree, comments and docs alike:
 * - no name or path of an outside document (the Coil behaviour and v1-data studies, the npm,
 *   CNI-baseline, control-plane and peer notes, the style and architecture guides, the seeds, the
 *   shared folder);
 * - no bare section sign with a number (`§5.6` meant a section of an outside study); RFC sections
 *   are written `RFC 7541 §5.2`;
 * - every citation of our docs resolves: `docs/<file>.md`, `docs/<file>.md#<anchor>` and
 *   `docs/<file>.md, "<heading>"` name a file and heading that exist, as do the links between the
 *   docs (anchors as GitHub makes them from headings).
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { readFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';

const root = fileURLToPath(new URL('../../', import.meta.url));
const SELF = 'test/repo-stands-alone.test.ts';
const DIRS = ['src', 'hack', 'test', 'charts', 'proto', 'docs', 'config', '.ci'];
const FILES = ['README.md', 'CHANGELOG.md', 'Dockerfile', 'package.json', 'tsconfig.json'];

/** Outside the repository, each with the reason it may not be cited. */
const FORBIDDEN: readonly { re: RegExp; what: string }[] = [
  {
    re: /(?<!#)\b(coil-behaviour|coil-v1-data|npm-ecosystem|cni-baseline|real-control-plane|fou-in-qemu|cni-over-grpc|coil-v2-design|egress-nat-implementation|aws-vpc-cni-proposal|kuryr-midonet-cni-design)\b/,
    what: 'a reference study outside the repository (write what the code relies on in docs/ and cite that)',
  },
  { re: /\b(STYLE|ARCHITECTURE|DEVELOPERS|COORDINATION)\.md\b|\bpeers\.md\b/, what: 'a team guide or note outside the repository (docs/design.md holds ours)' },
  { re: /\.\.\/shared\/|\/work\/shared\b|\bshared\/(reference|design|seeds|bench|hooks)\b|\breference\/[\w-]+\.md\b/, what: 'a path outside the repository' },
];

/**
 * Known dependencies on something outside the repository that are code, not citations. Each is
 * listed with its reason; an entry that no longer matches fails the test, so it is removed.
 */
const ALLOWED: readonly { file: string; text: string; why: string }[] = [];

async function walk(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const entry of await readdir(join(root, dir), { withFileTypes: true }).catch(() => [])) {
    if (entry.name === 'node_modules' || entry.name === 'dist') continue;
    const path = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...(await walk(path)));
    else if (entry.isFile()) out.push(path);
  }
  return out;
}

/** Text files of the tree: path → contents (binary files left out). */
async function tree(): Promise<Map<string, string>> {
  const files = new Map<string, string>();
  const paths = [...FILES.filter((f) => existsSync(join(root, f)))];
  for (const dir of DIRS) paths.push(...(await walk(dir)));
  for (const path of paths) {
    const bytes = await readFile(join(root, path));
    if (bytes.includes(0)) continue;
    files.set(path, bytes.toString('utf8'));
  }
  return files;
}

/** GitHub's anchor of a heading: lower case, punctuation dropped, each space a hyphen. */
function slug(heading: string): string {
  return heading.trim().toLowerCase().replace(/[^\p{L}\p{N}\s_-]/gu, '').replace(/\s/g, '-');
}

/** Headings of a Markdown text (outside code fences): their texts and their anchors. */
function headings(markdown: string): { texts: Set<string>; anchors: Set<string> } {
  const texts = new Set<string>();
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  let fenced = false;
  for (const line of markdown.split('\n')) {
    if (/^\s*(```|~~~)/.test(line)) fenced = !fenced;
    if (fenced) continue;
    const m = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (!m) continue;
    texts.add(m[1]!);
    const base = slug(m[1]!);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    anchors.add(n === 0 ? base : `${base}-${n}`);
  }
  return { texts, anchors };
}

test('no file cites a document or path outside the repository', async () => {
  const files = await tree();
  const problems: string[] = [];
  const used = new Set<(typeof ALLOWED)[number]>();
  for (const [path, text] of files) {
    if (path === SELF) continue;
    text.split('\n').forEach((line, i) => {
      const allowed = ALLOWED.find((a) => a.file === path && line.includes(a.text));
      if (allowed) {
        used.add(allowed);
        return;
      }
      for (const { re, what } of FORBIDDEN) {
        const m = re.exec(line);
        if (m) problems.push(`${path}:${i + 1}: "${m[0]}" is ${what}`);
      }
    });
  }
  for (const a of ALLOWED) if (!used.has(a)) problems.push(`${a.file}: the allowed line is gone; remove it from ALLOWED (${a.why})`);
  assert.deepEqual(problems, []);
});

test('no bare section number: a § with a number belongs to an RFC named before it', async () => {
  const files = await tree();
  const problems: string[] = [];
  for (const [path, text] of files) {
    if (path === SELF) continue;
    text.split('\n').forEach((line, i) => {
      for (const m of line.matchAll(/§\s*\d/g)) {
        if (!/RFC \d+,? ?$/.test(line.slice(0, m.index))) problems.push(`${path}:${i + 1}: ${line.trim()}`);
      }
    });
  }
  assert.deepEqual(problems, []);
});

test('every citation of docs/ names a file and a heading that exist', async () => {
  const files = await tree();
  const docs = new Map<string, ReturnType<typeof headings>>();
  for (const [path, text] of files) if (/^docs\/[^/]+\.md$/.test(path)) docs.set(path.slice('docs/'.length), headings(text));
  const problems: string[] = [];
  const check = (where: string, file: string, anchor: string | undefined, quoted: string[]): void => {
    const doc = docs.get(file);
    if (!doc) {
      problems.push(`${where}: docs/${file} does not exist`);
      return;
    }
    if (anchor !== undefined && !doc.anchors.has(anchor)) problems.push(`${where}: docs/${file} has no heading with anchor #${anchor}`);
    for (const q of quoted) if (!doc.texts.has(q)) problems.push(`${where}: docs/${file} has no heading "${q}"`);
  };
  for (const [path, text] of files) {
    if (path === SELF) continue;
    text.split('\n').forEach((line, i) => {
      const where = `${path}:${i + 1}`;
      // docs/<file>.md[#anchor][, "Heading"[, "Heading"]…]
      for (const m of line.matchAll(/\bdocs\/([\w.-]+\.md)(?:#([\w-]+))?((?:,?\s+"[^"]+")(?:,\s*"[^"]+")*)?/g)) {
        check(where, m[1]!, m[2], [...(m[3] ?? '').matchAll(/"([^"]+)"/g)].map((q) => q[1]!));
      }
      // Links between the docs: ](<file>.md[#anchor]) and ](#anchor).
      if (path.startsWith('docs/')) {
        for (const m of line.matchAll(/\]\(([\w.-]+\.md)?(?:#([\w-]+))?\)/g)) {
          if (m[1] === undefined && m[2] === undefined) continue;
          check(where, m[1] ?? path.slice('docs/'.length), m[2], []);
        }
      }
    });
  }
  assert.deepEqual(problems, []);
});

test('anchors are made as GitHub makes them', () => {
  assert.equal(slug("Coil's weak spots, and what coil does instead"), 'coils-weak-spots-and-what-coil-does-instead');
  assert.equal(slug('ADD, DEL and CHECK'), 'add-del-and-check');
  assert.equal(slug('Test certificates: /etc/x.md'), 'test-certificates-etcxmd');
  const h = headings('# A\n```\n# not a heading\n```\n## B b\n## B b\n');
  assert.deepEqual([...h.anchors], ['a', 'b-b', 'b-b-1']);
});
