/**
 * The netlink agent: a long-lived Bun process that applies coild's typed rtnetlink requests
 * (rt-request.ts) when coild runs on Node, which cannot open netlink sockets. It runs on the Bun
 * runtime embedded in the `coil` executable (`BUN_BE_BUN=1 coil netlink-agent.js`), so the image
 * ships no second runtime. coild on Bun needs no agent: it applies the same requests in-process
 * (rtnetlink-inprocess.ts).
 *
 * Protocol (NetlinkAgent in netlink-agent.ts is the other side): one JSON request per line on
 * stdin, `{id, batches: [{netns?, requests, force}, …]}` or `{id, dumps: [{netns?, dump}, …]}`,
 * one reply per line on stdout, `{id, results: [{stderr, exitCode, failures}, …]}` (rtnetlink-
 * socket.ts's applyBatches) or `{id, dumps: [{entries} | {failure, exitCode}, …]}` (readDumps).
 * Exits when stdin closes.
 */
import { ptr } from 'bun:ffi';
import { requireLibc } from '../../runtime/bun-libc.js';
import type { RtBatch, RtDumpCall } from '../rt-request.js';
import { applyBatches, readDumps } from './rtnetlink-socket.js';

// The `coil` executable starts JavaScriptCore with its tier-up thresholds raised 100× (its
// one-shot runs interpret rather than compile; hack/build-cni.sh), and this agent runs inside it.
// A long-lived agent wants normal tiering: without it, a hot loop here ran ≈ 2.8× slower after
// warm-up (Bun 1.4.5, 2026-11-22).
(globalThis as { Bun?: { unsafe?: { setJITPolicy?: (scale: number) => void } } }).Bun?.unsafe?.setJITPolicy?.(1);

const { calls: libc, errno } = requireLibc(['read', 'write']);

/** Answers one request line. */
function serve(line: string): string {
  let req: { id: number; batches?: RtBatch[]; dumps?: RtDumpCall[] };
  try {
    req = JSON.parse(line) as { id: number; batches?: RtBatch[]; dumps?: RtDumpCall[] };
  } catch {
    process.stderr.write('netlink-agent: unparsable request line\n');
    return '';
  }
  let reply: { id: number; results?: unknown[]; dumps?: unknown[] };
  try {
    reply = req.dumps !== undefined ? { id: req.id, dumps: readDumps(req.dumps) } : { id: req.id, results: applyBatches(req.batches ?? []) };
  } catch (err) { // a request of the wrong shape
    reply = { id: req.id, results: [{ stderr: `netlink-agent: ${err instanceof Error ? err.message : String(err)}\n`, exitCode: 1 }] };
  }
  return `${JSON.stringify(reply)}\n`;
}

function writeAll(fd: number, data: Uint8Array): void {
  for (let off = 0; off < data.length;) {
    const n = Number(libc.write(fd, ptr(data.subarray(off)), data.length - off));
    if (n >= 0) off += n;
    else if (errno() !== 4) process.exit(0); // EINTR aside, coild is gone
  }
}

// Blocking reads and writes on the pipes rather than readline and process.stdout: the agent has
// nothing else to do between requests, and skipping Bun's event loop saves ≈ 0.05–0.1 ms of each
// round trip (a JSON echo over the same pipes: p50 0.24–0.29 → 0.16–0.20 ms).
let pending = Buffer.alloc(0);
const chunk = Buffer.allocUnsafe(65536);
for (;;) {
  const n = Number(libc.read(0, ptr(chunk), chunk.length));
  if (n === 0) process.exit(0); // stdin closed: coild stopped the agent or is gone
  if (n < 0) {
    if (errno() === 4) continue; // EINTR
    process.exit(0);
  }
  pending = pending.length === 0 ? Buffer.from(chunk.subarray(0, n)) : Buffer.concat([pending, chunk.subarray(0, n)]);
  let nl: number;
  while ((nl = pending.indexOf(10)) >= 0) {
    const out = serve(pending.toString('utf8', 0, nl));
    pending = pending.subarray(nl + 1);
    if (out !== '') writeAll(1, Buffer.from(out));
  }
}
