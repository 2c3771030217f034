/**
 * The long soak on the stand-in lab (a benchmark-style run, not a test): `npm run soak -- [operations] [seed]`,
 * default 10,000 operations. Prints the report: operations, faults, violations, leaked blocks,
 * failed ADDs by fault, ADD latency. Exit 1 on a violation, a leaked block or an ADD that failed
 * outside every fault's window.
 */
import 'reflect-metadata';
import { fileURLToPath } from 'node:url';
import { StandInLab as Lab } from './lab/stand-in-lab.js';
import { soak } from './lab/soak.js';

async function main(argv: readonly string[]): Promise<number> {
  const operations = Number(argv[0] ?? 10_000);
  const seed = argv[1] === undefined ? undefined : Number(argv[1]);
  const lab = await Lab.up({
    controllers: 2,
    coildArgs: ['--cooling-period=1s', '--block-release-grace=2s', '--addressblock-gc-interval=5s', '--alloc-timeout=3s'],
    controllerArgs: ['--gc-interval=5s'],
    log: (m) => console.log(`lab: ${m}`),
  });
  try {
    const report = await soak(lab, { operations, concurrency: 4, maxPods: 40, faultRounds: Math.max(1, Math.round(operations / 2000)), ...(seed === undefined ? {} : { seed }), log: console.log });
    console.log(JSON.stringify(report, null, 2));
    const unexplained = Object.keys(report.addFailureReasons).filter((k) => k.startsWith('no fault:'));
    return report.violations.length === 0 && report.blocksLeaked === 0 && unexplained.length === 0 ? 0 : 1;
  } finally {
    await lab.stop();
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) process.exitCode = await main(process.argv.slice(2));
