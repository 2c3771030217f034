/**
 * Fixed-width text tables, as `kubectl get` prints them: one line per row, each column as wide as
 * its widest cell, the last column unpadded. Used by `kubectl coil` and `coild ipam-status`.
 */

/**
 * The rows as lines of fixed-width columns separated by `gap` spaces (kubectl's printer uses 3);
 * the first row is the header. Trailing spaces are trimmed from each line (an empty last cell).
 * @returns the lines joined by `\n`, without a final newline; `''` for no rows
 */
export function formatTable(rows: readonly (readonly string[])[], gap = 3): string {
  const widths: number[] = [];
  for (const r of rows) r.forEach((c, i) => (widths[i] = Math.max(widths[i] ?? 0, c.length)));
  const sep = ' '.repeat(gap);
  return rows.map((r) => r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]!))).join(sep).trimEnd()).join('\n');
}
