/**
 * The commands of `kubectl-coil` (main.ts), the kubectl plugin of coil (`kubectl coil …` once it is on PATH):
 *
 *   kubectl coil ipam show [--show-blocks] [--ip ADDR]
 *   kubectl coil ipam check [-o json] [--stuck-deleting 5m] [--blockrequest-wait 1m] [--pool-usage 90]
 *   kubectl coil ipam release --from-report FILE [--from-report FILE…] [--dry-run]
 *   kubectl coil version [--client]
 *
 * Exit status: 0 done (check: nothing found; release: every releasable finding released),
 * 1 an error (the API server unreachable, a report refused), 2 a bad flag or command,
 * 3 check found something / release skipped or failed something.
 * README, "Operate", has examples and what release does per finding kind.
 */
import { readFile } from 'node:fs/promises';
import type { KubeConfig } from '@kubernetes/client-node';
import { DEFAULT_THRESHOLDS } from '../ipam/ipam-check.js';
import { ApiTransport } from '../runtime/api-transport.js';
import { Client } from '../runtime/client.js';
import { HelpRequested } from '../runtime/flag-table.js';
import { ApiError } from '../runtime/errors.js';
import { ConfigError } from '../runtime/flags.js';
import { EXIT_USAGE, loadKubeConfig } from '../runtime/program.js';
import { clusterId, readCluster, readViews } from './cluster.js';
import { clientLine, formatPrograms, formatVersions, readVersions } from './cluster-versions.js';
import { CHECK_FLAGS, RELEASE_FLAGS, SHOW_FLAGS, splitCommand, USAGE, VERSION_FLAGS } from './flags.js';
import { buildReport, formatReport } from './ipam-check.js';
import { formatSteps, RELEASABLE, releaseFindings } from './ipam-release.js';
import { formatShow, ipLine } from './ipam-show.js';
import { formatObject, isStructured } from './output.js';
import { checkSameCluster, intersectFindings, parseReport, ReportError } from './report.js';
import { KUBECTL_COIL_VERSION } from './version.js';

/** Exit status when check finds something or release leaves something undone. */
export const EXIT_FOUND = 3;

/** Where a command writes; a test passes its own. */
export interface Io {
  readonly out: (text: string) => void;
  readonly err: (text: string) => void;
  readonly env: NodeJS.ProcessEnv;
  readonly nowMs: () => number;
}

const processIo: Io = {
  out: (t) => void process.stdout.write(t),
  err: (t) => void process.stderr.write(t),
  env: process.env,
  nowMs: () => Date.now(),
};

/** @throws ConfigError when `--context` names no context of the kubeconfig */
function kubeConfig(v: { kubeconfig?: string | undefined; context?: string | undefined }, env: NodeJS.ProcessEnv): KubeConfig {
  const path = v.kubeconfig ?? (env.KUBECONFIG || undefined);
  let kc: KubeConfig;
  try {
    kc = loadKubeConfig(path, env);
  } catch (e) {
    throw new ConfigError(`--kubeconfig: cannot load ${path ?? 'the default kubeconfig'}: ${(e as Error).message}`, { cause: e });
  }
  if (v.context !== undefined) {
    if (!kc.getContexts().some((c) => c.name === v.context)) throw new ConfigError(`--context: no context ${JSON.stringify(v.context)} in the kubeconfig`);
    kc.setCurrentContext(v.context);
  }
  return kc;
}

function clients(kc: KubeConfig): { client: Client; transport: ApiTransport; server: string } {
  const transport = new ApiTransport(kc);
  return { client: new Client(transport, 'kubectl-coil'), transport, server: kc.getCurrentCluster()?.server ?? '' };
}

/**
 * Runs one command line (without `kubectl-coil` itself).
 * @returns the exit status
 */
