/**
 * The stand-in lab starts over what a killed real-node lab left. Both labs use /tmp/coil-lab and
 * the `coillab-` prefix; a real-node lab killed with SIGKILL leaves its node cgroups (containerd
 * and its shims outlive it), its pinned mount namespaces and the private bind mount of their pin
 * dir. A CI run on a machine where an earlier run was killed so failed every stand-in lab test
 * with `EBUSY: rmdir '/tmp/coil-lab/ns'`.
 *
 * The leftovers are made here as hack/lab/node-host.ts makes a real node (pin dir, mount
 * namespace with the node's overlays and bind mounts, cgroup), with a process in the node that
 * outlives this test's process, as a containerd shim would.
 */
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { after, describe, test } from 'node:test';
import { Cluster } from '../../hack/lab/cluster.js';
import { NodeHost, pinDir } from '../../hack/lab/node-host.js';
import { LAB_DIR, StandInLab } from '../../hack/lab/stand-in-lab.js';
import { LAB_PREFIX } from '../../hack/lab/topology.js';
import { eventually } from '../envtest/control-plane.js';
import { prerequisite } from '../support/prerequisite.js';

const run = promisify(execFile);
const isRoot = process.getuid?.() === 0;
const place = { prefix: LAB_PREFIX, dir: LAB_DIR };

describe('lab down after a killed real-node lab', { skip: prerequisite(isRoot ? undefined : 'the lab needs root (namespaces, cgroups, mounts)') }, () => {
  after(() => Cluster.down(place));

  test('StandInLab.down removes the node hosts, their processes and mounts, and the dir', async () => {
    await Cluster.down(place);
    const name = `${LAB_PREFIX}n1`;
    await run('ip', ['netns', 'add', name]);
    const pins = join(LAB_DIR, 'ns');
    await pinDir(pins);
    const host = await NodeHost.create({ name, dir: join(LAB_DIR, name), netnsPath: `/run/netns/${name}`, cgroup: `/${name}`, pinDir: pins });
    const [command, ...args] = host.argv(['sleep', '600']);
    spawn(command!, args, { detached: true, stdio: 'ignore' }).unref();
    const left = await Cluster.leftovers(place);
    assert.ok(left.mounts.length > 0, 'the node host pinned its mount namespace under the lab dir');
    assert.ok(left.netns.includes(name));
    await eventually(async () => (await Cluster.leftovers(place)).processes.length > 0, { timeoutMs: 5000 });

    await StandInLab.down();

    assert.deepEqual(await Cluster.leftovers(place), { netns: [], mounts: [], cgroups: [], processes: [], dir: false });
  });
});
