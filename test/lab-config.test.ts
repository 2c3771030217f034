/**
 * The real-node lab's configuration, as pure functions (hack/lab/*.ts): what each part is told,
 * checked without running it. The lab itself runs in test/e2e/real-nodes.test.ts.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { BGP_RANGES, containerdRuntime, egressSelectorConfig, labChartValues } from '../hack/lab/cluster.js';
import { CONTAINERD_LINES, containerdConfig, criContainers, ctrBinary, parseContainerdLine } from '../hack/lab/containerd.js';
import type { NodeHost } from '../hack/lab/node-host.js';
import { kubeletConfig, kubeProxyArgv } from '../hack/lab/kubelet.js';
import { NODE_DIRS, nodeMountScript } from '../hack/lab/node-host.js';
import { labNodes } from '../hack/lab/topology.js';
import { birdConfig } from '../hack/lab/bird.js';
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { percentile } from '../hack/bench/pod-startup.js';
import { REAL_FAULTS, realFaultSchedule } from '../hack/lab/real-soak.js';
import { prng } from './support/prng.js';
import { mergeFlags } from './envtest/control-plane.js';

describe('the real-node lab configuration', () => {
  test('mergeFlags replaces flags of the same name and appends the others', () => {
    assert.deepEqual(
      mergeFlags(['--a=1', '--authorization-mode=RBAC', '--b'], ['--authorization-mode=Node,RBAC', '--c=3']),
      ['--a=1', '--authorization-mode=Node,RBAC', '--b', '--c=3'],
    );
    assert.deepEqual(mergeFlags(['--disable-admission-plugins=ServiceAccount'], ['--disable-admission-plugins=']), ['--disable-admission-plugins=']);
  });

  test('one node gets one coil-controller replica (hostNetwork, fixed ports); more nodes the chart default', () => {
    assert.deepEqual(labChartValues(1), ['controller.replicas=1']);
    assert.deepEqual(labChartValues(2), []);
    assert.deepEqual(labChartValues(3), []);
  });

  test('nodes are named by prefix, with one address of each family on the segment', () => {
    const nodes = labNodes(3, 'x-');
    assert.deepEqual(nodes.map((n) => [n.name, n.netnsPath, n.ipv4, n.ipv6]), [
      ['x-n1', '/run/netns/x-n1', '172.31.120.11', 'fd31:120::11'],
      ['x-n2', '/run/netns/x-n2', '172.31.120.12', 'fd31:120::12'],
      ['x-n3', '/run/netns/x-n3', '172.31.120.13', 'fd31:120::13'],
    ]);
  });

  test('BIRD: table 119 of each family into an iBGP mesh of that family (IPv6 sessions between IPv6 addresses), and bird parses it', async () => {
    const nodes = labNodes(3, 'x-');
    const conf = birdConfig(nodes[0]!, nodes, BGP_RANGES, '/tmp/x');
    for (const table of ['ipv4 table t119;', 'ipv6 table t119v6;']) assert.ok(conf.includes(table), table);
    assert.match(conf, /protocol kernel k119v6 \{\n  kernel table 119;\n  learn;/);
    assert.match(conf, /protocol bgp x_n2 from mesh \{ neighbor 172\.31\.120\.12 as 64512; \}/);
    assert.match(conf, /protocol bgp x_n3_v6 from meshv6 \{ neighbor fd31:120::13 as 64512; \}/);
    assert.match(conf, /local fd31:120::11 as 64512;/);
    assert.match(conf, /import where net ~ \[ fd00:10::\/32\+ \];/);
    assert.ok(!conf.includes('x_n1'), 'no session to itself');
    // An IPv4-only range list (the stand-in lab) has no IPv6 part.
    assert.ok(!birdConfig(nodes[0]!, nodes, '10.100.0.0/16', '/tmp/x').includes('ipv6'));
    // bird -p: parse the configuration and exit (the lab's real BIRD 2).
    const dir = await mkdtemp(join(tmpdir(), 'bird-conf-'));
    try {
      await writeFile(join(dir, 'bird.conf'), conf.replace('/tmp/x/bird.log', join(dir, 'bird.log')));
      await promisify(execFile)('bird', ['-p', '-c', join(dir, 'bird.conf')]);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  test("a node's mount namespace gets its own directories and a shared / (inside the namespace only)", () => {
    const script = nodeMountScript('/lab/n1');
    for (const [path, sub] of Object.entries(NODE_DIRS)) assert.ok(script.includes(`mount --bind /lab/n1/${sub} ${path}`), path);
    for (const d of ['/etc', '/opt', '/var']) assert.match(script, new RegExp(`mount -t overlay overlay -o lowerdir=${d},upperdir=/lab/n1/overlay${d}/upper`));
    assert.ok(script.trim().endsWith('mount --make-rshared /'));
  });

  test('containerd 1.6 (config version 2): restrict_oom_score_adj, cgroupfs, the sandbox image built here', () => {
    const toml = containerdConfig({ sandboxImage: 'coil.local/pause:1', line: '1.6' });
    assert.match(toml, /^version = 2$/m);
    assert.match(toml, /restrict_oom_score_adj = true/);
    assert.match(toml, /SystemdCgroup = false/);
    assert.match(toml, /sandbox_image = "coil.local\/pause:1"/);
  });

  // The configurations as each containerd reads them: `containerd config dump` parses the file
  // (migrating a version 3 file to containerd 2.4's version 4) and prints every setting in effect.
  for (const line of CONTAINERD_LINES) {
    test(`containerd ${line}: the settings take effect as containerd ${line} reads its config`, async () => {
      const runtime = await containerdRuntime(line);
      const dir = await mkdtemp(join(tmpdir(), 'containerd-conf-'));
      try {
        await writeFile(join(dir, 'config.toml'), containerdConfig({ sandboxImage: 'coil.local/pause:1', line }));
        const bin = runtime.binDir ? join(runtime.binDir, 'containerd') : 'containerd';
        const { stdout } = await promisify(execFile)(bin, ['--config', join(dir, 'config.toml'), 'config', 'dump'], { maxBuffer: 16 << 20 });
        const q = `['"]`;
        if (line === '2') {
          assert.match(stdout, /^version = 4$/m, 'containerd 2.4 migrates the version 3 file');
          assert.match(stdout, new RegExp(`\\[plugins\\.'io\\.containerd\\.cri\\.v1\\.images'\\.pinned_images\\]\\n\\s+sandbox = ${q}coil\\.local/pause:1${q}`));
          assert.match(stdout, new RegExp(`bin_dirs = \\[${q}/opt/cni/bin${q}\\]`));
          assert.match(stdout, new RegExp(`address = ${q}/run/containerd/containerd\\.sock${q}`));
        } else {
          assert.match(stdout, new RegExp(`sandbox_image = ${q}coil\\.local/pause:1${q}`));
          assert.match(stdout, new RegExp(`bin_dir = ${q}/opt/cni/bin${q}`));
        }
        assert.match(stdout, /restrict_oom_score_adj = true/);
        assert.match(stdout, /SystemdCgroup = false/);
        assert.match(stdout, new RegExp(`conf_dir = ${q}/etc/cni/net\\.d${q}`));
        assert.match(stdout, new RegExp(`stream_server_address = ${q}127\\.0\\.0\\.1${q}`));
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    });
  }

  test('--containerd= takes 2 (the default) or 1.6 and refuses anything else; 1.6 gets the 1.0.0 conflist', () => {
    assert.equal(parseContainerdLine(undefined), '2');
    assert.equal(parseContainerdLine('1.6'), '1.6');
    assert.throws(() => parseContainerdLine('1.7'), /--containerd=1\.7: expected one of 2, 1\.6/);
    assert.deepEqual(labChartValues(3, { cniVersion: '1.0.0' }), ['cni.netconf.cniVersion=1.0.0']);
    assert.deepEqual(labChartValues(1, {}), ['controller.replicas=1']);
    assert.equal(ctrBinary({ line: '1.6', cniPluginDir: '/usr/lib/cni' }), 'ctr');
    assert.equal(ctrBinary({ line: '2', binDir: '/c/bin', cniPluginDir: '/p' }), '/c/bin/ctr');
  });

  test('kubelet runs on cgroup v1 with cgroupfs under the node cgroup; kube-proxy leaves conntrack alone', () => {
    const c = kubeletConfig({ nodeName: 'n1', nodeIp: '172.31.120.11', cgroupRoot: '/n1', clientCaFile: 'ca', tlsCertFile: 'c', tlsKeyFile: 'k', maxPods: 250 });
    assert.equal(c.failCgroupV1, false);
    assert.equal(c.cgroupDriver, 'cgroupfs');
    assert.equal(c.cgroupRoot, '/n1');
    assert.equal(c.maxPods, 250);
    const argv = kubeProxyArgv('kube-proxy', { nodeName: 'n1', kubeconfig: 'k' });
    for (const f of ['--conntrack-max-per-core=0', '--conntrack-tcp-timeout-established=0', '--conntrack-tcp-timeout-close-wait=0']) assert.ok(argv.includes(f), f);
  });

  test("the apiserver's cluster traffic goes through the lab's CONNECT proxy", () => {
    const conf = JSON.parse(egressSelectorConfig('/lab/egress.sock')) as { egressSelections: { name: string; connection: { proxyProtocol: string; transport?: { uds?: { udsName: string } } } }[] };
    const cluster = conf.egressSelections.find((s) => s.name === 'cluster')!;
    assert.equal(cluster.connection.proxyProtocol, 'HTTPConnect');
    assert.equal(cluster.connection.transport?.uds?.udsName, '/lab/egress.sock');
  });

  test('percentile is the nearest rank', () => {
    const v = Array.from({ length: 20 }, (_, i) => i + 1);
    assert.equal(percentile(v, 50), 10);
    assert.equal(percentile(v, 95), 19);
    assert.equal(percentile(v, 100), 20);
    assert.equal(percentile([7], 95), 7);
  });

  test("the real-node soak's fault schedule: each round has every fault once, in an order drawn from the seed, spread over the run", () => {
    const schedule = realFaultSchedule(300, 2, prng(7));
    assert.equal(schedule.length, 2 * REAL_FAULTS.length);
    for (const round of [schedule.slice(0, REAL_FAULTS.length), schedule.slice(REAL_FAULTS.length)]) {
      assert.deepEqual(round.map((f) => f.name).sort(), [...REAL_FAULTS].sort());
    }
    const at = schedule.map((f) => f.at);
    assert.deepEqual(at, [...at].sort((a, b) => a - b));
    assert.ok(at[0]! > 0 && at.at(-1)! < 300, `${at}`);
    assert.deepEqual(realFaultSchedule(300, 2, prng(7)), schedule, 'the same seed, the same schedule');
    const orders = new Set([1, 2, 3, 4, 5, 6].map((seed) => realFaultSchedule(300, 1, prng(seed)).map((f) => f.name).join()));
    assert.ok(orders.size > 1, 'seeds give different orders');
  });

  test('criContainers leaves out a container removed between the listing and its info (a pod deleted meanwhile), and the sandboxes', async () => {
    const labels = (pod: string, container: string) => ({ Labels: { 'io.kubernetes.pod.namespace': 'kube-system', 'io.kubernetes.pod.name': pod, 'io.kubernetes.container.name': container } });
    const host = {
      exec: async (argv: string[]) => {
        const args = argv.slice(argv.indexOf('--namespace') + 2);
        if (args.join(' ') === 'containers ls') return 'CONTAINER IMAGE RUNTIME\ngone x io.containerd.runc.v2\nsandbox x io.containerd.runc.v2\nc1 x io.containerd.runc.v2\n';
        const id = args[2];
        if (id === 'gone') throw new Error(`ctr containers info gone: ctr: container "gone" in namespace "k8s.io": not found`);
        return JSON.stringify(id === 'sandbox' ? labels('coild-x', 'POD') : labels('coild-x', 'coild'));
      },
    } as unknown as NodeHost;
    assert.deepEqual(await criContainers(host), [{ id: 'c1', namespace: 'kube-system', pod: 'coild-x', container: 'coild' }]);
    const broken = { exec: async (argv: string[]) => (argv.includes('ls') ? 'CONTAINER\nc1\n' : Promise.reject(new Error('connection refused'))) } as unknown as NodeHost;
    await assert.rejects(criContainers(broken), /connection refused/, 'other failures still fail');
  });
});
