/**
 * coil-install-cni: the coild DaemonSet's init container. Reads its settings from the
 * environment (Coil's coil-installer names) and installs the CNI executable and conflist.
 *
 *   CNI_BIN_DIR      default /host/opt/cni/bin
 *   CNI_ETC_DIR      default /host/etc/cni/net.d
 *   CNI_CONF_NAME    default 10-coil.conflist
 *   COIL_PATH        default /usr/local/coil/coil
 *   CNI_NETCONF      conflist JSON (takes priority), or CNI_NETCONF_FILE: a path to it
 */
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { install, InstallError } from './install.js';

async function main(env: NodeJS.ProcessEnv): Promise<number> {
  try {
    const netconf = env.CNI_NETCONF || (env.CNI_NETCONF_FILE ? await readFile(env.CNI_NETCONF_FILE, 'utf8') : '');
    if (!netconf) throw new InstallError('set CNI_NETCONF or CNI_NETCONF_FILE');
    const options = {
      binDir: env.CNI_BIN_DIR || '/host/opt/cni/bin',
      confDir: env.CNI_ETC_DIR || '/host/etc/cni/net.d',
      confName: env.CNI_CONF_NAME || '10-coil.conflist',
      coilPath: env.COIL_PATH || '/usr/local/coil/coil',
      netconf,
    };
    await install(options);
    console.log(`installed ${options.binDir}/coil and ${options.confDir}/${options.confName}`);
    return 0;
  } catch (err) {
    console.error(`coil-install-cni: ${err instanceof Error ? err.message : String(err)}`);
    return 1;
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) process.exitCode = await main(process.env);
