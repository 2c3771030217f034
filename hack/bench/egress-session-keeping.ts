/**
 * Benchmark (not a test): the session-keeping prototype — a TCP stream through a NAT pod that is
 * lost, with the NAT pods masquerading (Coil's NAT) and SNATing to a shared address — in the
 * stock-kernel VM:
 *   flock /tmp/coil-heavy.lock hack/fou-vm.sh -- node dist/hack/bench/egress-session-keeping.js [--modes masquerade,shared,collision,two-active,option] [--runs 5] [--collision-runs 2] [--detect-ms 400]
 * The scenario lives in test/netns/egress-session-keeping-bench.ts (it drives coil-egress's and
 * coild's parts, which hack/ may not import); its header says what is measured and how.
 * Results: docs/egress-failover.md#sessions-across-the-loss-of-a-nat-pod.
 */
import { loadavg } from 'node:os';
import { defineFlags } from '../../src/runtime/flag-table.js';
import { SESSION_MODES, runSessionKeeping, type SessionMode, type SessionRow } from '../../test/netns/egress-session-keeping-bench.js';
import { runBench } from './bench-flags.js';

const FLAGS = defineFlags('egress-session-keeping', {
  modes: { kind: 'string', default: SESSION_MODES.join(','), help: `comma-separated, of ${SESSION_MODES.join(', ')}` },
  runs: { kind: 'int', default: 5, min: 1, max: 100, help: 'runs of masquerade, shared and option' },
  'collision-runs': { kind: 'int', default: 2, min: 1, max: 100, help: 'runs of collision and two-active' },
  'detect-ms': { kind: 'int', default: 400, min: 0, max: 60_000, help: "ms from the loss to the tunnel's and the shared address's move (coild's detection; not option, where coild's probe detects)" },
  'window-ms': { kind: 'int', default: 4_000, min: 1_000, max: 60_000, help: 'ms the streams run after the loss' },
  verbose: { kind: 'bool', default: false, help: 'log each run' },
});

const pct = (xs: number[], p: number): string => {
  if (xs.length === 0) return '-';
  const s = [...xs].sort((a, b) => a - b);
  return String(s[Math.min(s.length - 1, Math.floor((s.length - 1) * p))]);
};

function print(rows: readonly SessionRow[]): void {
  console.log('| mode | run | moved (ms) | stream | fate | stall (ms) | sent / echoed / bad bytes | target saw |');
  console.log('|---|---:|---:|---|---|---:|---|---|');
  for (const r of rows) {
    for (const s of r.streams) console.log(`| ${r.mode} | ${r.run + 1} | ${r.moveMs}${r.routeMs !== undefined ? ` (S re-routed +${r.routeMs})` : ''} | ${s.client} | ${s.fate} | ${s.stallMs ?? '-'} | ${s.sent} / ${s.echoed} / ${s.bad} | ${s.seenAs.join(', ')} |`);
  }
  console.log('');
  console.log('| mode | runs | streams kept | stall p50 / max (ms) | bytes lost or duplicated (kept streams) |');
  console.log('|---|---:|---:|---|---:|');
  for (const mode of new Set(rows.map((r) => r.mode))) {
    const rs = rows.filter((r) => r.mode === mode);
    const all = rs.flatMap((r) => r.streams);
    const kept = all.filter((s) => s.kept);
    const stalls = kept.map((s) => s.stallMs!).filter((x) => x !== undefined);
    console.log(`| ${mode} | ${rs.length} | ${kept.length} of ${all.length} | ${pct(stalls, 0.5)} / ${pct(stalls, 1)} | ${kept.reduce((a, s) => a + s.bad + (s.sent - s.echoed), 0)} |`);
  }
}

await runBench(FLAGS, async (v) => {
  const modes = v.modes.split(',').map((m) => m.trim()).filter(Boolean);
  const unknown = modes.filter((m) => !(SESSION_MODES as readonly string[]).includes(m));
  if (unknown.length > 0 || modes.length === 0) throw new Error(`--modes: unknown ${unknown.join(', ') || '(none given)'}; of ${SESSION_MODES.join(', ')}`);
  const started = Date.now();
  const rows = await runSessionKeeping({
    modes: modes as SessionMode[], runs: v.runs, collisionRuns: v['collision-runs'], detectMs: v['detect-ms'], windowMs: v['window-ms'],
    log: (s) => { if (v.verbose) console.error(`[${((Date.now() - started) / 1000).toFixed(1)} s] ${s}`); },
  });
  print(rows);
  console.log(`load average ${loadavg().map((l) => l.toFixed(2)).join(' ')}, wall ${((Date.now() - started) / 1000).toFixed(1)} s`);
  process.exit(0);
});
