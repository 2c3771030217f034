/**
 * How every hack/bench script reads its command line: a flag table (src/runtime/flag-table.ts,
 * Go's flag semantics, as coil's programs) parsed from process.argv by the programs' own
 * parseOrExit (`--help` prints the usage; a bad flag exits 2 with the table's message), and a
 * failure of the benchmark itself printed with its stack and exit status 1.
 */
import type { FlagSpecs, FlagTable, FlagValues } from '../../src/runtime/flag-table.js';
import { ConfigError } from '../../src/runtime/flags.js';
import { parseOrExit } from '../../src/runtime/program.js';

/**
 * Parses `argv` (default: process.argv without node and script) with `flags`, then runs `main`.
 * Exits 0 after `--help`, 2 on a bad flag (also one `main` finds, as a {@link ConfigError}: a
 * list flag's item), 1 when `main` throws anything else; returns when `main` resolves.
 */
export async function runBench<T extends FlagSpecs>(flags: FlagTable<T>, main: (values: FlagValues<T>) => Promise<void>, argv: readonly string[] = process.argv.slice(2)): Promise<void> {
  const values = parseOrExit(flags.command, () => flags.parse(argv), flags.usage());
  try {
    await main(values);
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`${flags.command}: ${err.message}\n`);
      process.exit(2);
    }
    process.stderr.write(`${err instanceof Error ? err.stack ?? err.message : String(err)}\n`);
    process.exit(1);
  }
}
