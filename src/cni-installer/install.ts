/**
 * Installs the `coil` CNI executable and its conflist on a node (the coild DaemonSet's init
 * step). Both are written to a temporary file in the target directory and renamed into place,
 * so kubelet and the container runtime never see a half-written file.
 *
 * Unlike Coil's installer, which deletes every file in the conf dir whose name contains
 * "conflist" (docs/compatibility.md#an-installer-that-deletes-every-conflist), this touches nothing
 * but its two targets: another CNI's configuration survives, and the runtime picks the lexically
 * first conflist.
 */
import { execFile } from 'node:child_process';
import { chmod, copyFile, mkdir, open, rename, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** What to install where. */
export interface InstallOptions {
  /** Directory of CNI executables on the host, e.g. `/host/opt/cni/bin`. */
  readonly binDir: string;
  /** Directory of CNI configurations on the host, e.g. `/host/etc/cni/net.d`. */
  readonly confDir: string;
  /** File name of the conflist, e.g. `10-coil.conflist`. */
  readonly confName: string;
  /** Path of the `coil` executable to copy. */
  readonly coilPath: string;
  /** The conflist text (JSON). */
  readonly netconf: string;
}

/** Invalid installer input; the message names what is wrong. */
export class InstallError extends Error {
  override readonly name = 'InstallError';
}

/**
 * Checks that `text` is a conflist whose plugins include `coil` (CNI spec, "Network
 * configuration lists").
 * @throws InstallError naming the problem.
 */
export function validateConflist(text: string): void {
  let conf: unknown;
  try {
    conf = JSON.parse(text);
  } catch (err) {
    throw new InstallError(`CNI_NETCONF is not JSON: ${(err as Error).message}`);
  }
  const c = conf as { cniVersion?: unknown; name?: unknown; plugins?: unknown };
  if (typeof c.cniVersion !== 'string') throw new InstallError('CNI_NETCONF: cniVersion must be a string');
  if (typeof c.name !== 'string' || c.name === '') throw new InstallError('CNI_NETCONF: name must be a non-empty string');
  if (!Array.isArray(c.plugins) || c.plugins.length === 0) throw new InstallError('CNI_NETCONF: plugins must be a non-empty list');
  if (!c.plugins.some((p: { type?: unknown }) => p?.type === 'coil')) throw new InstallError('CNI_NETCONF: no plugin of type "coil"');
}

/**
 * Drops `path`'s pages from the page cache (clean after an fsync): GNU dd's documented idiom, which
 * calls posix_fadvise(POSIX_FADV_DONTNEED) on the whole file (Node has no binding for it).
 *
 * Why: pages are charged to the memory cgroup of whoever brings them in, and stay charged after
 * it exits (cgroup v1 moves them to the parent, the pod). Written by this init container, every
 * page of the `coil` executable (≈ 110 MB) was charged to coild's pod, and the pages the runtime's
 * CNI calls then touch became active there: coild's pod working set rose from 32 to 66 MB over
 * 1,000 ADD + 1,000 DEL, with coild's own container at 36 MB (docs/performance.md#footprint).
 * Dropped, they are read back by the first CNI call and charged to the runtime that runs it, as
 * any other CNI plugin's are.
 * @throws Error when dd fails (a missing dd, an I/O error): the install fails rather than hide it
 */
async function dropPageCache(path: string): Promise<void> {
  await run('dd', ['if=/dev/null', `of=${path}`, 'oflag=nocache', 'conv=notrunc,fdatasync', 'count=0', 'status=none']);
}

/** Writes `data` to `dir/name` through a temporary file, fsync and rename; sets `mode`. */
async function writeAtomic(dir: string, name: string, write: (tmp: string) => Promise<void>, mode: number, options: { dropCache?: boolean } = {}): Promise<void> {
  const tmp = join(dir, `.${name}.coil-install-${process.pid}`);
  try {
    await write(tmp);
    await chmod(tmp, mode);
    const fh = await open(tmp, 'r');
    await fh.sync();
    await fh.close();
    if (options.dropCache) await dropPageCache(tmp);
    await rename(tmp, join(dir, name));
  } catch (err) {
    await rm(tmp, { force: true });
    throw err;
  }
}

/**
 * Installs the executable as `binDir/coil` (mode 0755) and the conflist as `confDir/confName`
 * (mode 0644), creating the directories if needed.
 * @throws InstallError for an invalid conflist; filesystem errors as they come.
 */
export async function install(options: InstallOptions): Promise<void> {
  validateConflist(options.netconf);
  if (!/^[A-Za-z0-9._-]+\.conflist$/.test(options.confName)) {
    throw new InstallError(`CNI_CONF_NAME must be a file name ending in .conflist: ${options.confName}`);
  }
  await mkdir(options.binDir, { recursive: true });
  await mkdir(options.confDir, { recursive: true });
  await writeAtomic(options.binDir, 'coil', (tmp) => copyFile(options.coilPath, tmp), 0o755, { dropCache: true });
  await writeAtomic(options.confDir, options.confName, async (tmp) => {
    const fh = await open(tmp, 'w');
    await fh.writeFile(options.netconf.endsWith('\n') ? options.netconf : `${options.netconf}\n`);
    await fh.close();
  }, 0o644);
}
