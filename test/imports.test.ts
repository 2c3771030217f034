/**
 * Import layering (STYLE.md "Imports point inward"), checked on the TypeScript sources the way
 * import-linter checks kopf: the API and IPAM model do no I/O; the CNI shim stays tiny; nothing
 * imports an agent.
 */
import assert from 'node:assert/strict';
import { readFile, readdir } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';

const root = fileURLToPath(new URL('../../', import.meta.url));

async function sources(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const entry of await readdir(join(root, dir), { withFileTypes: true }).catch(() => [])) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...(await sources(path)));
    else if (entry.name.endsWith('.ts') && !entry.name.endsWith('.test.ts')) out.push(path);
  }
  return out;
}

/** Runtime (non type-only) import specifiers of a file. */
async function runtimeImports(file: string): Promise<string[]> {
  const text = await readFile(join(root, file), 'utf8');
  const specs: string[] = [];
  for (const m of text.matchAll(/^\s*(?:import|export)\s+(type\s+)?[^'";]*?from\s+['"]([^'"]+)['"]/gm)) {
    if (!m[1]) specs.push(m[2]!);
  }
  for (const m of text.matchAll(/^\s*import\s+['"]([^'"]+)['"]/gm)) specs.push(m[1]!);
  return specs;
}

const PURE = ['src/api/v2', 'src/ipam', 'src/cnirpc'];

test('src/api/v2 and src/ipam import nothing that does I/O', async () => {
  for (const dir of PURE) {
    for (const file of await sources(dir)) {
      for (const spec of await runtimeImports(file)) {
        const ok = spec.startsWith('./') || spec.startsWith('../') && PURE.some((p) => join(file, '..', spec).startsWith(p)) || spec === 'cidr-tools';
        assert.ok(ok, `${file} imports ${spec}`);
      }
    }
  }
});

test('the CNI shim imports only node: built-ins, its own files and the shared proto constants', async () => {
  for (const file of await sources('src/cni-shim')) {
    for (const spec of await runtimeImports(file)) {
      const ok = spec.startsWith('node:') || (spec.startsWith('./') && !spec.includes('..')) || /^\.\.\/cnirpc\/[a-z-]+\.js$/.test(spec);
      assert.ok(ok, `${file} imports ${spec}`);
    }
  }
});

/**
 * hack/ tooling may read what programs declare (as controller-gen reads markers): their
 * registries and rbac modules, and the lab may reuse coild's PodNetwork to inspect nodes.
 */
const TOOLING_MAY_IMPORT = [/^src\/controller\/[a-z-]+-registry\.js$/, /^src\/[a-z-]+\/rbac\.js$/];

test('nothing imports an agent or the controller from outside it', async () => {
  const agents = ['src/node-agent', 'src/egress-agent', 'src/cni-shim', 'src/controller', 'src/migrator', 'src/cni-installer'];
  for (const file of [...(await sources('src')), ...(await sources('hack'))]) {
    for (const spec of await runtimeImports(file)) {
      if (!spec.startsWith('.')) continue;
      const target = relative(root, join(root, file, '..', spec));
      const owner = agents.find((a) => target.startsWith(a));
      const tooling = file.startsWith('hack/') && TOOLING_MAY_IMPORT.some((re) => re.test(target));
      assert.ok(!owner || file.startsWith(owner) || tooling, `${file} imports ${target} of ${owner}`);
    }
  }
});
