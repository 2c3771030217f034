// IpRunner against real iproute2 in throwaway namespaces; the retry test uses a stub `ip`
// because the kernel cannot be made to answer EBUSY on demand.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { IpRunner, formatBatchLine, parseBatchFailures } from './ip-runner.js';
import { NetlinkError } from '../netlink-error.js';
import { rt } from '../rt-request.js';
import { readLinks } from '../link.js';
import { TestNetnsSet, netnsSkipReason, type TestNetns } from '../../../test/netns/test-netns.js';
import { prerequisite } from '../../../test/support/prerequisite.js';

describe('formatBatchLine / parseBatchFailures', () => {
  test('joins safe tokens with spaces', () => {
    assert.equal(formatBatchLine(['link', 'set', 'dev', 'veth0', 'alias', 'COIL:p:c-1.2_3:eth0']), 'link set dev veth0 alias COIL:p:c-1.2_3:eth0');
  });
  test('refuses tokens ip -batch would split, quote or comment', () => {
    for (const bad of ['a b', 'a\nb', '"x"', "it's", 'a\\b', '#x', '']) {
      assert.throws(() => formatBatchLine(['link', 'set', 'dev', bad]), TypeError, JSON.stringify(bad));
    }
  });
  test('maps each "Command failed -:N" to the message before it', () => {
    const f = parseBatchFailures('RTNETLINK answers: File exists\nCommand failed -:2\nCannot find device "x"\nCommand failed -:5\n');
    assert.deepEqual(f, [
      { line: 2, message: 'RTNETLINK answers: File exists', errno: 'EEXIST' },
      { line: 5, message: 'Cannot find device "x"', errno: 'ENODEV' },
    ]);
  });
});

describe('IpRunner in real network namespaces', { skip: prerequisite(netnsSkipReason()) }, () => {
  const ip = new IpRunner();
  const netns = new TestNetnsSet({ ip });
  let ns: TestNetns;
  before(async () => { ns = await netns.create('runner'); });
  after(() => netns.cleanup());

  test('batch runs every line inside the netns given by a /run/netns path', async () => {
    await ip.batch([['link', 'add', 'ra0', 'type', 'veth', 'peer', 'name', 'rb0'], ['link', 'set', 'dev', 'ra0', 'up']], { netns: ns.path });
    const links = await readLinks(ip, { netns: ns.path });
    assert.deepEqual(links.map((l) => l.ifname).sort(), ['lo', 'ra0', 'rb0']);
    assert.ok(links.find((l) => l.ifname === 'ra0')?.flags.includes('UP'));
  });

  test('a netns path outside /run/netns is entered with nsenter', async () => {
    const sleeper = spawn('ip', ['netns', 'exec', ns.name, 'sleep', '30'], { stdio: 'ignore' });
    try {
      await new Promise((r) => setTimeout(r, 100));
      const links = await readLinks(ip, { netns: `/proc/${sleeper.pid}/ns/net` });
      assert.ok(links.some((l) => l.ifname === 'ra0'), 'sees the links of the test netns');
    } finally {
      sleeper.kill();
    }
  });

  test('a failing line throws NetlinkError naming the command, its line and the kernel message', async () => {
    const err = await ip.batch([['link', 'set', 'dev', 'lo', 'up'], ['link', 'del', 'dev', 'nosuch0']], { netns: ns.path })
      .then(() => undefined, (e: unknown) => e);
    assert.ok(err instanceof NetlinkError);
    assert.equal(err.failedRequest, 2);
    assert.equal(err.errno, 'ENODEV');
    assert.equal(err.command, `ip -n ${ns.name} link del dev nosuch0`);
    assert.match((err.cause as Error).message, /Cannot find device "nosuch0"/);
    assert.equal(err.isTransient, false);
  });

  test('onError "stop" skips the lines after a failure; "continue" runs them and reports all', async () => {
    const lines = [['link', 'del', 'dev', 'nosuch1'], ['link', 'add', 'rc0', 'type', 'veth', 'peer', 'name', 'rd0'], ['link', 'del', 'dev', 'nosuch2']];
    await assert.rejects(ip.batch(lines, { netns: ns.path }), NetlinkError);
    assert.ok(!(await readLinks(ip, { netns: ns.path })).some((l) => l.ifname === 'rc0'));
    const err = await ip.batch(lines, { netns: ns.path, onError: 'continue' }).then(() => undefined, (e: unknown) => e);
    assert.ok(err instanceof NetlinkError && err.failedRequest === 1 && /line 3/.test(err.message));
    assert.ok((await readLinks(ip, { netns: ns.path })).some((l) => l.ifname === 'rc0'));
  });

  test('an unsafe token throws TypeError and runs nothing', async () => {
    await assert.rejects(ip.batch([['link', 'add', 're0', 'type', 'veth'], ['link', 'set', 'dev', 're0', 'alias', 'a b']], { netns: ns.path }), TypeError);
    assert.ok(!(await readLinks(ip, { netns: ns.path })).some((l) => l.ifname === 're0'));
  });

  test('batchSequence without the agent runs the steps one by one and stops at the first failure', async () => {
    const step = (lines: string[][]) => ({ lines, options: { netns: ns.path } });
    assert.deepEqual(await ip.batchSequence([step([['link', 'add', 'rf0', 'type', 'veth', 'peer', 'name', 'rg0']]), step([['link', 'set', 'dev', 'rf0', 'up']])]), { ok: true });
    const o = await ip.batchSequence([step([['link', 'set', 'dev', 'rf0', 'down']]), step([['link', 'del', 'dev', 'nosuch4']]), step([['link', 'del', 'dev', 'rf0']])]);
    assert.ok(!o.ok && o.step === 1 && o.error instanceof NetlinkError && o.error.errno === 'ENODEV');
    assert.ok((await readLinks(ip, { netns: ns.path })).some((l) => l.ifname === 'rf0'), 'the step after the failed one ran');
    const bad = await ip.batchSequence([step([['link', 'del', 'dev', 'rf0']]), step([['link', 'set', 'dev', 'a b']])]);
    assert.ok(!bad.ok && bad.step === 1 && bad.error instanceof TypeError);
    assert.ok((await readLinks(ip, { netns: ns.path })).some((l) => l.ifname === 'rf0'), 'an unsafe token anywhere runs nothing');
  });

  test('json reads parse and a missing device is ENODEV', async () => {
    const [lo] = await readLinks(ip, { netns: ns.path, dev: 'lo' });
    assert.equal(lo?.link_type, 'loopback');
    await assert.rejects(readLinks(ip, { netns: ns.path, dev: 'nosuch3' }), (e: unknown) => e instanceof NetlinkError && e.errno === 'ENODEV');
  });
});

