/**
 * The child side of {@link SpawnHelper} (spawn-helper.ts): a bare Node process, with nothing
 * loaded but node:child_process, that starts processes for coild. Protocol: one JSON object per
 * line on stdin `{id, argv, input, timeoutMs}`, one per line on stdout `{id, stdout, stderr,
 * exitCode, signal, spawnError?}`. Exits when stdin closes (coild gone).
 */
import { createInterface } from 'node:readline';
import { spawnProcess } from '../netlink/ip-runner.js';

interface Request { id: number; argv: string[]; input: string; timeoutMs: number }

const lines = createInterface({ input: process.stdin });
lines.on('line', (line) => {
  const req = JSON.parse(line) as Request;
  void spawnProcess(req.argv, req.input, req.timeoutMs).then((r) => {
    const spawnError = r.spawnError ? { message: r.spawnError.message, code: r.spawnError.code } : undefined;
    process.stdout.write(`${JSON.stringify({ id: req.id, stdout: r.stdout, stderr: r.stderr, exitCode: r.exitCode, signal: r.signal ?? null, ...(spawnError && { spawnError }) })}\n`);
  });
});
lines.on('close', () => process.exit(0));
