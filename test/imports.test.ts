/**
 * Import layering (docs/design.md#imports-point-inward), checked on the TypeScript sources the way
 * import-linter checks kopf: the API and IPAM model do no I/O; the CNI shim stays tiny; nothing
 * imports an agent.
 */
import assert from 'node:assert/strict';
import { mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
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

test('src/ipam imports nothing of src/api (src/api imports src/ipam; type-only imports count)', async () => {
  for (const file of await sources('src/ipam')) {
    for (const spec of await allImports(root, file)) {
      const target = relative(root, join(root, file, '..', spec));
      assert.ok(!target.startsWith('src/api'), `${file} imports ${target}, a floor up`);
    }
  }
});

/** Modules of src/ the CNI shim may share because they import nothing at all (checked below). */
const SHIM_MAY_SHARE = ['../runtime/bun-libc.js'];

test('the CNI shim imports only node: built-ins, its own files, the shared proto constants and the dependency-free libc binding', async () => {
  for (const file of await sources('src/cni-shim')) {
    for (const spec of await runtimeImports(file)) {
      const ok = spec.startsWith('node:') || (spec.startsWith('./') && !spec.includes('..')) || /^\.\.\/cnirpc\/[a-z-]+\.js$/.test(spec) || SHIM_MAY_SHARE.includes(spec);
      assert.ok(ok, `${file} imports ${spec}`);
    }
  }
  for (const spec of SHIM_MAY_SHARE) {
    const file = relative(root, join(root, 'src/cni-shim', spec)).replace(/\.js$/, '.ts');
    assert.deepEqual(await allImports(root, file), [], `${file} is shared with the CNI shim, so it imports nothing`);
  }
});

/**
 * Concepts shared across src/ that live in one module (issue 37): a second declaration of one
 * of these names, or a second libc binding, is a copy to fold into the owner.
 */
const ONE_HOME: ReadonlyArray<[RegExp, string]> = [
  [/\bfunction parseCidr\b|\binterface ParsedCidr\b|\bfunction formatCidr\b/, 'src/ipam/cidr.ts'],
  [/\bfunction canonicalAddress\b/, 'src/ipam/ip-address.ts'],
  [/\bfunction formatTable\b/, 'src/runtime/text-table.ts'],
  [/\bdlopen\(/, 'src/runtime/bun-libc.ts'],
  [/\binterface SubnetSet\b/, 'src/ipam/pool.ts'],
  [/\btype (?:NetfilterBackend|NatBackend)\s*=/, 'src/api/v2/keys.ts'],
  [/^\s*function canonical\(/m, ''],
];

test('each shared concept is declared in one module of src/ (CIDR text, canonical addresses, tables, the libc binding, SubnetSet, the netfilter backend)', async () => {
  for (const file of await sources('src')) {
    if (file.endsWith('.d.ts')) continue;
    const text = await readFile(join(root, file), 'utf8');
    for (const [re, home] of ONE_HOME) {
      if (file === home) continue;
      assert.doesNotMatch(text, re, `${file} declares what ${home || 'a shared module'} owns (${re.source})`);
    }
  }
});

/**
 * hack/ tooling may read what programs declare (as controller-gen reads markers): their
 * registries and rbac modules, and the lab and hack/bench/pod-network.ts may reuse coild's
 * PodNetwork (to inspect nodes, to time its setup); hack/bench/recovery.ts times coild's
 * recovery and GC over the parts of its ipam/ and podnet/ rooms, and hack/bench/scale-node.ts, the
 * scale benchmark's coild stand-in, is made of those parts so that what it asks of the apiserver
 * is what coild asks.
 */
const TOOLING_MAY_IMPORT = [/^src\/controller\/[a-z-]+-registry\.js$/, /^src\/[a-z-]+\/rbac\.js$/, /^src\/node-agent\/podnet\/pod-network(-[a-z0-9]+)?\.js$/];
const BENCH_MAY_IMPORT = /^src\/node-agent\/(ipam|podnet)\/[a-z-]+\.js$/;

test('nothing imports an agent or the controller from outside it', async () => {
  const agents = ['src/node-agent', 'src/egress-agent', 'src/cni-shim', 'src/controller', 'src/migrator', 'src/cni-installer', 'src/kubectl-coil'];
  for (const file of [...(await sources('src')), ...(await sources('hack'))]) {
    for (const spec of await runtimeImports(file)) {
      if (!spec.startsWith('.')) continue;
      const target = relative(root, join(root, file, '..', spec));
      const owner = agents.find((a) => target.startsWith(a));
      const tooling = (file.startsWith('hack/') && TOOLING_MAY_IMPORT.some((re) => re.test(target))) || (file.startsWith('hack/bench/') && BENCH_MAY_IMPORT.test(target));
      assert.ok(!owner || file.startsWith(owner) || tooling, `${file} imports ${target} of ${owner}`);
    }
  }
});

test('what ships stays apart from the tests: no file of src/ but a *.test.ts imports test/ (fakes and netns helpers live there)', async () => {
  for (const file of await sources('src')) {
    for (const spec of await allImports(root, file)) {
      if (!spec.startsWith('.')) continue;
      const target = relative(root, join(root, file, '..', spec));
      assert.ok(!target.startsWith('test/'), `${file} imports ${target}`);
    }
  }
  // And nothing under src/ is a fake or a test helper by name.
  for (const file of await sources('src')) assert.doesNotMatch(file, /\.fake\.ts$|\/test-[a-z-]+\.ts$|\.bench\.ts$/, `${file} belongs under test/ or hack/bench/`);
});

/** Every import specifier of a file, type-only and dynamic ones included. */
async function allImports(base: string, file: string): Promise<string[]> {
  const text = await readFile(join(base, file), 'utf8');
  const specs: string[] = [];
  for (const m of text.matchAll(/^\s*(?:import|export)\s+[^'";]*?from\s+['"]([^'"]+)['"]/gm)) specs.push(m[1]!);
  for (const m of text.matchAll(/^\s*import\s+['"]([^'"]+)['"]/gm)) specs.push(m[1]!);
  for (const m of text.matchAll(/\bimport\(\s*['"]([^'"]+)['"]\s*\)/g)) specs.push(m[1]!);
  return specs;
}

/** The first import circle among `files` (`.ts` paths relative to `base`), or undefined. */
async function findCircle(base: string, files: readonly string[]): Promise<string[] | undefined> {
  const edges = new Map<string, string[]>();
  for (const f of files) {
    edges.set(f, (await allImports(base, f)).filter((s) => s.startsWith('.'))
      .map((s) => relative(base, join(base, f, '..', s)).replace(/\.js$/, '.ts')).filter((t) => files.includes(t)));
  }
  const state = new Map<string, 'open' | 'done'>();
  const path: string[] = [];
  const visit = (f: string): string[] | undefined => {
    if (state.get(f) === 'done') return undefined;
    if (state.get(f) === 'open') return [...path.slice(path.indexOf(f)), f];
    state.set(f, 'open');
    path.push(f);
    for (const t of edges.get(f) ?? []) {
      const c = visit(t);
      if (c) return c;
    }
    path.pop();
    state.set(f, 'done');
    return undefined;
  };
  for (const f of files) {
    const c = visit(f);
    if (c) return c;
  }
  return undefined;
}

test('src/netlink has no import circle (type-only and dynamic imports count)', async () => {
  assert.equal(await findCircle(root, await sources('src/netlink')), undefined);
  // The walk finds the circle src/netlink had before the typed path (ip-runner → netlink-agent
  // → ip-runner by types, ip-runner → rtnetlink → ip-runner), written out as files.
  const dir = await mkdtemp(join(tmpdir(), 'coil-imports-'));
  try {
    await writeFile(join(dir, 'ip-runner.ts'), "import type { AgentBatch } from './netlink-agent.js';\nimport { AGENT_REFUSAL } from './rtnetlink.js';\n");
    await writeFile(join(dir, 'netlink-agent.ts'), "import { x } from './json-line-child.js';\n");
    await writeFile(join(dir, 'json-line-child.ts'), '');
    await writeFile(join(dir, 'rtnetlink.ts'), "import type { BatchLine } from './ip-runner.js';\n");
    assert.deepEqual(await findCircle(dir, ['ip-runner.ts', 'netlink-agent.ts', 'json-line-child.ts', 'rtnetlink.ts']), ['ip-runner.ts', 'rtnetlink.ts', 'ip-runner.ts']);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test('every kind is declared once, in src/api/v2/kinds.ts: src/ and hack/ call defineKind nowhere else', async () => {
  for (const file of [...(await sources('src')), ...(await sources('hack'))]) {
    if (file === join('src', 'api', 'v2', 'kinds.ts')) continue;
    const text = await readFile(join(root, file), 'utf8');
    assert.doesNotMatch(text, /\bdefineKind\s*[<(]/, `${file} declares a kind; add it to Kinds in src/api/v2/kinds.ts`);
  }
});

/**
 * coild's rooms (src/node-agent/README.md): imports run one way, from coild's wiring at the top
 * through the gRPC services to the node's IPAM and the egress client side, and from those to pod
 * wiring, which imports no other room. IPAM and egress do not import each other.
 */
const NODE_AGENT_ROOMS: Record<string, readonly string[]> = {
  '': ['rpc', 'ipam', 'egress', 'podnet'],
  rpc: ['ipam', 'egress', 'podnet'],
  ipam: ['podnet'],
  egress: ['podnet'],
  podnet: [],
};

function nodeAgentRoom(path: string): string | undefined {
  const m = /^src\/node-agent\/(?:([a-z]+)\/)?[^/]+$/.exec(path);
  return m ? (m[1] ?? '') : undefined;
}

test('src/node-agent: imports between its rooms run one way (top → rpc → ipam, egress → podnet)', async () => {
  const files = await sources('src/node-agent');
  for (const file of files) {
    const from = nodeAgentRoom(file);
    assert.ok(from !== undefined && from in NODE_AGENT_ROOMS, `${file} is in no room of src/node-agent/README.md`);
    for (const spec of await allImports(root, file)) {
      if (!spec.startsWith('.')) continue;
      const target = relative(root, join(root, file, '..', spec));
      const to = nodeAgentRoom(target.replace(/\.js$/, '.ts'));
      if (to === undefined || to === from) continue;
      assert.ok(NODE_AGENT_ROOMS[from]!.includes(to), `${file} (room '${from || 'top'}') imports ${target} (room '${to || 'top'}') against the direction`);
    }
  }
});

/**
 * src/netlink's rooms (docs/design.md#all-kernel-io-in-one-layer): the top holds the typed
 * requests and their executor and may import every room; socket/ (the rtnetlink socket, codec and
 * uapi), iproute2/ (the fallback and test oracle) and netfilter/ (nftables, iptables, conntrack)
 * take from the top only its vocabulary — the requests, how they are applied, their errors, the
 * prefixes and the kernel objects' shapes — and netfilter/ takes iproute2/'s process runner.
 */
const NETLINK_ROOMS: Record<string, readonly string[]> = {
  '': ['socket', 'iproute2', 'netfilter'],
  socket: [],
  iproute2: [],
  netfilter: ['iproute2'],
};
const NETLINK_VOCABULARY = ['rt-request', 'apply-step', 'netlink-error', 'cidr', 'link', 'addr', 'route', 'rule'].map((n) => `src/netlink/${n}.ts`);

function netlinkRoom(path: string): string | undefined {
  const m = /^src\/netlink\/(?:([a-z0-9]+)\/)?[^/]+$/.exec(path);
  return m ? (m[1] ?? '') : undefined;
}

test('src/netlink: imports between its rooms run one way (top → socket, iproute2, netfilter; rooms take only the top\'s vocabulary)', async () => {
  for (const file of await sources('src/netlink')) {
    const from = netlinkRoom(file);
    assert.ok(from !== undefined && from in NETLINK_ROOMS, `${file} is in no room of src/netlink`);
    for (const spec of await allImports(root, file)) {
      if (!spec.startsWith('.')) continue;
      const target = relative(root, join(root, file, '..', spec)).replace(/\.js$/, '.ts');
      const to = netlinkRoom(target);
      if (to === undefined || to === from) continue;
      const ok = to === '' ? NETLINK_VOCABULARY.includes(target) : NETLINK_ROOMS[from]!.includes(to);
      assert.ok(ok, `${file} (room '${from || 'top'}') imports ${target} (room '${to || 'top'}') against the direction`);
    }
  }
});
