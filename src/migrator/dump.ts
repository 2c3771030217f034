/**
 * `coil-migrator dump`: reads Coil v1 data from etcd and prints Coil v2 manifests (reserved
 * AddressBlocks, then AddressPools: see `manifests` in convert.ts) on stdout; without `--dry-run` it first removes the v1 objects and
 * then annotates namespaces named after pools.
 *
 * Order matters: the data is read and checked once before anything in the cluster changes (so bad
 * data changes nothing), then v1 is removed, then etcd is read again for the output, because v1
 * coild may have taken a block in between, and a block missing from the output would be handed
 * out twice.
 *
 * @see docs/migration-from-coil-v1.md#its-dump,
 *   docs/migration-from-coil-v1.md#the-procedure (steps 1–3),
 *   docs/migration-from-coil-v1.md#where-it-is-stricter-than-the-original
 */
import type { Client } from '../runtime/client.js';
import { annotateNamespaces, checkCluster, listNodeNames, uninstallV1 } from './cluster.js';
import type { DumpConfig } from './config.js';
import { convertV1, manifests, type Conversion } from './convert.js';
import { readV1Entries } from './etcd-source.js';
import { parseV1Entries } from './v1-model.js';
import { toYamlDocuments, type YamlValue } from '../runtime/yaml-out.js';

/** Where `dump` writes: manifests to `out`, progress and problems to `log` (one line each). */
export interface DumpIo {
  readonly client: Client;
  readonly out: (text: string) => void;
  readonly log: (line: string) => void;
}

/** The data has errors; nothing was printed and (before uninstall) nothing was changed. */
export class DumpDataError extends Error {
  override readonly name = 'DumpDataError';
}

/**
 * Runs the dump.
 * @throws DumpDataError when the v1 data has errors (each already logged with its key)
 * @throws EtcdReadError when etcd is unreachable; ClusterStepError or ApiError from the cluster steps
 */
export async function runDump(cfg: DumpConfig, io: DumpIo): Promise<Conversion> {
  await checkCluster(io.client);
  let conversion = await readAndConvert(cfg, io);
  if (!cfg.dryRun && !cfg.skipUninstall) {
    await uninstallV1({ client: io.client, log: io.log });
    conversion = await readAndConvert(cfg, io);
  }
  if (!cfg.dryRun) {
    await annotateNamespaces({ client: io.client, log: io.log }, conversion.namespacePools);
  } else {
    for (const ns of conversion.namespacePools) io.log(`dry run: would annotate namespace ${ns} (if it exists) with coil.cybozu.com/pool=${ns}`);
  }
  io.out(toYamlDocuments(manifests(conversion) as unknown as YamlValue[]));
  io.log(`wrote ${conversion.blocks.length} reserved AddressBlocks and ${conversion.pools.length} AddressPools`);
  return conversion;
}

/** One consistent read of etcd and the Node list, converted; problems are logged. */
async function readAndConvert(cfg: DumpConfig, io: DumpIo): Promise<Conversion> {
  const entries = await readV1Entries(cfg.etcd);
  if (entries.length === 0) io.log(`warning: no key under ${cfg.etcd.prefix} (wrong --etcd-prefix?)`);
  const data = parseV1Entries(entries);
  const conversion = convertV1(data, await listNodeNames(io.client));
  for (const p of conversion.problems) io.log(`${p.severity}: ${p.subject}: ${p.message}`);
  const legacy = data.addresses.filter((a) => a.legacy).length;
  io.log(`read ${data.pools.size} pools, ${data.blocks.length} block keys, ${data.addresses.length} addresses (${legacy} in the legacy ns/pod format)`);
  const errors = conversion.problems.filter((p) => p.severity === 'error').length;
  if (errors > 0) throw new DumpDataError(`${errors} error(s) in the v1 data (listed above); no manifest written`);
  return conversion;
}