export async function run(argv: readonly string[], io: Io = processIo): Promise<number> {
  try {
    const { command, rest } = splitCommand(argv);
    switch (command) {
      case 'help':
        if (rest.length > 0 && !['-h', '--help', '-help'].includes(rest[0]!)) throw new ConfigError(`unexpected argument ${JSON.stringify(rest[0])}`);
        io.out(USAGE);
        return argv.length === 0 ? EXIT_USAGE : 0;
      case 'version': {
        const v = VERSION_FLAGS.parse(rest);
        const structured = isStructured(v.output) ? v.output : undefined;
        // kubectl's order: the client's version first, even when the cluster cannot be read.
        if (!structured) io.out(clientLine());
        if (v.client) {
          if (structured) io.out(formatVersions(undefined, structured));
          return 0;
        }
        const programs = await readVersions(clients(kubeConfig(v, io.env)).client, v.namespace);
        io.out(structured ? formatVersions(programs, structured) : formatPrograms(programs));
        return 0;
      }
      case 'ipam show': {
        const v = SHOW_FLAGS.parse(rest);
        const { client, transport, server } = clients(kubeConfig(v, io.env));
        const o = { namespace: v.namespace, coildPort: v['coild-port'], server };
        let read = await readCluster(client, transport, { ...o, views: v['show-blocks'] });
        // One address: only the coild of the node whose block holds it.
        const node = v.ip !== undefined && !v['show-blocks'] ? ipLine(read, v.ip).node : undefined;
        if (node) read = { ...read, ...(await readViews(transport, read.pods, [node], o)) };
        io.out(formatShow(read, { output: v.output, showBlocks: v['show-blocks'], ip: v.ip }));
        return 0;
      }
      case 'ipam check': {
        const v = CHECK_FLAGS.parse(rest);
        const { client, transport, server } = clients(kubeConfig(v, io.env));
        const read = await readCluster(client, transport, { namespace: v.namespace, coildPort: v['coild-port'], views: true, server });
        const thresholds = { ...DEFAULT_THRESHOLDS, stuckDeletingMs: v['stuck-deleting'], blockRequestWaitMs: v['blockrequest-wait'], poolUsagePercent: v['pool-usage'] };
        const report = buildReport(read, thresholds, io.nowMs());
        io.out(formatReport(report, v.output));
        if (isStructured(v.output)) for (const u of report.coildUnreachable) io.err(`warning: coild of node ${u.node} not read (its leaks are unknown): ${u.reason}\n`);
        return report.findings.length > 0 ? EXIT_FOUND : 0;
      }
      case 'ipam release': {
        const v = RELEASE_FLAGS.parse(rest);
        if (v['from-report'].length === 0) throw new ConfigError('--from-report: at least one report is needed (kubectl coil ipam check -o json > FILE)');
        const reports = await Promise.all(v['from-report'].map(async (file) => {
          let text: string;
          try {
            text = await readFile(file, 'utf8');
          } catch (e) {
            throw new ReportError(`${file}: ${(e as Error).message}`, { cause: e });
          }
          return { file, report: parseReport(file, text) };
        }));
        const { client, transport, server } = clients(kubeConfig(v, io.env));
        checkSameCluster(reports, (await clusterId(client, server)).uid);
        for (const { file, report } of reports) {
          if (report.version !== KUBECTL_COIL_VERSION) io.err(`warning: ${file} was written by kubectl-coil ${report.version}, this is ${KUBECTL_COIL_VERSION}\n`);
        }
        const findings = intersectFindings(reports.map((r) => r.report));
        const steps = await releaseFindings(findings, { client, dryRun: v['dry-run'] });
        io.out(isStructured(v.output) ? formatObject({ dryRun: v['dry-run'], steps }, v.output) : formatSteps(steps));
        const undone = steps.some((s) => RELEASABLE.has(s.kind) && (s.outcome === 'skipped' || s.outcome === 'failed'));
        return undone ? EXIT_FOUND : 0;
      }
    }
  } catch (e) {
    if (e instanceof HelpRequested) {
      io.out(e.usage);
      return 0;
    }
    if (e instanceof ConfigError) {
      io.err(`kubectl coil: ${e.message}\n`);
      return EXIT_USAGE;
    }
    if (e instanceof ReportError || e instanceof ApiError) {
      io.err(`kubectl coil: ${e instanceof ApiError && e.code === 0 ? `cannot reach the API server: ${e.message}` : e.message}\n`);
      return 1;
    }
    throw e;
  }
}

