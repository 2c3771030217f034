/**
 * Bundles each Node program of the image (coil-controller, coil-install-cni, coil-migrator) with
 * esbuild into `<out>/dist/src/<program>/main.js`, so the image ships no node_modules: only the
 * code the programs import, once, in shared chunks. coild and coil-egress are not here: the image
 * runs them on Bun from the bundles hack/build-cni.sh makes (hack/image/entrypoint.sh).
 *
 *   node dist/hack/image/bundle.js OUT_DIR      (after `npm run build`; hack/build-image.sh runs it)
 *
 * Every file keeps the depth it has in dist/ (entries at dist/src/<program>/, shared code at
 * dist/src/chunks/), because our modules find their neighbours relative to their own URL:
 * `../../../proto/` (etcd3's protos, see BANNER).
 *
 * Identifiers are not minified: a stack trace in a production log must name real functions.
 */
import { build, type Plugin } from 'esbuild';
import { cp, readFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { BUNDLE, bundleKubectlCoil } from '../kubectl-coil/build.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));

/** The entry points, as paths under dist/src. */
export const ENTRIES = [
  'controller/main.js',
  'cni-installer/main.js',
  'migrator/main.js',
] as const;

/**
 * etcd3 (coil-migrator reads Coil v1's etcd) loads its .proto files from `${__dirname}/../proto`;
 * in a bundle __dirname means nothing, so the path is rewritten to the copy the image carries at
 * /opt/coil/proto/etcd3, found through the banner's `__coilProtoDir` (see BANNER).
 */
const etcd3Protos: Plugin = {
  name: 'etcd3-protos',
  setup(b) {
    b.onLoad({ filter: /[\\/]etcd3[\\/]lib[\\/]connection-pool\.js$/ }, async (args) => {
      const text = await readFile(args.path, 'utf8');
      const from = '`${__dirname}/../proto/rpc.proto`';
      if (!text.includes(from)) throw new Error(`etcd3 changed how it finds rpc.proto (${args.path}): update hack/image/bundle.ts`);
      // Not import.meta here: esbuild would take this CommonJS file for an ES module.
      return { contents: text.replace(from, '`${__coilProtoDir}etcd3/rpc.proto`'), loader: 'js' };
    });
  },
};

/**
 * Heads every output file. CommonJS dependencies call require() for Node builtins, and an ES
 * module has no require; `__coilProtoDir` is /opt/coil/proto/ seen from any file at dist/src/X/.
 */
const BANNER = [
  "import { createRequire as __coilCreateRequire } from 'node:module';",
  'const require = __coilCreateRequire(import.meta.url);',
  "const __coilProtoDir = new URL('../../../proto/', import.meta.url).pathname;",
].join(' ');

/**
 * grpc-js loads these .proto files beside itself only when channelz or ORCA load reporting is
 * turned on, which no coil program does; the calls stay in the bundle and would throw if reached.
 */
const LAZY_PROTO_LOADS = ['"channelz.proto"', 'orca.proto"'];

/**
 * @throws Error when the bundle `file` refers to __dirname/__filename unguarded (a bundled
 *   dependency that finds files beside itself, which would break at run time)
 */
async function checkNoDirname(file: string): Promise<void> {
  const text = await readFile(file, 'utf8');
  for (const found of text.matchAll(/\b__(dirname|filename)\b/g)) {
    const before = text.slice(Math.max(0, found.index - 300), found.index);
    // `typeof __filename < "u" ? __filename : undefined` (undici) guards itself.
    if (before.slice(-40).includes(`typeof ${found[0]}`) || before.endsWith('typeof ')) continue;
    if (!LAZY_PROTO_LOADS.some((name) => before.includes(name))) {
      throw new Error(`${file} refers to ${found[0]}: a bundled dependency looks for files beside itself (${text.slice(found.index - 120, found.index + 40)})`);
    }
  }
}

/**
 * Bundles into `out` and copies what the bundles load at run time (proto/, etcd3's protos), and
 * writes `kubectl-coil.js` beside them: the admin's plugin as one ES module for the Bun runtime
 * inside `coil` (hack/kubectl-coil/build.ts; hack/image/entrypoint.sh runs it, or compiles it into
 * a self-contained executable).
 * @throws Error when a bundle still refers to __dirname/__filename (a dependency that finds files
 *   next to itself, which would break at run time) or esbuild fails.
 */
export async function bundle(out: string): Promise<void> {
  const result = await build({
    absWorkingDir: ROOT,
    entryPoints: ENTRIES.map((e) => `dist/src/${e}`),
    outbase: 'dist/src',
    outdir: join(out, 'dist/src'),
    chunkNames: 'chunks/[name]-[hash]',
    bundle: true,
    splitting: true,
    platform: 'node',
    format: 'esm',
    target: 'node24',
    minifyWhitespace: true,
    minifySyntax: true,
    legalComments: 'none',
    // bunyan's optional DTrace probes are a native addon; bunyan runs without them. `bun:ffi` is
    // Bun's own module: coild imports the rtnetlink socket that needs it only when it runs on Bun
    // (a dynamic import, so it lands in a chunk of its own that Node never loads).
    external: ['dtrace-provider', 'bun:*'],
    banner: { js: BANNER },
    plugins: [etcd3Protos],
    logLevel: 'warning',
    metafile: true,
  });
  for (const file of Object.keys(result.metafile.outputs)) await checkNoDirname(join(ROOT, file));
  await bundleKubectlCoil(join(out, BUNDLE));
  await cp(join(ROOT, 'proto'), join(out, 'proto'), { recursive: true });
  const etcdProtos = join(ROOT, 'node_modules/etcd3/proto');
  for (const f of await readdir(etcdProtos)) await cp(join(etcdProtos, f), join(out, 'proto/etcd3', f));
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const [flag] = process.argv.slice(2);
  if (flag && !flag.startsWith('-')) {
    await bundle(flag);
  } else {
    console.error('usage: bundle.js OUT_DIR');
    process.exit(2);
  }
}
