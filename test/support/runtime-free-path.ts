/**
 * A PATH with no JavaScript runtime on it, for running `kubectl-coil` as on an admin's machine
 * that has none: a directory of links to every command of /usr/bin and /bin except `node`,
 * `nodejs`, `bun`, `bunx`, `deno` and the npm tools (this machine has Debian's Node 20 in /usr/bin).
 */
import { mkdir, readdir, symlink } from 'node:fs/promises';
import { join } from 'node:path';

/** The names kept off the PATH. */
export const RUNTIMES = ['node', 'nodejs', 'bun', 'bunx', 'deno', 'npm', 'npx', 'corepack'];

/**
 * Fills `dir` with the links; checks that none of {@link RUNTIMES} is among them.
 * @returns `dir`, to use as PATH
 * @throws Error when a runtime ended up on it
 */
export async function runtimeFreePath(dir: string): Promise<string> {
  await mkdir(dir, { recursive: true });
  const linked = new Set<string>();
  for (const from of ['/usr/bin', '/bin']) {
    for (const name of await readdir(from)) {
      if (RUNTIMES.includes(name) || linked.has(name)) continue;
      linked.add(name);
      await symlink(join(from, name), join(dir, name));
    }
  }
  const found = (await readdir(dir)).filter((n) => RUNTIMES.includes(n));
  if (found.length > 0) throw new Error(`${found.join(', ')} on the runtime-free PATH`);
  return dir;
}
