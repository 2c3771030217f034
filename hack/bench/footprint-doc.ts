/**
 * The footprint figures docs/performance.md publishes, read back from the doc itself so that a
 * guard compares a run with what is published, never with a copy (test/e2e/footprint.test.ts).
 *
 * The doc's "Published figures" table of the Footprint section has rows
 * `| <program> | <state> | <working set> MB | <RSS> MB | … |`; this reads the working set of one
 * row. Pure.
 */

/** One published row's figures, MiB. */
export interface PublishedFigure {
  readonly workingSetMb: number;
  readonly rssMb: number;
}

/**
 * Seconds of quiet between the lab's start (every node Ready) and an idle reading, in the bench
 * and in the guard alike.
 */
export const IDLE_SETTLE_S = 20;

/** How far above the published idle working set the guard lets coild go (10 %). */
export const GUARD_MARGIN = 1.1;

/** The heading of the table the figures are read from. */
export const PUBLISHED_HEADING = '### Published figures';

/**
 * The figures of row `program` / `state` of the published table in `doc` (the markdown text).
 * @throws Error when the heading, the row or its numbers are missing, or the row is there twice
 */
export function publishedFigure(doc: string, program: string, state: string): PublishedFigure {
  const at = doc.indexOf(`\n${PUBLISHED_HEADING}\n`);
  if (at < 0) throw new Error(`docs/performance.md has no "${PUBLISHED_HEADING}" heading`);
  const section = doc.slice(at + PUBLISHED_HEADING.length + 2);
  const end = section.search(/\n#{1,3} /);
  const rows = (end < 0 ? section : section.slice(0, end)).split('\n')
    .filter((l) => l.startsWith('|'))
    .map((l) => l.split('|').slice(1, -1).map((c) => c.trim().replaceAll('*', '')))
    .filter((c) => c[0] === program && c[1] === state);
  if (rows.length !== 1) throw new Error(`"${PUBLISHED_HEADING}" has ${rows.length} rows for ${program} / ${state}, not 1`);
  const mb = (cell: string | undefined, what: string): number => {
    const m = /^([\d.]+) MB$/.exec(cell ?? '');
    if (!m) throw new Error(`the ${what} of ${program} / ${state} is "${cell}", not "N MB"`);
    return Number(m[1]);
  };
  return { workingSetMb: mb(rows[0]![2], 'working set'), rssMb: mb(rows[0]![3], 'RSS') };
}
