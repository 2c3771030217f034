/**
 * The runtime `kubectl-coil` needs when it is not the self-contained executable (which carries its
 * own Bun): run from this repository as `node dist/src/kubectl-coil/main.js`, it needs Node ≥ 24
 * (package.json `engines`; README, "Development"). Older Node fails inside a library at load (Node 20:
 * undici's zstd support), so main.ts asks this first and says what is needed instead.
 */

/** The oldest Node major the tool runs on. */
export const MIN_NODE_MAJOR = 24;

/**
 * @param versions `process.versions`
 * @returns why this runtime cannot run the tool, or undefined when it can
 */
export function runtimeProblem(versions: { readonly node?: string; readonly bun?: string }): string | undefined {
  if (versions.bun !== undefined) return undefined;
  const major = Number((versions.node ?? '').split('.')[0]);
  if (Number.isInteger(major) && major >= MIN_NODE_MAJOR) return undefined;
  return `this is Node ${versions.node ?? '(unknown)'}; kubectl-coil needs Node ≥ ${MIN_NODE_MAJOR}, or no runtime at all as the self-contained executable (npm run build:kubectl-coil; README, "Operate")`;
}
