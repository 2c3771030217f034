/**
 * Why the lab builds the CNI reference plugins (hack/build-cni-plugins.sh;
 * docs/real-nodes.md#container-runtimes): the chart's conflist is cniVersion 1.1.0, which libcni
 * gives every plugin of the chain. `portmap` is run here as libcni runs it after `coil` — ADD with
 * coil's result as prevResult, in a network namespace of the test's own, and STATUS — from Debian
 * bookworm's package (1.1.1) and from the build (v1.9.1).
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import { cniPluginsDir } from '../../hack/lab/cluster.js';
import { prerequisite } from '../support/prerequisite.js';

const run = promisify(execFile);
const DEBIAN = '/usr/lib/cni';
const NETNS = 'coil-t-cni-plugins';
const skip = prerequisite(process.getuid?.() !== 0 ? 'needs root (a network namespace)' : existsSync(join(DEBIAN, 'portmap')) ? undefined : `${DEBIAN}/portmap missing (Debian package containernetworking-plugins; hack/setup.sh installs it)`);

/** Runs `dir`/portmap with `command` and the chart's 1.1.0 netconf; resolves with its exit code and stdout. */
async function portmap(dir: string, command: string): Promise<{ code: number; stdout: string }> {
  const conf = JSON.stringify({
    cniVersion: '1.1.0', name: 'k8s-pod-network', type: 'portmap', capabilities: { portMappings: true },
    prevResult: { cniVersion: '1.1.0', interfaces: [{ name: 'eth0', sandbox: `/run/netns/${NETNS}` }], ips: [{ address: '10.1.0.2/32', interface: 0 }] },
  });
  const child = execFile(join(dir, 'portmap'), [], {
    env: { PATH: process.env.PATH ?? '/usr/sbin:/usr/bin', CNI_COMMAND: command, CNI_CONTAINERID: 'cni-plugins-test', CNI_NETNS: `/run/netns/${NETNS}`, CNI_IFNAME: 'eth0', CNI_PATH: dir },
  });
  let stdout = '';
  child.stdout!.on('data', (d: Buffer) => { stdout += d.toString(); });
  child.stdin!.end(conf);
  const code = await new Promise<number>((resolve) => child.on('close', (c) => resolve(c ?? -1)));
  return { code, stdout };
}

describe('the CNI reference plugins and a cniVersion 1.1.0 conflist', { skip }, () => {
  before(async () => {
    await run('ip', ['netns', 'add', NETNS]);
  });
  after(async () => {
    await run('ip', ['netns', 'del', NETNS]).catch(() => undefined);
  });

  test("Debian's portmap (1.1.1) refuses the 1.1.0 ADD and knows no STATUS", async () => {
    const add = await portmap(DEBIAN, 'ADD');
    assert.equal(add.code, 1);
    assert.match(add.stdout, /incompatible CNI versions/);
    const status = await portmap(DEBIAN, 'STATUS');
    assert.equal(status.code, 1);
    assert.match(status.stdout, /unknown CNI_COMMAND: STATUS/);
  });

  test('the built portmap (v1.9.1) passes coil\'s 1.1.0 result on and answers STATUS ready', async () => {
    const dir = await cniPluginsDir();
    const add = await portmap(dir, 'ADD');
    assert.equal(add.code, 0, add.stdout);
    const result = JSON.parse(add.stdout) as { cniVersion: string; ips: { address: string }[] };
    assert.equal(result.cniVersion, '1.1.0');
    assert.deepEqual(result.ips.map((i) => i.address), ['10.1.0.2/32']);
    assert.deepEqual(await portmap(dir, 'STATUS'), { code: 0, stdout: '' });
    assert.equal((await portmap(dir, 'DEL')).code, 0);
  });
});
