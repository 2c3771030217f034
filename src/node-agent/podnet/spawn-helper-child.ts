/**
 * The child side of {@link SpawnHelper} (spawn-helper.ts): a bare Node process, with nothing
 * loaded but node:child_process, that starts processes for coild. Protocol: one JSON object per
 * line on stdin `{id, argv, input, timeoutMs}`, one per line on stdout `{id, stdout, stderr,
 * exitCode, signal, spawnError?}`. Exits when stdin closes (coild gone).
 *
 * It kills its processes still running (SIGKILL) before it exits. A process that outlived a
 * crashed coild would go on changing the host behind the next coild's back: an `ip -batch` that
 * creates a pod's veth after the restart's recovery has listed the host leaves a veth no
 * allocation knows (docs/node-state.md). Killed, it leaves at most a half-wired veth, which the
 * recovery deletes.
 */
import { createInterface } from 'node:readline';
import { spawnProcess } from '../../netlink/iproute2/ip-runner.js';

interface Request { id: number; argv: string[]; input: string; timeoutMs: number }

const coildGone = new AbortController();
const lines = createInterface({ input: process.stdin });
lines.on('line', (line) => {
  const req = JSON.parse(line) as Request;
  void spawnProcess(req.argv, req.input, req.timeoutMs, coildGone.signal).then((r) => {
    const spawnError = r.spawnError ? { message: r.spawnError.message, code: r.spawnError.code } : undefined;
    process.stdout.write(`${JSON.stringify({ id: req.id, stdout: r.stdout, stderr: r.stderr, exitCode: r.exitCode, signal: r.signal ?? null, ...(spawnError && { spawnError }) })}\n`);
  });
});
lines.on('close', () => {
  coildGone.abort(); // kill(2) is sent to each process before this one exits
  process.exit(0);
});