describe('IpRunner process handling (stub programs)', () => {
  let dir: string;
  before(async () => { dir = await mkdtemp(join(tmpdir(), 'coil-ip-runner-')); });
  after(() => rm(dir, { recursive: true, force: true }));

  test('a transient failure at line k is retried from line k', async () => {
    const stub = join(dir, 'ip-busy');
    await writeFile(stub, `#!/bin/sh\nn=$(cat "${dir}/n" 2>/dev/null || echo 0); echo $((n+1)) > "${dir}/n"\ncat > "${dir}/in$n"\n`
      + `if [ "$n" = 0 ]; then echo 'RTNETLINK answers: Device or resource busy' >&2; echo 'Command failed -:2' >&2; exit 1; fi\n`);
    await chmod(stub, 0o755);
    const runner = new IpRunner({ ipPath: stub, retry: { attempts: 3, initialDelayMs: 1, maxDelayMs: 1 } });
    await runner.batch([['link', 'set', 'dev', 'a', 'up'], ['link', 'set', 'dev', 'b', 'up'], ['link', 'set', 'dev', 'c', 'up']]);
    assert.equal(await readFile(join(dir, 'in1'), 'utf8'), 'link set dev b up\nlink set dev c up\n');
  });

  test('a program that cannot start is a NetlinkError whose cause is the spawn error', async () => {
    const runner = new IpRunner({ ipPath: join(dir, 'missing-ip') });
    const err = await runner.json(['link', 'show']).then(() => undefined, (e: unknown) => e);
    assert.ok(err instanceof NetlinkError && err.exitCode === null);
    assert.equal((err.cause as NodeJS.ErrnoException).code, 'ENOENT');
  });

  test('a process running past timeoutMs is killed and reported', async () => {
    const stub = join(dir, 'ip-hang');
    await writeFile(stub, '#!/bin/sh\nexec sleep 5\n');
    await chmod(stub, 0o755);
    const runner = new IpRunner({ ipPath: stub, timeoutMs: 100 });
    await assert.rejects(runner.json(['link', 'show']), (e: unknown) => e instanceof NetlinkError && /killed by SIGTERM/.test(e.stderr));
  });
});
