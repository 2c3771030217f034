/**
 * stdin and stdout/stderr through the runtime's own API, for when libc calls are not available
 * (the Bun executable uses them: main.ts). In Bun, `Bun.stdin` / `Bun.write`: touching
 * `process.stdout` costs the executable ≈ 15 ms and importing `node:fs` ≈ 2 ms per start, and
 * `Bun.stdin` starts three threads to read a netconf
 * (docs/performance.md#the-cni-executables-start). Under Node (tests, or a Node build) the `node:`
 * APIs are used.
 */

/** The subset of Bun's API used here (no @types/bun in this project). */
interface BunStdio {
  stdin: { arrayBuffer(): Promise<ArrayBuffer> };
  stdout: unknown;
  stderr: unknown;
  write(destination: unknown, data: string): Promise<number>;
}

function bun(): BunStdio | undefined {
  return (globalThis as { Bun?: BunStdio }).Bun;
}

/** Reads all of stdin. A closed or absent stdin reads as empty (VERSION needs none). */
export async function readStdin(): Promise<Buffer> {
  try {
    const b = bun();
    if (b) return Buffer.from(await b.stdin.arrayBuffer());
    const { readFileSync } = await import('node:fs');
    return readFileSync(0);
  } catch {
    return Buffer.alloc(0);
  }
}

/**
 * Writes `text` to stdout (fd 1) or stderr (fd 2) and resolves once it is handed to the OS, so
 * the process may exit right after.
 */
export async function writeFd(fd: 1 | 2, text: string): Promise<void> {
  const b = bun();
  if (b) {
    await b.write(fd === 1 ? b.stdout : b.stderr, text);
    return;
  }
  const stream = fd === 1 ? process.stdout : process.stderr;
  await new Promise<void>((resolve) => stream.write(text, () => resolve()));
}
